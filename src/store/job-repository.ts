/**
 * Training jobs and their events. Every state change is a conditional UPDATE (on status and lease owner),
 * and a terminal state is written in the same transaction as its terminal event, so a job never ends
 * without exactly one `training_ended`, `training_failed` or cancellation.
 */
import { type Kysely, sql, type Transaction } from 'kysely';
import type { Page } from '../api/lists.ts';
import type { EventRecord, JobRow } from '../api/training-jobs.ts';
import { ACTIVE_JOB_STATUSES, type JobStatus } from '../api/training-vocabulary.ts';
import type { Dialect } from './migrations/context.ts';
import type { Database, TrainingJobEventTable, TrainingJobTable } from './schema.ts';

export type EventRow = TrainingJobEventTable;

/** A job as callers see it: counts as numbers (PostgreSQL answers bigints as text), metrics parsed. */
export function toJobRow(row: TrainingJobTable): JobRow {
  return {
    ...row,
    attempts: Number(row.attempts),
    cancel_requested: Number(row.cancel_requested),
    num_sequences: row.num_sequences === null ? null : Number(row.num_sequences),
    checkpoint_step: row.checkpoint_step === null ? null : Number(row.checkpoint_step),
    metrics: JSON.parse(row.metrics) as Record<string, number>,
  };
}

/** An event with its data parsed. */
const toEventRecord = (row: EventRow): EventRecord => ({
  ...row,
  data: JSON.parse(row.data) as Record<string, unknown>,
});

export interface JobOutcome {
  status: Extract<JobStatus, 'COMPLETED' | 'FAILED' | 'CANCELLED'>;
  finishedAt: string;
  checkpointStep?: number | null;
  errorCode?: string | null;
  errorMessage?: string | null;
  event: EventRow;
}

export class JobRepository {
  constructor(
    private readonly db: Kysely<Database>,
    private readonly dialect: Dialect,
  ) {}

  async insert(job: TrainingJobTable): Promise<void> {
    await this.db.insertInto('training_jobs').values(job).execute();
  }

  async findById(id: string): Promise<JobRow | undefined> {
    const row = await this.db.selectFrom('training_jobs').selectAll().where('id', '=', id).executeTakeFirst();
    return row && toJobRow(row);
  }

  /**
   * Claims the oldest queued job whose model has nothing older queued or running, so jobs of one model run
   * in submission order while jobs of different models may interleave. Claims are serialised (SQLite by its
   * single writer, PostgreSQL by an advisory lock) so two workers never take jobs of one model together.
   */
  async claimNext(owner: string, now: string, leaseUntil: string): Promise<JobRow | undefined> {
    return this.db.transaction().execute(async (trx) => {
      if (this.dialect === 'postgres') await sql`select pg_advisory_xact_lock(7262002)`.execute(trx);
      const candidate = await trx
        .selectFrom('training_jobs as j')
        .select('j.id')
        .where('j.status', '=', 'QUEUED')
        .where(({ not, exists, selectFrom }) =>
          not(
            exists(
              selectFrom('training_jobs as o')
                .select('o.id')
                .whereRef('o.model_id', '=', 'j.model_id')
                .where((eb) =>
                  eb.or([
                    eb('o.status', '=', 'RUNNING'),
                    eb.and([eb('o.status', '=', 'QUEUED'), eb('o.id', '<', eb.ref('j.id'))]),
                  ]),
                ),
            ),
          ),
        )
        .orderBy('j.id')
        .limit(1)
        .executeTakeFirst();
      if (!candidate) return undefined;
      await trx
        .updateTable('training_jobs')
        .set((eb) => ({
          status: 'RUNNING',
          lease_owner: owner,
          lease_expires_at: leaseUntil,
          attempts: eb('attempts', '+', 1),
          started_at: eb.fn.coalesce('started_at', eb.val(now)),
        }))
        .where('id', '=', candidate.id)
        .where('status', '=', 'QUEUED')
        .execute();
      const claimed = await trx
        .selectFrom('training_jobs')
        .selectAll()
        .where('id', '=', candidate.id)
        .executeTakeFirst();
      return claimed && toJobRow(claimed);
    });
  }

  /** Extends the lease if `owner` still holds it; answers whether it does and whether a cancel was asked for. */
  async heartbeat(id: string, owner: string, leaseUntil: string): Promise<{ held: boolean; cancelRequested: boolean }> {
    const result = await this.db
      .updateTable('training_jobs')
      .set({ lease_expires_at: leaseUntil })
      .where('id', '=', id)
      .where('lease_owner', '=', owner)
      .where('status', '=', 'RUNNING')
      .executeTakeFirst();
    const row = await this.db
      .selectFrom('training_jobs')
      .select('cancel_requested')
      .where('id', '=', id)
      .executeTakeFirst();
    return { held: Number(result.numUpdatedRows) > 0, cancelRequested: Number(row?.cancel_requested ?? 0) === 1 };
  }

