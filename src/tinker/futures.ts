/**
 * Tinker's asynchronous requests: each call is recorded as a pending future, its work runs (operations of one
 * model one after another, in submission order; others at once), and the outcome is stored so `retrieve_future`
 * can answer it at any later time. A poll of a pending future waits a while for it before answering "try again".
 * After a restart nothing is running: every future still pending is failed (category `server`, which the SDK
 * raises as RequestFailedError without retrying: the client resubmits).
 *
 * Exactly once: the SDK numbers each training client's requests (`seq_id`) and each session's new clients
 * (`model_seq_id`), and sends a request again, with the same number, when its answer was lost (a dropped
 * connection, a timeout, a 5xx). A numbered request is keyed by what it addresses and that number, durably and per
 * entity, so the re-sent one is answered with the first one's future instead of running again.
 */
import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Clock } from '../clock.ts';
import { EngineError } from '../engine/errors.ts';
import { AppError, notFound } from '../errors.ts';
import { newId } from '../ids.ts';
import { canActFor, type Principal } from '../services/auth-service.ts';
import type { TinkerFutureTable } from '../store/schema.ts';
import type { TinkerRepository } from '../store/tinker-repository.ts';

export const RESTART_FAILURE = 'The server restarted before this request finished; submit it again';

/** How long one poll waits for a pending future before answering "try again". */
const POLL_WAIT_MS = 10_000;

export type FutureCategory = 'user' | 'server' | 'unknown';

/** A request the SDK numbers: what it addresses (a training client, a session), its number, and its content. */
export interface NumberedRequest {
  scope: string;
  seqId: number;
  content: unknown;
}

/** The numbered request of `seq_id` in `scope`, or null when the caller sent no number (nothing to match). */
export function numbered(scope: string, seqId: number | null | undefined, content: unknown): NumberedRequest | null {
  return seqId == null ? null : { scope, seqId, content };
}

export type FutureOutcome =
  | { status: 'pending' }
  | { status: 'complete'; kind: string; result: unknown }
  | { status: 'failed'; error: string; category: FutureCategory };

export class TinkerFutures {
  private readonly queues = new Map<string, Promise<unknown>>();
  private readonly finished = new EventEmitter();

  constructor(
    private readonly repository: TinkerRepository,
    private readonly clock: Clock,
    private readonly log: (message: string, error: unknown) => void = () => {},
  ) {
    this.finished.setMaxListeners(0);
  }

  async failLeftovers(): Promise<number> {
    return this.repository.failPendingFutures(RESTART_FAILURE, this.clock.now().toISOString());
  }

  /**
   * Records the request and starts `work`; `queueKey` (a model id) serialises it after that model's earlier work. A
   * numbered request already recorded (a re-send) answers the first one's future and runs nothing.
   */
  async submit(
    principal: Principal,
    kind: string,
    queueKey: string | null,
    /** Given the future's id, which the caller has not seen yet (a sample's sequence ids are made of it). */
    work: (id: string) => Promise<unknown>,
    request: NumberedRequest | null = null,
  ): Promise<string> {
    const id = newId();
    const now = this.clock.now().toISOString();
    const key = request && keyOf(request);
    const row = {
      id,
      entity_id: principal.entityId,
      model_id: queueKey,
      kind,
      status: 'pending' as const,
      result: null,
      error: null,
      category: null,
      created_at: now,
      finished_at: null,
    };
    if (!key) await this.repository.insertFuture({ ...row, request_key: null, request_hash: null });
    else if (!(await this.repository.claimFuture({ ...row, ...key }))) {
      const earlier = await this.replayed(principal, kind, request);
      if (earlier) return earlier;
      throw new Error(`The future of ${key.request_key} was recorded and then vanished`);
    }
    const previous = (queueKey && this.queues.get(queueKey)) || Promise.resolve();
    const run = previous.then(() => this.settle(id, () => work(id)));
    if (queueKey) {
      this.queues.set(queueKey, run);
      void run.then(() => {
        if (this.queues.get(queueKey) === run) this.queues.delete(queueKey);
      });
    }
    return id;
  }

