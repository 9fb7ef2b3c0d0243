/**
 * HTTP to one vLLM OpenAI server: JSON requests with its key, and server-sent event streams read chunk by chunk.
 * Every failure is an `EngineError`: an error answer by its status (wire.ts), a server that does not answer
 * `engine_unavailable`, a stream cut short `engine_exited`. An abort signal cancels the request in vLLM (it drops
 * a request whose client disconnected).
 */
import { EngineError } from '../errors.ts';
import { errorOf } from './wire.ts';

export class VllmHttp {
  constructor(
    readonly url: string,
    private readonly apiKey: string | null,
    readonly peer: string,
  ) {}

  /** A JSON request; a text answer (the LoRA endpoints answer text) comes back as a string. */
  async json<T = unknown>(
    method: string,
    route: string,
    body?: unknown,
    options: { signal?: AbortSignal; timeoutMs?: number } = {},
  ): Promise<T> {
    const signal = options.timeoutMs
      ? AbortSignal.any([AbortSignal.timeout(options.timeoutMs), ...(options.signal ? [options.signal] : [])])
      : options.signal;
    const response = await this.send(method, route, body, signal);
    const text = await response.text().catch((error: Error) => {
      throw this.lost(error);
    });
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      // a plain-text answer stays a string
    }
    if (!response.ok) throw errorOf(response.status, parsed, this.peer);
    return parsed as T;
  }

  /** The `data:` payloads of a server-sent event stream, parsed, until `[DONE]`; an `{error}` event throws. */
  async *events(route: string, body: unknown, signal: AbortSignal): AsyncGenerator<Record<string, unknown>> {
    const response = await this.send('POST', route, body, signal);
    if (!response.ok || !response.body) {
      const text = await response.text().catch(() => '');
      throw errorOf(response.status, safeJson(text), this.peer);
    }
    const decoder = new TextDecoder();
    let buffered = '';
    try {
      for await (const chunk of response.body) {
        buffered += decoder.decode(chunk as Uint8Array, { stream: true });
        for (let end = buffered.indexOf('\n\n'); end !== -1; end = buffered.indexOf('\n\n')) {
          const event = buffered.slice(0, end);
          buffered = buffered.slice(end + 2);
          const data = event
            .split('\n')
            .filter((line) => line.startsWith('data:'))
            .map((line) => line.slice(5).trim())
            .join('\n');
          if (data === '[DONE]') return;
          if (!data) continue;
          const parsed = safeJson(data) as Record<string, unknown>;
          if (parsed && typeof parsed === 'object' && 'error' in parsed)
            throw errorOf(Number((parsed.error as { code?: unknown })?.code) || 500, parsed, this.peer);
          yield parsed;
        }
      }
    } catch (error) {
      if (error instanceof EngineError || signal.aborted) throw error;
      throw this.lost(error as Error);
    }
    throw new EngineError('engine_exited', `${this.peer} ended the stream before [DONE] (did it exit?)`);
  }

  private async send(method: string, route: string, body: unknown, signal: AbortSignal | undefined): Promise<Response> {
    const headers: Record<string, string> = body === undefined ? {} : { 'content-type': 'application/json' };
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    try {
      return await fetch(`${this.url}${route}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
      });
    } catch (error) {
      if (signal?.aborted && signal.reason instanceof EngineError) throw signal.reason;
      if (signal?.aborted && (signal.reason as Error)?.name !== 'TimeoutError')
        throw new EngineError('cancelled', 'cancelled');
      throw new EngineError('engine_unavailable', `${this.peer} is not answering (${describe(error)})`);
    }
  }

  private lost(error: Error): EngineError {
    return new EngineError(
      'engine_exited',
      `${this.peer} closed the connection while this request was in flight (${describe(error)})`,
    );
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** fetch's "fetch failed" hides the reason in `cause` (ECONNREFUSED, a reset). */
function describe(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (error as Error).message ?? String(error);
}