  async setProgress(
    id: string,
    owner: string,
    progress: { numSequences?: number; metrics?: Record<string, number> },
  ): Promise<void> {
    await this.db
      .updateTable('training_jobs')
      .set({
        ...(progress.numSequences !== undefined ? { num_sequences: progress.numSequences } : {}),
        ...(progress.metrics !== undefined ? { metrics: JSON.stringify(progress.metrics) } : {}),
      })
      .where('id', '=', id)
      .where('lease_owner', '=', owner)
      .execute();
  }

  /** Ends a running job held by `owner`, with its terminal event, atomically; false when the lease was lost. */
  async finish(id: string, owner: string, outcome: JobOutcome): Promise<boolean> {
    return this.db.transaction().execute(async (trx) => {
      const result = await trx
        .updateTable('training_jobs')
        .set(this.outcomeColumns(outcome))
        .where('id', '=', id)
        .where('lease_owner', '=', owner)
        .where('status', '=', 'RUNNING')
        .executeTakeFirst();
      if (Number(result.numUpdatedRows) === 0) return false;
      await trx.insertInto('training_job_events').values(outcome.event).execute();
      return true;
    });
  }

  /** Cancels a job that has not started; false when it already left the queue. */
  async cancelQueued(id: string, outcome: JobOutcome): Promise<boolean> {
    return this.endIf(id, (query) => query.where('status', '=', 'QUEUED'), outcome);
  }

  /** Fails a running job whose lease ran out (its worker died); false when it was renewed or ended meanwhile. */
  async failExpired(id: string, now: string, outcome: JobOutcome): Promise<boolean> {
    return this.endIf(
      id,
      (query) => query.where('status', '=', 'RUNNING').where('lease_expires_at', '<', now),
      outcome,
    );
  }

  private async endIf(
    id: string,
    // biome-ignore lint/suspicious/noExplicitAny: any update query of training_jobs; Kysely's where overloads admit no narrower bound
    condition: <Q extends { where: any }>(query: Q) => Q,
    outcome: JobOutcome,
  ): Promise<boolean> {
    return this.db.transaction().execute(async (trx: Transaction<Database>) => {
      const update = condition(trx.updateTable('training_jobs').set(this.outcomeColumns(outcome)).where('id', '=', id));
      const result = await update.executeTakeFirst();
      if (Number(result.numUpdatedRows) === 0) return false;
      await trx.insertInto('training_job_events').values(outcome.event).execute();
      return true;
    });
  }

  private outcomeColumns(outcome: JobOutcome) {
    return {
      status: outcome.status,
      finished_at: outcome.finishedAt,
      lease_owner: null,
      lease_expires_at: null,
      ...(outcome.checkpointStep !== undefined ? { checkpoint_step: outcome.checkpointStep } : {}),
      error_code: outcome.errorCode ?? null,
      error_message: outcome.errorMessage ?? null,
    };
  }

  async requestCancel(id: string): Promise<void> {
    await this.db
      .updateTable('training_jobs')
      .set({ cancel_requested: 1 })
      .where('id', '=', id)
      .where('status', '=', 'RUNNING')
      .execute();
  }

  async expiredLeases(now: string): Promise<JobRow[]> {
    const rows = await this.db
      .selectFrom('training_jobs')
      .selectAll()
      .where('status', '=', 'RUNNING')
      .where('lease_expires_at', '<', now)
      .execute();
    return rows.map(toJobRow);
  }

  async unfinishedJobsOfModel(modelId: string): Promise<JobRow[]> {
    const rows = await this.db
      .selectFrom('training_jobs')
      .selectAll()
      .where('model_id', '=', modelId)
      .where('status', 'in', [...ACTIVE_JOB_STATUSES])
      .execute();
    return rows.map(toJobRow);
  }

  async appendEvent(event: EventRow): Promise<void> {
    await this.db.insertInto('training_job_events').values(event).execute();
  }

  async events(jobId: string, afterId: string | undefined, limit: number): Promise<Page<EventRecord>> {
    let select = this.db.selectFrom('training_job_events').selectAll().where('job_id', '=', jobId);
    if (afterId !== undefined) select = select.where('id', '>', afterId);
    const rows = await select
      .orderBy('id')
      .limit(limit + 1)
      .execute();
    return { items: rows.slice(0, limit).map(toEventRecord), hasMore: rows.length > limit };
  }

  async countByStatus(): Promise<Record<string, number>> {
    const rows = await this.db
      .selectFrom('training_jobs')
      .select(['status', (eb) => eb.fn.countAll().as('n')])
      .groupBy('status')
      .execute();
    return Object.fromEntries(rows.map((row) => [row.status, Number(row.n)]));
  }
}
