/**
 * The engine client: one connection (a child's stdio or a TCP socket), many requests in flight,
 * told apart by id. Any op of the table in ops.ts goes through `request`, `generate` streams; error replies become
 * `EngineError`s with the engine's code; a closed connection fails everything still in flight
 * with `engine_exited`. It neither spawns nor restarts anything: that is the supervisor's job.
 */
import { connect as connectTcp } from 'node:net';
import type { Readable, Writable } from 'node:stream';
import { EngineError } from './errors.ts';
import { encodeFrame, FrameDecoder, FramingError, parseFrame } from './framing.ts';
import { ReplyStream } from './generate-stream.ts';
import { type EngineLogger, silentLogger } from './logger.ts';
import { type Engine, type OpReply, type OpRequest, type UnaryOp, withGenerateDefaults } from './ops.ts';
import type {
  FailedEvent,
  ForwardRequest,
  GenerateEvent,
  GenerateRequest,
  ReadyEvent,
  ReplyErrorCode,
} from './protocol.ts';
import { REPLY_ERROR_CODES } from './protocol.ts';

export interface EngineClientOptions {
  /** Names the other end in error messages, e.g. "the engine (pid 1234)". */
  peer?: string;
  logger?: EngineLogger;
}

/** A decoded frame after the envelope check; the fields beyond it are the op's reply. */
type Reply = Record<string, unknown> & { id: string | null; done?: boolean };

type Pending =
  | { kind: 'unary'; resolve(reply: Reply): void; reject(error: EngineError): void }
  | { kind: 'stream'; stream: ReplyStream };

const STREAM_EVENT_TYPES: readonly string[] = ['prompt', 'tokens', 'finish'] satisfies GenerateEvent['type'][];

// Process-wide, so ids stay unique across engine restarts and a log line names one request.
let requestCounter = 0;

export class EngineClient implements Engine {
  /** Resolves with the engine's unsolicited `ready` frame; rejects if the connection closes first. */
  readonly ready: Promise<ReadyEvent>;
  /** Why the engine could not start, when it said so (its `failed` frame) instead of `ready`. */
  startupFailure: string | null = null;
  private readonly pending = new Map<string, Pending>();
  private readonly decoder = new FrameDecoder();
  private readonly closeListeners: ((error: EngineError) => void)[] = [];
  private readonly peer: string;
  private readonly logger: EngineLogger;
  private settleReady!: { resolve(event: ReadyEvent): void; reject(error: EngineError): void };
  private closedWith: EngineError | undefined;

  constructor(
    private readonly input: Readable,
    private readonly output: Writable,
    options: EngineClientOptions = {},
  ) {
    this.peer = options.peer ?? 'the engine';
    this.logger = options.logger ?? silentLogger;
    this.ready = new Promise((resolve, reject) => (this.settleReady = { resolve, reject }));
    this.ready.catch(() => undefined); // nobody has to wait for it
    const lost = (why: string) => () =>
      this.close(new EngineError('engine_exited', `${this.peer} ${why} while this request was in flight`));
    input.on('data', (chunk: Buffer) => this.receive(chunk));
    input.on('end', lost('exited or closed its connection'));
    input.on('close', lost('exited or closed its connection'));
    input.on('error', lost('failed (read error)'));
    output.on('error', lost('stopped reading (write error)'));
  }

  /**
   * A client over TCP, for an engine started elsewhere with `python3 -m engine --tcp HOST:PORT`. With a
   * secret, the first frame authenticates; the engine sends `ready` only after it accepted the secret.
   */
  static connect(
    host: string,
    port: number,
    options: EngineClientOptions & { secret?: string | null } = {},
  ): Promise<EngineClient> {
    return new Promise((resolve, reject) => {
      const socket = connectTcp({ host, port });
      socket.once('error', reject);
      socket.once('connect', () => {
        socket.off('error', reject);
        socket.setNoDelay(true);
        socket.setKeepAlive(true, 30_000); // a dead engine host shows up as a closed connection, then a reconnect
        const client = new EngineClient(socket, socket, { peer: `the engine at ${host}:${port}`, ...options });
        if (options.secret)
          void client.send('auth', { secret: options.secret }).catch((error: EngineError) => client.close(error));
        resolve(client);
      });
    });
  }

  get inFlight(): number {
    return this.pending.size;
  }

  get closed(): boolean {
    return this.closedWith !== undefined;
  }

  onClose(listener: (error: EngineError) => void): void {
    if (this.closedWith) listener(this.closedWith);
    else this.closeListeners.push(listener);
  }

  /** The one place a wire reply becomes a typed value: the engine is trusted to follow the protocol. */
  request<O extends UnaryOp>(op: O, body: OpRequest<O>): Promise<OpReply<O>> {
    const fill = FILLS[op] as ((request: OpRequest<O>) => OpRequest<O>) | undefined;
    return this.send(op, fill ? fill(body) : body) as Promise<unknown> as Promise<OpReply<O>>;
  }

  /** Sends the request at once; the replies wait in the stream until they are read. */
  generate(request: GenerateRequest): ReplyStream {
    const id = `g${++requestCounter}`;
    const stream = new ReplyStream(id, () => this.request('cancel', { target: id }));
    const frame = this.frame({ ...withGenerateDefaults(request), id, op: 'generate' });
    if (frame instanceof EngineError) {
      stream.fail(frame);
    } else {
      this.pending.set(id, { kind: 'stream', stream });
      this.output.write(frame);
    }
    return stream;
  }

