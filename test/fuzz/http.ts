/**
 * A fuzz request and how it goes over the wire: node:http with the path sent byte for byte (fetch would
 * normalise or refuse bad escapes), any headers, any body. The outcome is a status, or a named network
 * failure ('timeout', 'reset', …); a streamed chat answer that carries a 5xx error event counts as that 5xx.
 */
import http from 'node:http';
import { serialize } from './hostile.ts';

export interface Draft {
  /** The route as the histogram names it, e.g. "GET /v1/preview/models/:model_id". */
  label: string;
  method: string;
  template: string;
  params: Record<string, string>;
  /** Params already in their final, percent-encoded (or deliberately broken) form. */
  rawParams: Set<string>;
  query: string;
  headers: Record<string, string>;
  /** JSON body as a value (with `Raw` parts), or bytes, or nothing. */
  body?: unknown;
  bytes?: Buffer;
  /** Set where any 2xx answer is a finding (it says why): e.g. an import of an adapter holding NaN. */
  mustRefuse?: string;
}

export interface Outcome {
  status: number | string;
  ms: number;
  detail: string;
}

/** Percent-encodes a path segment; a lone surrogate (which encodeURIComponent refuses) goes as U+FFFD, as UTF-8 would carry it. */
function encodeSegment(value: string): string {
  return encodeURIComponent(Buffer.from(value, 'utf8').toString('utf8'));
}

export function renderPath(draft: Draft): string {
  // A trailing `*` (a wildcard route) takes the param '*', a path of several segments.
  const path = draft.template.replace(/:([a-zA-Z_]+)|\*$/g, (_match, name: string | undefined) => {
    const value = draft.params[name ?? '*'] ?? '';
    if (draft.rawParams.has(name ?? '*')) return value;
    return name ? encodeSegment(value) : value.split('/').map(encodeSegment).join('/');
  });
  return draft.query ? `${path}?${draft.query}` : path;
}

export function renderBody(draft: Draft): Buffer | undefined {
  if (draft.bytes) return draft.bytes;
  if (draft.body === undefined) return undefined;
  return Buffer.from(serialize(draft.body));
}

/** The first 5xx error event in an SSE body, if any. */
function streamedServerError(text: string): number | null {
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const code = /"error":\{.*"code":(\d{3})\}/.exec(line)?.[1];
    if (code && Number(code) >= 500) return Number(code);
  }
  return null;
}

export function send(baseUrl: string, draft: Draft, timeoutMs: number): Promise<Outcome> {
  const url = new URL(baseUrl);
  const body = renderBody(draft);
  const headers: Record<string, string | number> = { ...draft.headers };
  if (body && !Object.keys(headers).some((name) => name.toLowerCase() === 'content-length'))
    headers['content-length'] = body.length;
  const started = performance.now();
  return new Promise((resolve) => {
    const finish = (status: number | string, detail: string) =>
      resolve({ status, ms: performance.now() - started, detail: detail.slice(0, 300) });
    let request: http.ClientRequest;
    try {
      request = open();
    } catch (error) {
      // Node itself refuses some headers and paths; such a request never reaches the server.
      return finish('unsendable', (error as Error).message);
    }
    request.setTimeout(timeoutMs, () => {
      request.destroy();
      finish('timeout', `no answer within ${timeoutMs} ms`);
    });
    request.on('error', (error: NodeJS.ErrnoException) =>
      finish(error.code === 'ECONNREFUSED' ? 'refused' : 'reset', error.message),
    );
    request.end(body);

    function open() {
      return http.request(
        { host: url.hostname, port: url.port, method: draft.method, path: renderPath(draft), headers, agent: false },
        (response) => {
          const chunks: Buffer[] = [];
          let size = 0;
          response.on('data', (chunk: Buffer) => {
            // Keep the head of the answer only: a download or an echo may be large.
            if (size < 1 << 20) chunks.push(chunk);
            size += chunk.length;
          });
          response.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            const streamed = String(response.headers['content-type'] ?? '').startsWith('text/event-stream')
              ? streamedServerError(text)
              : null;
            finish(streamed ?? response.statusCode ?? 'no-status', streamed ? `in stream: ${text}` : text);
          });
          response.on('error', (error) => finish('reset', error.message));
        },
      );
    }
  });
}
