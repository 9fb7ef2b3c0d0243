/**
 * Keeps one engine alive: spawns `python -m engine` in the repo root (or connects to a remote one
 * over TCP), waits for its `ready` frame, logs its stderr, restarts it (reconnects to it) with backoff
 * when it exits, and puts back the bases and adapters it was asked to load before answering requests
 * again. Requests that were in flight when the process died (or the connection dropped) fail with
 * `engine_exited`; requests made while it restarts wait for it. Offers the same `Engine` interface
 * as the client (its `request` wrapped once), so callers never hold a dead connection.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { EngineClient } from './client.ts';
import { EngineError } from './errors.ts';
import { DeferredStream, type GenerateStream } from './generate-stream.ts';
import type { EngineLogger } from './logger.ts';
import type { Engine, OpReply, OpRequest, UnaryOp } from './ops.ts';
import type { EngineSupport, GenerateRequest, ReadyEvent, StatsReply } from './protocol.ts';
import { findEnginePython } from './python.ts';
import { Restorable } from './restorable.ts';

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const STDERR_LINES_KEPT = 20;

/** A remote engine (`python -m engine --tcp HOST:PORT`) and the secret its first frame must carry. */
export interface RemoteEngine {
  host: string;
  port: number;
  secret: string | null;
}

export interface EngineSupervisorOptions {
  logger: EngineLogger;
  /** Connect to this engine instead of spawning a child process. */
  remote?: RemoteEngine | null;
  /** The Python to run (config's ENGINE_PYTHON); by default the first that can import torch. */
  python?: string | null;
  /** Arguments after `-m engine`, e.g. `['--max-adapters', '8']`. */
  args?: string[];
  /** Python arguments before `-m engine`: a launcher that starts the engine's ranks (torch.distributed.run's). */
  launcher?: string[];
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** From spawn to the `ready` frame; a slower start is killed and retried. */
  readyTimeoutMs?: number;
  /** How long a request waits for a starting or restarting engine before `engine_unavailable`. */
  requestWaitMs?: number;
  /** Restart delays double from `initialMs` up to `maxMs`; a run that lasted `stableAfterMs` resets them. */
  restartBackoff?: { initialMs: number; maxMs: number; stableAfterMs: number };
  /** How many of the most recently used adapters are re-made after a restart; the engine keeps no more resident anyway. */
  maxRestoredAdapters?: number;
  /** After asking the engine to stop (closing its stdin), how long before SIGKILL. */
  stopGraceMs?: number;
}

/** `failed`: the engine said it cannot start here (its `failed` frame); it is not restarted. */
export type EngineState = 'stopped' | 'starting' | 'ready' | 'restarting' | 'failed';

export interface EngineHealth {
  state: EngineState;
  pid: number | null;
  /** `tcp://host:port` of a remote engine; null for a child process. */
  url: string | null;
  /** Processes started after the first. */
  restarts: number;
  /** The current process's ready frame (device, dtype, torch, matmul rate); null until ready. */
  engine: ReadyEvent | null;
  lastExit: { code: number | null; signal: string | null; at: string } | null;
  /** Why the last start did not become ready (the engine's own words, or its exit and last log lines); null once ready. */
  lastError: string | null;
  inFlight: number;
}

/** One process (or connection) of the engine, from start to exit. */
interface Run {
  client: EngineClient;
  pid: number | null;
  startedAt: number;
  exited: Promise<void>;
  /** SIGKILL for a child; dropping the connection for a remote engine (which goes on for the next one). */
  kill(): void;
  /** Its last lines on stderr, for saying why it ended before it was ready. */
  lastLines: string[];
  ready: boolean;
}

interface Waiter {
  resolve(client: EngineClient): void;
  reject(error: EngineError): void;
  timer: NodeJS.Timeout;
}

