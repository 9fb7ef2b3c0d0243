/**
 * Read-only queries behind the dashboard: model summaries, the run's metric history, trajectory pages and
 * job lists. Every page is a keyset seek through an index (no OFFSET), so page 1000 costs what page 1 costs.
 * Callers pass the entity ids a principal may see; this file knows nothing of keys or HTTP.
 */

import type { Kysely } from 'kysely';
import type { JobListRow, ModelSummaryRow } from '../api/dashboard.ts';
import type { Page } from '../api/lists.ts';
import type { JobStatus } from '../api/training-vocabulary.ts';
import { toJobRow } from './job-repository.ts';
import type { Database } from './schema.ts';
import { type StoredTrajectory, toStoredTrajectory } from './trajectory-repository.ts';

export interface ModelSortKey {
  entityName: string;
  project: string;
  name: string;
}

export interface RunMetricRow {
  id: number;
  step: number;
  source: string;
  metrics: Record<string, unknown>;
  createdAt: string;
}

/** Trajectory rows are the trajectory repository's own shape. */
export type TrajectoryRow = StoredTrajectory;

const numberOrNull = (value: unknown): number | null => (value === null || value === undefined ? null : Number(value));

export class DashboardRepository {
  constructor(private readonly db: Kysely<Database>) {}

  private selectModelSummaries(entityIds: string[]) {
    return (
      this.db
        .selectFrom('models')
        .innerJoin('entities', 'entities.id', 'models.entity_id')
        .select([
          'models.id',
          'entities.name as entity_name',
          'models.project',
          'models.name',
          'models.base_model',
          'models.run_id',
          'models.created_at',
        ])
        // Each correlated subquery is a seek in the (model_id, step) or (model_id, created_at) index.
        .select((eb) => [
          eb
            .selectFrom('checkpoints')
            .select((c) => c.fn.max('checkpoints.step').as('m'))
            .whereRef('checkpoints.model_id', '=', 'models.id')
            .as('latest_step'),
          eb
            .selectFrom('checkpoints')
            .select((c) => c.fn.countAll().as('n'))
            .whereRef('checkpoints.model_id', '=', 'models.id')
            .as('checkpoint_count'),
          eb
            .selectFrom('training_jobs')
            .select('training_jobs.id')
            .whereRef('training_jobs.model_id', '=', 'models.id')
            .orderBy('training_jobs.created_at', 'desc')
            .orderBy('training_jobs.id', 'desc')
            .limit(1)
            .as('last_job_id'),
          eb
            .selectFrom('training_jobs')
            .select('training_jobs.status')
            .whereRef('training_jobs.model_id', '=', 'models.id')
            .orderBy('training_jobs.created_at', 'desc')
            .orderBy('training_jobs.id', 'desc')
            .limit(1)
            .as('last_job_status'),
        ])
        .where('models.entity_id', 'in', entityIds)
    );
  }

  private static toSummary(row: Record<string, unknown>): ModelSummaryRow {
    return {
      ...(row as unknown as ModelSummaryRow),
      latest_step: numberOrNull(row.latest_step),
      checkpoint_count: Number(row.checkpoint_count ?? 0),
      last_job_id: (row.last_job_id as string | null) ?? null,
      last_job_status: (row.last_job_status as JobStatus | null) ?? null,
    };
  }

  /** Models of the given entities ordered by (entity, project, name), seeking past `after`. */
  async pageModels(
    entityIds: string[],
    query: { project?: string; after?: ModelSortKey; limit: number },
  ): Promise<Page<ModelSummaryRow>> {
    if (entityIds.length === 0) return { items: [], hasMore: false };
    let select = this.selectModelSummaries(entityIds);
    if (query.project !== undefined) select = select.where('models.project', '=', query.project);
    const after = query.after;
    if (after) {
      select = select.where(({ eb, refTuple, tuple }) =>
        eb(
          refTuple('entities.name', 'models.project', 'models.name'),
          '>',
          tuple(after.entityName, after.project, after.name),
        ),
      );
    }
    const rows = await select
      .orderBy('entities.name')
      .orderBy('models.project')
      .orderBy('models.name')
      .limit(query.limit + 1)
      .execute();
    return {
      items: rows.slice(0, query.limit).map((row) => DashboardRepository.toSummary(row)),
      hasMore: rows.length > query.limit,
    };
  }

  async modelSummary(modelId: string, entityIds: string[]): Promise<ModelSummaryRow | undefined> {
    if (entityIds.length === 0) return undefined;
    const row = await this.selectModelSummaries(entityIds).where('models.id', '=', modelId).executeTakeFirst();
    return row && DashboardRepository.toSummary(row);
  }

  /** The newest metric rows of a run (by step, then insertion), newest first. */
  async latestRunMetrics(runId: string, limit: number): Promise<RunMetricRow[]> {
    const rows = await this.db
      .selectFrom('run_metrics')
      .selectAll()
      .where('run_id', '=', runId)
      .orderBy('step', 'desc')
      .orderBy('id', 'desc')
      .limit(limit)
      .execute();
    return rows.map(toRunMetric);
  }

  async findRunMetric(runId: string, id: number): Promise<RunMetricRow | undefined> {
    const row = await this.db
      .selectFrom('run_metrics')
      .selectAll()
      .where('run_id', '=', runId)
      .where('id', '=', id)
      .executeTakeFirst();
    return row && toRunMetric(row);
  }

