/**
 * Runs queued jobs: claims one at a time, keeps its lease alive with heartbeats, turns a cancel request into
 * an abort signal for the runner, and records the outcome. Also reaps jobs of workers that died.
 */
import type { Logger } from 'pino';
import type { JobRow } from '../api/training-jobs.ts';
import type { JobEventData, JobEventType } from '../api/training-vocabulary.ts';
import { EngineError } from '../engine/errors.ts';
import { JOB_ERROR_CATALOGUE, JobError } from '../errors.ts';
import { newId } from '../ids.ts';
import type { JobQueue } from './queue.ts';

export interface RunContext {
  owner: string;
  signal: AbortSignal;
  emit<T extends JobEventType>(type: T, data: JobEventData[T]): Promise<void>;
  setProgress(progress: { numSequences?: number; metrics?: Record<string, number> }): Promise<void>;
}

export interface RunResult {
  step: number;
  checkpointId: string;
}

export type JobRunner = (job: JobRow, context: RunContext) => Promise<RunResult>;

export interface WorkerOptions {
  pollMs: number;
  heartbeatMs: number;
  /** Told how each job this worker ran ended (COMPLETED, FAILED, CANCELLED or LEASE_LOST) and how long it ran. */
  onFinished?: (type: JobRow['type'], status: string, seconds: number) => void;
}

export class JobWorker {
  readonly owner = `worker-${newId()}`;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = true;
  private wakeRequested = false;
  /** The job this worker runs now and how to stop it. */
  private current: { jobId: string; abort: AbortController } | undefined;

  constructor(
    private readonly queue: JobQueue,
    private readonly runners: Record<JobRow['type'], JobRunner>,
    private readonly logger: Logger,
    private readonly options: WorkerOptions = { pollMs: 500, heartbeatMs: 5000 },
  ) {}

  start(): void {
    this.stopped = false;
    this.schedule(0);
  }

  /** Checks for work now (called after a submit so a job starts without waiting for the next poll). */
  wake(): void {
    if (this.stopped) return;
    if (this.running) {
      this.wakeRequested = true;
      return;
    }
    this.schedule(0);
  }

  /** Stops the job this worker is running, if it is that one (the cancel is already recorded in the queue). */
  cancelLocal(jobId: string): void {
    if (this.current?.jobId === jobId) this.current.abort.abort();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  private schedule(delayMs: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.running = this.tick().finally(() => {
        this.running = undefined;
        if (this.stopped) return;
        this.schedule(this.wakeRequested ? 0 : this.options.pollMs);
        this.wakeRequested = false;
      });
    }, delayMs);
  }

  /** Runs jobs until none is claimable. */
  private async tick(): Promise<void> {
    try {
      await this.queue.reap();
      for (
        let job = await this.queue.claim(this.owner);
        job && !this.stopped;
        job = await this.queue.claim(this.owner)
      ) {
        await this.run(job);
      }
    } catch (error) {
      this.logger.error({ err: error }, 'job worker tick failed');
    }
  }

  private async run(job: JobRow): Promise<void> {
    const log = this.logger.child({ job_id: job.id, model_id: job.model_id, type: job.type });
    const abort = new AbortController();
    this.current = { jobId: job.id, abort };
    let leaseLost = false;
    const heartbeat = setInterval(() => {
      this.queue
        .heartbeat(job.id, this.owner)
        .then(({ held, cancelRequested }) => {
          if (!held) leaseLost = true;
          if (!held || cancelRequested) abort.abort();
        })
        .catch((error: unknown) => log.warn({ err: error }, 'heartbeat failed'));
    }, this.options.heartbeatMs);
    const context: RunContext = {
      owner: this.owner,
      signal: abort.signal,
      emit: (type, data) => this.queue.emit(job.id, type, data),
      setProgress: (progress) => this.queue.setProgress(job.id, this.owner, progress),
    };
    log.info('job started');
    const started = performance.now();
    let status = 'FAILED';
    try {
      const result = await this.runners[job.type](job, context);
      status = (await this.queue.complete(job.id, this.owner, result)) ? 'COMPLETED' : 'LEASE_LOST';
      if (status === 'LEASE_LOST') log.warn('job finished after losing its lease; outcome dropped');
      else log.info({ step: result.step }, 'job completed');
    } catch (error) {
      if (leaseLost) {
        status = 'LEASE_LOST';
        log.warn('job stopped: lease lost');
      } else if (abort.signal.aborted) {
        status = 'CANCELLED';
        await this.queue.finishCancelled(job.id, this.owner);
        log.info('job cancelled');
      } else {
        const failure = jobFailure(error);
        await this.queue.fail(job.id, this.owner, failure);
        log.error({ err: error }, 'job failed');
      }
    } finally {
      clearInterval(heartbeat);
      this.current = undefined;
      this.options.onFinished?.(job.type, status, (performance.now() - started) / 1000);
    }
  }
}

/** What a job that threw failed with: its own JobError, a diverged engine step, or `internal`. */
function jobFailure(error: unknown): JobError {
  if (error instanceof JobError) return error;
  if (error instanceof EngineError && error.code === 'diverged')
    return new JobError('training_diverged', `${JOB_ERROR_CATALOGUE.training_diverged.message} (${error.message})`);
  return new JobError('internal', `${JOB_ERROR_CATALOGUE.internal.message}: ${(error as Error).message}`);
}