export class EngineSupervisor implements Engine {
  private state: EngineState = 'stopped';
  private run: Run | undefined;
  private engine: ReadyEvent | null = null;
  private restarts = 0;
  private failuresInARow = 0;
  private lastExit: EngineHealth['lastExit'] = null;
  private lastError: string | null = null;
  private restartTimer: NodeJS.Timeout | undefined;
  private readonly waiters = new Set<Waiter>();
  /** What to load again after a restart, in the order it was last asked for. */
  private readonly restorable: Restorable;
  private readonly options: Required<Omit<EngineSupervisorOptions, 'python' | 'env' | 'remote' | 'launcher'>> &
    Pick<EngineSupervisorOptions, 'python' | 'env' | 'remote' | 'launcher'>;

  constructor(options: EngineSupervisorOptions) {
    const readyTimeoutMs = options.readyTimeoutMs ?? 120_000;
    this.options = {
      logger: options.logger,
      python: options.python,
      env: options.env,
      remote: options.remote,
      launcher: options.launcher,
      args: options.args ?? [],
      cwd: options.cwd ?? REPO_ROOT,
      readyTimeoutMs,
      requestWaitMs: options.requestWaitMs ?? readyTimeoutMs,
      restartBackoff: options.restartBackoff ?? { initialMs: 500, maxMs: 15_000, stableAfterMs: 30_000 },
      maxRestoredAdapters: options.maxRestoredAdapters ?? 32,
      stopGraceMs: options.stopGraceMs ?? 5_000,
    };
    this.restorable = new Restorable(this.options.maxRestoredAdapters);
  }

  /** Starts the engine in the background; `waitUntilReady` tells when it answers. */
  start(): void {
    if (this.state !== 'stopped') return;
    this.state = 'starting';
    void this.spawnEngine();
  }

  /** Resolves when the engine answers (restored included); rejects after `requestWaitMs`. */
  async waitUntilReady(): Promise<ReadyEvent> {
    await this.client();
    if (!this.engine) throw new EngineError('engine_unavailable', 'the engine exited as it became ready');
    return this.engine;
  }

  /** Stops the engine and fails whatever is in flight or waiting. */
  async stop(): Promise<void> {
    this.state = 'stopped';
    clearTimeout(this.restartTimer);
    for (const waiter of this.waiters)
      this.settle(waiter, new EngineError('engine_unavailable', 'the engine was stopped'));
    const run = this.run;
    if (!run) return;
    // Closing stdin asks the engine to finish; SIGKILL if it does not in time.
    run.client.close(new EngineError('engine_exited', 'the engine was stopped while this request was in flight'));
    const kill = setTimeout(() => run.kill(), this.options.stopGraceMs);
    await run.exited;
    clearTimeout(kill);
  }

  health(): EngineHealth {
    return {
      state: this.state,
      pid: this.run?.pid ?? null,
      url: this.options.remote ? `tcp://${this.options.remote.host}:${this.options.remote.port}` : null,
      restarts: this.restarts,
      engine: this.engine,
      lastExit: this.lastExit,
      lastError: this.lastError,
      inFlight: this.run?.client.inFlight ?? 0,
    };
  }

  /** For the system check: the engine's `stats`, only if it is up now and answers. */
  async probe(): Promise<StatsReply> {
    if (this.state !== 'ready' || !this.run)
      throw new EngineError(
        'engine_unavailable',
        `the engine is ${this.state}${this.lastError ? `: ${this.lastError}` : ''}`,
      );
    return this.run.client.request('stats', {});
  }

  /** Any op, once the engine is ready; what it loads is remembered for a restart. */
  async request<O extends UnaryOp>(op: O, body: OpRequest<O>): Promise<OpReply<O>> {
    const reply = await (await this.client()).request(op, body);
    this.restorable.remember(op, body, reply);
    return reply;
  }

  generate(request: GenerateRequest): GenerateStream {
    return new DeferredStream(async () => (await this.client()).generate(request));
  }

