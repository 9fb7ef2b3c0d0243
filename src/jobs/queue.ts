/**
 * The durable job queue: payloads written and synced before the job exists, atomic claims with leases,
 * heartbeats, completion and failure only by the lease holder, and a reaper for workers that died.
 * Time comes from an injected clock so leases can be tested without waiting.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { JobRow } from '../api/training-jobs.ts';
import type { JobEventData, JobEventType } from '../api/training-vocabulary.ts';
import type { Clock } from '../clock.ts';
import { JobError } from '../errors.ts';
import { newId } from '../ids.ts';
import { type EventRow, type JobOutcome, type JobRepository, toJobRow } from '../store/job-repository.ts';
import type { TrainingJobTable } from '../store/schema.ts';

export interface QueueOptions {
  leaseMs: number;
}

export class JobQueue {
  constructor(
    private readonly jobs: JobRepository,
    private readonly clock: Clock,
    private readonly payloadDir: string,
    private readonly options: QueueOptions = { leaseMs: 20_000 },
  ) {}

  private now(): string {
    return this.clock.now().toISOString();
  }

  private leaseUntil(): string {
    return new Date(this.clock.now().getTime() + this.options.leaseMs).toISOString();
  }

  event<T extends JobEventType>(jobId: string, type: T, data: JobEventData[T]): EventRow {
    return { id: newId(), job_id: jobId, type, data: JSON.stringify(data), created_at: this.now() };
  }

  /** Stores the request durably (file synced, then renamed into place), then the queued job that points at it. */
  async enqueue(input: { modelId: string; type: 'rl' | 'sft'; payload: unknown }): Promise<JobRow> {
    const id = newId();
    await fs.mkdir(this.payloadDir, { recursive: true });
    const payloadPath = path.join(this.payloadDir, `${id}.json`);
    const temporary = `${payloadPath}.tmp`;
    const handle = await fs.open(temporary, 'w');
    try {
      await handle.writeFile(JSON.stringify(input.payload));
      await handle.sync();
    } finally {
      await handle.close();
    }
    await fs.rename(temporary, payloadPath);
    const job: TrainingJobTable = {
      id,
      model_id: input.modelId,
      type: input.type,
      status: 'QUEUED',
      payload_path: payloadPath,
      attempts: 0,
      lease_owner: null,
      lease_expires_at: null,
      cancel_requested: 0,
      num_sequences: null,
      checkpoint_step: null,
      metrics: '{}',
      error_code: null,
      error_message: null,
      created_at: this.now(),
      started_at: null,
      finished_at: null,
    };
    await this.jobs.insert(job);
    return toJobRow(job);
  }

  /**
   * The stored request as parsed JSON: its kind's reader (training/rl/payload.ts, training/sft/payload.ts) checks
   * it; the queue knows no payload shape.
   */
  async readPayload(job: JobRow): Promise<unknown> {
    return JSON.parse(await fs.readFile(job.payload_path, 'utf8'));
  }

  claim(owner: string): Promise<JobRow | undefined> {
    return this.jobs.claimNext(owner, this.now(), this.leaseUntil());
  }

  heartbeat(jobId: string, owner: string): Promise<{ held: boolean; cancelRequested: boolean }> {
    return this.jobs.heartbeat(jobId, owner, this.leaseUntil());
  }

  emit<T extends JobEventType>(jobId: string, type: T, data: JobEventData[T]): Promise<void> {
    return this.jobs.appendEvent(this.event(jobId, type, data));
  }

  setProgress(
    jobId: string,
    owner: string,
    progress: { numSequences?: number; metrics?: Record<string, number> },
  ): Promise<void> {
    return this.jobs.setProgress(jobId, owner, progress);
  }

  complete(jobId: string, owner: string, result: { step: number; checkpointId: string }): Promise<boolean> {
    return this.jobs.finish(jobId, owner, {
      status: 'COMPLETED',
      finishedAt: this.now(),
      checkpointStep: result.step,
      event: this.event(jobId, 'training_ended', { step: result.step, checkpoint_id: result.checkpointId }),
    });
  }

  fail(jobId: string, owner: string, error: JobError): Promise<boolean> {
    return this.jobs.finish(jobId, owner, this.failure(jobId, 'FAILED', error));
  }

  /** A running job that noticed its cancel request ends CANCELLED (its terminal event is `training_failed`, which every client stops on). */
  finishCancelled(jobId: string, owner: string): Promise<boolean> {
    return this.jobs.finish(jobId, owner, this.failure(jobId, 'CANCELLED', new JobError('cancelled')));
  }

  /** Cancels a queued job at once, or asks the worker of a running one to stop; answers the job afterwards. */
  async cancel(jobId: string): Promise<JobRow | undefined> {
    const job = await this.jobs.findById(jobId);
    if (job?.status === 'QUEUED') {
      const cancelled = await this.jobs.cancelQueued(
        jobId,
        this.failure(jobId, 'CANCELLED', new JobError('cancelled')),
      );
      if (!cancelled) await this.jobs.requestCancel(jobId);
    } else if (job?.status === 'RUNNING') {
      await this.jobs.requestCancel(jobId);
    }
    return this.jobs.findById(jobId);
  }

  /** Fails every running job whose worker stopped renewing its lease. Answers the ids it failed. */
  async reap(): Promise<string[]> {
    const now = this.now();
    const reaped: string[] = [];
    for (const job of await this.jobs.expiredLeases(now)) {
      const outcome = this.failure(job.id, 'FAILED', new JobError('worker_lost'));
      if (await this.jobs.failExpired(job.id, now, outcome)) reaped.push(job.id);
    }
    return reaped;
  }

  private failure(jobId: string, status: 'FAILED' | 'CANCELLED', error: JobError): JobOutcome {
    return {
      status,
      finishedAt: this.now(),
      errorCode: error.code,
      errorMessage: error.message,
      event: this.event(jobId, 'training_failed', { error_message: error.message }),
    };
  }
}