  /** A page of the run's metric history in (step, insertion) order, seeking past the cursor row. */
  async pageRunMetrics(
    runId: string,
    query: { after?: { step: number; id: number }; limit: number },
  ): Promise<Page<RunMetricRow>> {
    let select = this.db.selectFrom('run_metrics').selectAll().where('run_id', '=', runId);
    const after = query.after;
    if (after)
      select = select.where(({ eb, refTuple, tuple }) => eb(refTuple('step', 'id'), '>', tuple(after.step, after.id)));
    const rows = await select
      .orderBy('step')
      .orderBy('id')
      .limit(query.limit + 1)
      .execute();
    return { items: rows.slice(0, query.limit).map(toRunMetric), hasMore: rows.length > query.limit };
  }

  /** Every (split, step) that holds trajectories, with counts; read from the covering (model_id, split, step, id) index. */
  async trajectorySteps(modelId: string): Promise<{ split: string; step: number; count: number }[]> {
    const rows = await this.db
      .selectFrom('trajectories')
      .select(['split', 'step', (eb) => eb.fn.countAll().as('n')])
      .where('model_id', '=', modelId)
      .groupBy(['split', 'step'])
      .orderBy('split')
      .orderBy('step')
      .execute();
    return rows.map((row) => ({ split: row.split, step: Number(row.step), count: Number(row.n) }));
  }

  async findTrajectory(modelId: string, id: string): Promise<TrajectoryRow | undefined> {
    const row = await this.db
      .selectFrom('trajectories')
      .selectAll()
      .where('model_id', '=', modelId)
      .where('id', '=', id)
      .executeTakeFirst();
    return row && toStoredTrajectory(row);
  }

  /**
   * The query of one page of a split's trajectories in (step, id) order — id order is logging order, so
   * groups and their members come as they were sent — seeking past the cursor through the
   * (model_id, split, step, id) index. Public so tests can EXPLAIN exactly what runs.
   */
  trajectoryPageQuery(
    modelId: string,
    split: string,
    query: { step?: number; after?: { step: number; id: string }; limit: number },
  ) {
    let select = this.db
      .selectFrom('trajectories')
      .selectAll()
      .where('model_id', '=', modelId)
      .where('split', '=', split);
    const after = query.after;
    if (query.step !== undefined) {
      // Within one step the cursor's id alone is the seek key (the caller keeps cursors inside the step).
      select = select.where('step', '=', query.step);
      if (after) select = select.where('id', '>', after.id);
    } else if (after) {
      select = select.where(({ eb, refTuple, tuple }) => eb(refTuple('step', 'id'), '>', tuple(after.step, after.id)));
    }
    return select
      .orderBy('step')
      .orderBy('id')
      .limit(query.limit + 1);
  }

  async pageTrajectories(
    modelId: string,
    split: string,
    query: { step?: number; after?: { step: number; id: string }; limit: number },
  ): Promise<Page<TrajectoryRow>> {
    const rows = await this.trajectoryPageQuery(modelId, split, query).execute();
    return { items: rows.slice(0, query.limit).map(toStoredTrajectory), hasMore: rows.length > query.limit };
  }

  /** A job of one of these entities: where its request lies, for the configuration it ran with. */
  async findJob(
    jobId: string,
    entityIds: string[],
  ): Promise<{ id: string; type: string; payload_path: string } | undefined> {
    if (entityIds.length === 0) return undefined;
    return this.db
      .selectFrom('training_jobs as j')
      .innerJoin('models as m', 'm.id', 'j.model_id')
      .select(['j.id', 'j.type', 'j.payload_path'])
      .where('j.id', '=', jobId)
      .where('m.entity_id', 'in', entityIds)
      .executeTakeFirst();
  }

  /** Jobs of the given entities' models, newest first (ids are UUIDv7, so id order is creation order). */
  async pageJobs(
    entityIds: string[],
    query: { modelId?: string; statuses?: JobStatus[]; afterId?: string; limit: number },
  ): Promise<Page<JobListRow>> {
    if (entityIds.length === 0) return { items: [], hasMore: false };
    let select = this.db
      .selectFrom('training_jobs as j')
      .innerJoin('models as m', 'm.id', 'j.model_id')
      .innerJoin('entities as e', 'e.id', 'm.entity_id')
      .selectAll('j')
      .select(['e.name as entity_name', 'm.project', 'm.name as model_name'])
      .select((eb) =>
        eb
          .selectFrom('training_job_events as ev')
          .select((c) => c.fn.countAll().as('n'))
          .whereRef('ev.job_id', '=', 'j.id')
          .where('ev.type', '=', 'gradient_step')
          .as('completed_steps'),
      )
      .where('m.entity_id', 'in', entityIds);
    if (query.modelId !== undefined) select = select.where('j.model_id', '=', query.modelId);
    if (query.statuses && query.statuses.length > 0) select = select.where('j.status', 'in', query.statuses);
    if (query.afterId !== undefined) select = select.where('j.id', '<', query.afterId);
    const rows = await select
      .orderBy('j.id', 'desc')
      .limit(query.limit + 1)
      .execute();
    return {
      items: rows.slice(0, query.limit).map(({ entity_name, project, model_name, completed_steps, ...job }) => ({
        ...toJobRow(job),
        entity_name,
        project,
        model_name,
        completed_steps: Number(completed_steps ?? 0),
      })),
      hasMore: rows.length > query.limit,
    };
  }
}

function toRunMetric(row: {
  id: number;
  step: number;
  source: string;
  metrics: string;
  created_at: string;
}): RunMetricRow {
  return {
    id: Number(row.id),
    step: Number(row.step),
    source: row.source,
    metrics: JSON.parse(row.metrics) as Record<string, unknown>,
    createdAt: row.created_at,
  };
}