  /** The connection of a ready engine, waiting for one while it starts or restarts. */
  private client(): Promise<EngineClient> {
    if (this.state === 'ready' && this.run) return Promise.resolve(this.run.client);
    if (this.state === 'stopped')
      return Promise.reject(new EngineError('engine_unavailable', 'the engine is not running'));
    if (this.state === 'failed')
      return Promise.reject(new EngineError('engine_unavailable', this.lastError ?? 'failed'));
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        resolve,
        reject,
        timer: setTimeout(() => {
          const error = new EngineError(
            'engine_unavailable',
            `the engine was not ready within ${this.options.requestWaitMs} ms`,
          );
          this.settle(waiter, error);
        }, this.options.requestWaitMs),
      };
      this.waiters.add(waiter);
    });
  }

  private settle(waiter: Waiter, outcome: EngineClient | EngineError): void {
    clearTimeout(waiter.timer);
    this.waiters.delete(waiter);
    if (outcome instanceof EngineError) waiter.reject(outcome);
    else waiter.resolve(outcome);
  }

  private async spawnEngine(): Promise<void> {
    let run: Run;
    try {
      run = this.options.remote ? await this.connectRemote(this.options.remote) : await this.spawnChild();
    } catch (error) {
      this.options.logger.error({ error: (error as Error).message }, 'cannot start the engine');
      this.scheduleRestart(Date.now());
      return;
    }
    if (this.state === 'stopped') {
      run.client.close();
      return;
    }
    this.run = run;
    const { logger } = this.options;
    const { client, pid } = run;
    const readyTimer = setTimeout(() => {
      logger.error({ pid }, `engine not ready after ${this.options.readyTimeoutMs} ms; killing it`);
      run.kill();
    }, this.options.readyTimeoutMs);
    void run.exited.then(() => clearTimeout(readyTimer));
    client.onClose(() => {
      // The connection closes before a child's exit event arrives: stop handing out this client at once.
      if (this.run === run && this.state === 'ready') this.state = 'restarting';
    });

    try {
      const ready = await client.ready;
      clearTimeout(readyTimer);
      logger.info({ pid, ...ready, supports: loggedSupport(ready.supports) }, 'engine ready');
      await this.restorable.restore(client, logger);
      if (this.run !== run || client.closed) return; // replaced, exited or stopped meanwhile
      this.engine = ready;
      this.state = 'ready';
      run.ready = true;
      this.lastError = null;
      for (const waiter of this.waiters) this.settle(waiter, client);
    } catch (error) {
      // Closed before ready (the exit handler restarts it); a refused secret is worth saying why.
      if (error instanceof EngineError && error.code === 'unauthorized')
        logger.error({ error: error.message }, 'the engine refused our ENGINE_SECRET');
      if (client.startupFailure !== null && (this.state as EngineState) !== 'stopped') this.fail(client.startupFailure);
    }
  }

  /** The engine cannot start here, by its own word: whoever waits for it hears why now, and it is not restarted. */
  private fail(reason: string): void {
    this.options.logger.error({ error: reason }, 'the engine cannot start');
    this.state = 'failed';
    this.lastError = reason;
    for (const waiter of this.waiters)
      this.settle(waiter, new EngineError('engine_unavailable', `the engine could not start: ${reason}`));
  }

  private async spawnChild(): Promise<Run> {
    const python = this.options.python ?? (await findEnginePython());
    const argv = [...(this.options.launcher ?? []), '-m', 'engine', ...this.options.args];
    const child: ChildProcessWithoutNullStreams = spawn(python, argv, {
      cwd: this.options.cwd,
      env: { ...(this.options.env ?? process.env), PYTHONUNBUFFERED: '1' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const pid = child.pid ?? null;
    const { logger } = this.options;
    const client = new EngineClient(child.stdout, child.stdin, { peer: `the engine (pid ${pid})`, logger });
    logger.info({ pid, python, cwd: this.options.cwd }, 'engine starting');
    let markExited!: () => void;
    const run: Run = {
      client,
      pid,
      startedAt: Date.now(),
      exited: new Promise((resolve) => (markExited = resolve)),
      kill: () => child.kill('SIGKILL'),
      lastLines: [],
      ready: false,
    };
    createInterface({ input: child.stderr }).on('line', (line) => {
      logger.info({ pid, source: 'engine' }, line);
      run.lastLines = [...run.lastLines.slice(-(STDERR_LINES_KEPT - 1)), line];
    });
    let exited = false;
    const onExit = (code: number | null, signal: string | null) => {
      if (exited) return;
      exited = true;
      this.handleExit(
        run,
        code === null && signal === null ? 'failed to start' : signal ? `signal ${signal}` : `code ${code}`,
        { code, signal },
      );
      markExited();
    };
    child.once('exit', onExit);
    child.once('error', (error) => {
      logger.error({ pid, error: error.message }, 'engine process error');
      onExit(null, null);
    });
    // A connection the client gave up on (a corrupt frame) means a process not worth keeping;
    // when stopping, closing stdin is the polite request to exit and stop() waits for it.
    client.onClose(() => {
      if (!exited && this.state !== 'stopped') child.kill('SIGKILL');
    });
    return run;
  }

  /** A remote engine lives on after our connection drops: "exit" here is the connection closing. */
  private async connectRemote(remote: RemoteEngine): Promise<Run> {
    const { logger } = this.options;
    const url = `tcp://${remote.host}:${remote.port}`;
    logger.info({ url }, 'engine connecting');
    const client = await EngineClient.connect(remote.host, remote.port, { logger, secret: remote.secret });
    let markExited!: () => void;
    const run: Run = {
      client,
      pid: null,
      startedAt: Date.now(),
      exited: new Promise((resolve) => (markExited = resolve)),
      kill: () => client.close(),
      lastLines: [],
      ready: false,
    };
    client.onClose((error) => {
      this.handleExit(run, `connection closed: ${error.message}`, { code: null, signal: null });
      markExited();
    });
    return run;
  }

  private handleExit(run: Run, how: string, status: { code: number | null; signal: string | null }): void {
    const who = run.pid === null ? 'the engine' : `the engine (pid ${run.pid})`;
    run.client.close(new EngineError('engine_exited', `${who} exited (${how}) while this request was in flight`));
    if (this.run !== run) return;
    this.run = undefined;
    this.engine = null;
    this.lastExit = { ...status, at: new Date().toISOString() };
    if (this.state === 'stopped' || this.state === 'failed') return;
    if (!run.ready) this.notStarted(run, how);
    this.options.logger.warn({ pid: run.pid, how }, 'engine exited; restarting');
    this.state = 'restarting';
    this.scheduleRestart(run.startedAt);
  }

  /** A start that ended before `ready`: whoever waits hears why at once (it is tried again meanwhile). */
  private notStarted(run: Run, how: string): void {
    // Its last error line says why (a launcher's rendezvous that timed out, a traceback's last line), else its last words.
    const lines = run.lastLines.filter((line) => line.trim());
    const errors = lines.filter((line) => /error|exception|failed/i.test(line));
    const said = (errors.length ? errors : lines).slice(-1)[0];
    this.lastError = `the engine exited before it was ready (${how})${said ? `: ${said.trim()}` : ''}`;
    for (const waiter of this.waiters) this.settle(waiter, new EngineError('engine_unavailable', this.lastError));
  }

  private scheduleRestart(startedAt: number): void {
    const { initialMs, maxMs, stableAfterMs } = this.options.restartBackoff;
    if (Date.now() - startedAt >= stableAfterMs) this.failuresInARow = 0;
    const delay = Math.min(maxMs, initialMs * 2 ** this.failuresInARow);
    this.failuresInARow++;
    clearTimeout(this.restartTimer);
    this.restartTimer = setTimeout(() => {
      if (this.state === 'stopped') return;
      this.restarts++;
      void this.spawnEngine();
    }, delay);
  }
}

/** The ready frame's announcement as logged: transformers' table of ~200 causal LMs as its size, not a 10 kB line. */
function loggedSupport({ transformers, ...ours }: EngineSupport) {
  if (!transformers) return ours;
  const { causal_lm, ...rest } = transformers;
  return { ...ours, transformers: { ...rest, causal_lm: `${Object.keys(causal_lm).length} model types` } };
}