  /** Fails everything in flight with `error` and closes the connection. Idempotent. */
  close(error: EngineError = new EngineError('engine_exited', `${this.peer} was closed by the server`)): void {
    if (this.closedWith) return;
    this.closedWith = error;
    this.settleReady.reject(error);
    for (const entry of this.pending.values()) {
      if (entry.kind === 'unary') entry.reject(error);
      else entry.stream.fail(error);
    }
    this.pending.clear();
    if (this.decoder.pendingBytes > 0)
      this.logger.warn({ bytes: this.decoder.pendingBytes }, `${this.peer} closed mid-frame`);
    this.input.destroy();
    this.output.destroy();
    for (const listener of this.closeListeners.splice(0)) listener(error);
  }

  /** Any unary frame, `auth` included (the transport's, not an op of the table). */
  private send(op: string, body: object): Promise<Reply> {
    const id = `r${++requestCounter}`;
    const frame = this.frame({ ...body, id, op });
    if (frame instanceof EngineError) return Promise.reject(frame);
    return new Promise<Reply>((resolve, reject) => {
      this.pending.set(id, { kind: 'unary', resolve, reject });
      this.output.write(frame);
    });
  }

  /** The frame to send, or the error that stops it from being sent. */
  private frame(message: object): Buffer | EngineError {
    if (this.closedWith) return this.closedWith;
    try {
      return encodeFrame(message);
    } catch (error) {
      if (error instanceof FramingError) return new EngineError('bad_request', error.message);
      throw error;
    }
  }

  private receive(chunk: Buffer): void {
    try {
      for (const frame of this.decoder.push(chunk)) this.dispatch(parseFrame(frame));
    } catch (error) {
      if (!(error instanceof FramingError)) throw error;
      this.logger.error({ error: error.message }, `${this.peer} broke the framing; closing the connection`);
      this.close(new EngineError('engine_exited', `${this.peer} sent a corrupt frame (${error.message})`));
    }
  }

  private dispatch(message: unknown): void {
    if (!isReply(message)) {
      this.logger.warn({ message }, `${this.peer} sent a frame without an id`);
      return;
    }
    if (message.id === null) {
      this.unsolicited(message);
      return;
    }
    const entry = this.pending.get(message.id);
    if (!entry) return; // a late reply to a request already failed or abandoned
    const error = replyError(message);
    if (message.done) {
      this.pending.delete(message.id);
      if (entry.kind === 'unary') {
        if (error) entry.reject(error);
        else entry.resolve(message);
      } else if (error) {
        entry.stream.fail(error);
      } else {
        entry.stream.push({
          type: 'done',
          prompt_tokens: Number(message.prompt_tokens),
          cached_tokens: Number(message.cached_tokens),
        });
        entry.stream.end();
      }
    } else if (entry.kind === 'stream' && STREAM_EVENT_TYPES.includes(String(message.type))) {
      entry.stream.push(message as unknown as GenerateEvent);
    } else {
      this.logger.warn({ id: message.id, type: message.type }, `${this.peer} sent an unexpected partial reply`);
    }
  }

  private unsolicited(message: Reply): void {
    if (message.event === 'ready') {
      this.settleReady.resolve(message as unknown as ReadyEvent);
    } else if (message.event === 'failed') {
      // An engine that cannot start here (a trainer's process group that cannot form) says why, then exits.
      const { error } = message as unknown as FailedEvent;
      this.startupFailure = error.message;
      this.settleReady.reject(new EngineError('engine_unavailable', `the engine could not start: ${error.message}`));
    } else if (message.error) {
      // The engine's answer to a frame it could not parse: a client bug worth shouting about.
      this.logger.error({ error: message.error }, `${this.peer} could not read a request`);
    } else {
      this.logger.info({ message }, `${this.peer} sent an event`);
    }
  }
}

function isReply(message: unknown): message is Reply {
  if (typeof message !== 'object' || message === null || Array.isArray(message)) return false;
  const id = (message as { id?: unknown }).id;
  return typeof id === 'string' || id === null;
}

function replyError(reply: Reply): EngineError | undefined {
  const error = reply.error;
  if (typeof error !== 'object' || error === null) return undefined;
  const { code, message } = error as { code?: unknown; message?: unknown };
  const known = typeof code === 'string' && (REPLY_ERROR_CODES as readonly string[]).includes(code);
  return new EngineError(
    known ? (code as ReplyErrorCode) : 'internal',
    typeof message === 'string' ? message : JSON.stringify(error),
  );
}

/** Requests the client completes before sending: fields the protocol requires whose value the caller may leave implicit. */
const FILLS: { [O in UnaryOp]?: (request: OpRequest<O>) => OpRequest<O> } = {
  // Without segment_ids a row is one sequence; the client says so explicitly (all zeros).
  forward: (request: ForwardRequest) => ({
    ...request,
    rows: request.rows.map((row) => ({ ...row, segment_ids: row.segment_ids ?? row.tokens.map(() => 0) })),
  }),
};
