/**
 * Keeps one vLLM server usable: a child we start (launcher.ts), restarted with backoff when it exits, or a server
 * the operator runs, watched through `/health`. Either way it is `ready` only after it answered and got back what it
 * must hold (the sampler's `restore`: its adapters). A child is `idle` until something first needs it (a request,
 * a model created on its base): a base nobody uses costs no memory. Requests wait for a child that starts or
 * restarts; a watched server that does not answer fails them at once, naming it. A child that fails to start three
 * times in a row (before it answers; ever having served does not reset this) is `failed` for good, with its last
 * output as the reason (a base model vLLM cannot load, not enough memory), shown by the system check; one the
 * launcher refused outright (no vLLM, not enough free memory for its KV cache) is `failed` at the first try.
 */
import { EngineError } from '../errors.ts';
import type { EngineLogger } from '../logger.ts';
import { VllmHttp } from './http.ts';
import { type LaunchedVllm, launchVllm, type VllmLaunchSpec, VllmStartRefused } from './launcher.ts';

export type VllmState = 'stopped' | 'idle' | 'starting' | 'ready' | 'restarting' | 'failed';

export interface VllmEndpointOptions {
  /** How errors and the system check name it: "vLLM for <base>" or "vLLM at <url>". */
  name: string;
  /** A server the operator runs; null: start `launch` as a child. */
  url: string | null;
  launch: VllmLaunchSpec | null;
  apiKey: string | null;
  logger: EngineLogger;
  /** Puts back what the server must hold, before it serves requests. */
  restore(http: VllmHttp): Promise<void>;
  readyTimeoutMs?: number;
  requestWaitMs?: number;
  healthEveryMs?: number;
}

const FAILURES_BEFORE_GIVING_UP = 3;

export class VllmEndpoint {
  state: VllmState = 'stopped';
  restarts = 0;
  error: string | null = null;
  lastExit: { code: number | null; signal: string | null; at: string } | null = null;
  private http: VllmHttp | null = null;
  private child: LaunchedVllm | null = null;
  private waiters = new Set<{ resolve(http: VllmHttp): void; reject(error: EngineError): void }>();
  private stopping: (() => void) | null = null;
  private readonly options: Required<VllmEndpointOptions>;

  constructor(options: VllmEndpointOptions) {
    this.options = {
      ...options,
      readyTimeoutMs: options.readyTimeoutMs ?? 20 * 60_000,
      requestWaitMs: options.requestWaitMs ?? 10 * 60_000,
      healthEveryMs: options.healthEveryMs ?? 2000,
    };
  }

  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  get url(): string | null {
    return this.http?.url ?? this.options.url;
  }

  /** A server the operator runs is watched from now; a child is started when it is first needed (`ready`, `wake`). */
  start(): void {
    if (this.state !== 'stopped') return;
    if (this.options.url === null) this.state = 'idle';
    else this.wakeNow();
  }

  /** Starts an idle child now, without waiting for it. */
  wake(): void {
    if (this.state === 'idle') this.wakeNow();
  }

  private wakeNow(): void {
    this.state = 'starting';
    void this.supervise();
  }

  async stop(): Promise<void> {
    this.state = 'stopped';
    this.stopping?.();
    this.settleAll(new EngineError('engine_unavailable', `${this.options.name} was stopped`));
    await this.child?.stop(30_000);
  }