  /**
   * The future of an earlier copy of this numbered request, or null when there is none. Callers whose request has
   * effects before it is queued (a new training client) ask this first. The same number on a different request is
   * refused: answering it with another request's result would be silently wrong.
   */
  async replayed(principal: Principal, kind: string, request: NumberedRequest | null): Promise<string | null> {
    if (!request) return null;
    const key = keyOf(request);
    const earlier = await this.repository.findFutureByRequest(principal.entityId, key.request_key);
    if (!earlier) return null;
    if (earlier.kind !== kind || earlier.request_hash !== key.request_hash) {
      throw new AppError(
        'bad_request',
        `seq_id ${request.seqId} of ${request.scope} was already used by a different request (${earlier.kind}): number each request anew`,
      );
    }
    return earlier.id;
  }

  private async settle(id: string, work: () => Promise<unknown>): Promise<void> {
    let outcome: Pick<TinkerFutureTable, 'status' | 'result' | 'error' | 'category'>;
    try {
      outcome = { status: 'complete', result: JSON.stringify(await work()), error: null, category: null };
    } catch (error) {
      outcome = { status: 'failed', result: null, ...describeFailure(error) };
      if (outcome.category !== 'user') this.log(`Tinker request ${id} failed`, error);
    }
    try {
      await this.repository.finishFuture(id, { ...outcome, finished_at: this.clock.now().toISOString() });
    } catch (error) {
      this.log(`Tinker request ${id} could not be recorded`, error);
    }
    this.finished.emit(id);
  }

  /**
   * The outcome of a caller's own future, waiting up to a poll's length for a pending one. The wait starts
   * listening before the first read, so a future finishing in between is not missed for a whole poll.
   */
  async retrieve(principal: Principal, id: string, waitMs = POLL_WAIT_MS): Promise<FutureOutcome> {
    const wait = this.waitFor(id, waitMs);
    try {
      const first = await this.repository.findFuture(id);
      if (!first || !canActFor(principal, first.entity_id))
        throw notFound(`Future ${JSON.stringify(id.slice(0, 100))}`);
      if (first.status !== 'pending') return outcomeOf(first);
      await wait.finished;
      return outcomeOf((await this.repository.findFuture(id)) ?? first);
    } finally {
      wait.stop();
    }
  }

  private waitFor(id: string, ms: number): { finished: Promise<void>; stop: () => void } {
    let stop = () => {};
    const finished = new Promise<void>((resolve) => {
      const timer = setTimeout(() => stop(), ms);
      stop = () => {
        clearTimeout(timer);
        this.finished.off(id, stop);
        resolve();
      };
      this.finished.on(id, stop);
    });
    return { finished, stop };
  }
}

function keyOf(request: NumberedRequest): { request_key: string; request_hash: string } {
  return {
    request_key: `${request.scope}#${request.seqId}`,
    request_hash: createHash('sha256').update(JSON.stringify(request.content)).digest('hex'),
  };
}
const USER_ENGINE_ERRORS: readonly EngineError['code'][] = ['bad_request', 'not_found', 'non_finite', 'diverged'];

function outcomeOf(row: TinkerFutureTable): FutureOutcome {
  if (row.status === 'pending') return { status: 'pending' };
  if (row.status === 'failed')
    return {
      status: 'failed',
      error: row.error ?? 'failed',
      category: (row.category as FutureCategory | null) ?? 'unknown',
    };
  return { status: 'complete', kind: row.kind, result: JSON.parse(row.result ?? 'null') };
}

/**
 * The caller's own mistakes (input the engine refused, a missing checkpoint, a step its learning rate made diverge,
 * weights out of bounds) are `user`; everything else `server`.
 */
function describeFailure(error: unknown): { error: string; category: 'user' | 'server' } {
  if (error instanceof AppError) return { error: error.message, category: error.status < 500 ? 'user' : 'server' };
  if (error instanceof EngineError)
    return { error: error.message, category: USER_ENGINE_ERRORS.includes(error.code) ? 'user' : 'server' };
  return { error: 'Internal server error', category: 'server' };
}