  /** The server's HTTP client once it is ready; waits for a child that starts, fails at once for a watched server that is down. */
  ready(): Promise<VllmHttp> {
    if (this.state === 'ready' && this.http) return Promise.resolve(this.http);
    this.wake();
    const { name, url, requestWaitMs } = this.options;
    if (this.state === 'stopped')
      return Promise.reject(new EngineError('engine_unavailable', `${name} is not running`));
    if (this.state === 'failed')
      return Promise.reject(new EngineError('engine_unavailable', `${name} failed to start: ${this.error}`));
    if (url !== null && this.state === 'restarting')
      return Promise.reject(
        new EngineError('engine_unavailable', `the vLLM sampler at ${url} is not answering (${this.error})`),
      );
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => settle(new EngineError('engine_unavailable', `${name} was not ready within ${requestWaitMs} ms`)),
        requestWaitMs,
      );
      const waiter = { resolve: (http: VllmHttp) => settle(http), reject: (error: EngineError) => settle(error) };
      const settle = (outcome: VllmHttp | EngineError) => {
        clearTimeout(timer);
        this.waiters.delete(waiter);
        if (outcome instanceof EngineError) reject(outcome);
        else resolve(outcome);
      };
      this.waiters.add(waiter);
    });
  }

  /** Health right now, for the system check: `/health` within `timeoutMs`; an idle child is fine (it starts when needed). */
  async probe(timeoutMs = 2500): Promise<void> {
    if (this.state === 'idle') return;
    if (this.state !== 'ready' || !this.http)
      throw new EngineError(
        'engine_unavailable',
        `${this.options.name} is ${this.state}${this.error ? `: ${this.error}` : ''}`,
      );
    await this.http.json('GET', '/health', undefined, { timeoutMs });
  }

  private settleAll(outcome: VllmHttp | EngineError): void {
    for (const waiter of [...this.waiters]) {
      if (outcome instanceof EngineError) waiter.reject(outcome);
      else waiter.resolve(outcome);
    }
  }

  /** One life after another until stopped: open (start or watch), wait until it answers, serve, notice it is gone. */
  private async supervise(): Promise<void> {
    let failedStarts = 0;
    while (this.state !== 'stopped') {
      let refused = false;
      const served = await this.live().catch((error: Error) => {
        this.error = error.message;
        refused = error instanceof VllmStartRefused;
        this.options.logger.warn({ name: this.options.name, error: error.message }, 'vLLM did not start');
        return false;
      });
      if ((this.state as VllmState) === 'stopped') return;
      failedStarts = served ? 0 : failedStarts + 1;
      if (this.options.url === null && (refused || failedStarts >= FAILURES_BEFORE_GIVING_UP)) {
        this.state = 'failed';
        this.options.logger.error(
          { name: this.options.name, error: this.error, starts: failedStarts },
          `vLLM gave up after ${failedStarts} failed start${failedStarts === 1 ? '' : 's'}`,
        );
        this.settleAll(new EngineError('engine_unavailable', `${this.options.name} failed to start: ${this.error}`));
        return;
      }
      this.state = 'restarting';
      if (this.options.url !== null)
        this.settleAll(
          new EngineError(
            'engine_unavailable',
            `the vLLM sampler at ${this.options.url} is not answering (${this.error})`,
          ),
        );
      await this.pause(
        this.options.url === null ? Math.min(15_000, 500 * 2 ** failedStarts) : this.options.healthEveryMs,
      );
      if (this.options.url === null) this.restarts += 1;
    }
  }

  /** One life: resolves true once it was ready and then went away, false if it never became ready. */
  private async live(): Promise<boolean> {
    const { url, launch, apiKey, name, logger } = this.options;
    let exited: Promise<unknown> = new Promise(() => undefined);
    if (url === null) {
      this.child = await launchVllm(launch!, logger);
      const child = this.child;
      exited = child.exited.then((status) => {
        this.lastExit = { ...status, at: new Date().toISOString() };
        this.error = `exited (${status.signal ?? `code ${status.code}`}): ${lastError(child.tail())}`;
      });
    }
    const http = new VllmHttp(url ?? this.child!.url, apiKey, name);
    const healthy = await this.waitHealthy(http, exited);
    if (!healthy) {
      await this.child?.stop(5_000);
      return false;
    }
    await this.options.restore(http);
    if (this.state === 'stopped') return true;
    this.http = http;
    this.error = null;
    this.state = 'ready';
    logger.info({ name, url: http.url }, 'vLLM ready');
    this.settleAll(http);
    await this.watch(http, exited);
    this.http = null;
    await this.child?.stop(5_000);
    return true;
  }

  private async waitHealthy(http: VllmHttp, exited: Promise<unknown>): Promise<boolean> {
    const deadline = Date.now() + (this.options.url === null ? this.options.readyTimeoutMs : 0);
    let gone = false;
    void exited.then(() => (gone = true));
    do {
      if (gone || this.state === 'stopped') return false;
      try {
        await http.json('GET', '/health', undefined, { timeoutMs: 2000 });
        return true;
      } catch (error) {
        if (this.options.url !== null) this.error = (error as Error).message;
      }
      await this.pause(1000);
    } while (Date.now() < deadline);
    this.error ??= `not healthy within ${this.options.readyTimeoutMs} ms`;
    return false;
  }

  /**
   * Until the child exits or the server stops answering `/health`: twice in a row for a server we watch; five times for
   * a child (its exit is the sure sign, and a child on a busy machine may answer slowly without being gone).
   */
  private async watch(http: VllmHttp, exited: Promise<unknown>): Promise<void> {
    let gone = false;
    void exited.then(() => (gone = true));
    let misses = 0;
    const allowed = this.options.url === null ? 5 : 2;
    while (!gone && this.state === 'ready' && misses < allowed) {
      await Promise.race([this.pause(this.options.healthEveryMs), exited]);
      if (gone || this.state !== 'ready') break;
      try {
        await http.json('GET', '/health', undefined, { timeoutMs: 10_000 });
        misses = 0;
      } catch (error) {
        misses += 1;
        this.error = (error as Error).message;
      }
    }
    if (this.state === 'ready') this.state = 'restarting';
    this.options.logger.warn({ name: this.options.name, error: this.error }, 'vLLM went away');
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.stopping = done;
    });
  }
}

/** The line of a failed start that says why (Python's last exception line), else its last line. */
function lastError(tail: string): string {
  const lines = tail.split('\n').filter(Boolean);
  return [...lines].reverse().find((line) => /Error|error:|Exception/.test(line)) ?? lines.at(-1) ?? 'no output';
}
