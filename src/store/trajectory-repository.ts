/** Logged trajectories (per model, split and step) and the run's metrics history. */
import type { Kysely } from 'kysely';
import type { Page } from '../api/lists.ts';
import { type Trajectory, withTrajectoryDefaults } from '../api/models.ts';
import type { Database, TrajectoryTable } from './schema.ts';

/** Keeps each INSERT below both databases' bound-parameter limits. */
const INSERT_CHUNK_ROWS = 500;

export interface StoredTrajectory {
  id: string;
  split: string;
  step: number;
  groupIndex: number;
  trajectoryIndex: number;
  reward: number | null;
  data: Record<string, unknown>;
  createdAt: string;
}

/** A stored row as the services see it (the JSON of the trajectory parsed back, read with ART's defaults like any trajectory). */
export function toStoredTrajectory(row: TrajectoryTable): StoredTrajectory {
  return {
    id: row.id,
    split: row.split,
    step: Number(row.step),
    groupIndex: Number(row.group_index),
    trajectoryIndex: Number(row.trajectory_index),
    reward: row.reward === null ? null : Number(row.reward),
    data: withTrajectoryDefaults(JSON.parse(row.data) as Trajectory),
    createdAt: row.created_at,
  };
}

export interface RunMetricRecord {
  step: number;
  source: string;
  metrics: Record<string, number>;
  createdAt: string;
}

export class TrajectoryRepository {
  constructor(private readonly db: Kysely<Database>) {}

  async insertMany(rows: TrajectoryTable[]): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      for (let start = 0; start < rows.length; start += INSERT_CHUNK_ROWS) {
        await trx
          .insertInto('trajectories')
          .values(rows.slice(start, start + INSERT_CHUNK_ROWS))
          .execute();
      }
    });
  }

  /** A page of one split's trajectories in insertion order, seeking past `afterId` through the index. */
  async page(
    modelId: string,
    split: string,
    query: { step?: number; afterId?: string; limit: number },
  ): Promise<Page<StoredTrajectory>> {
    let select = this.db
      .selectFrom('trajectories')
      .selectAll()
      .where('model_id', '=', modelId)
      .where('split', '=', split);
    if (query.step !== undefined) select = select.where('step', '=', query.step);
    if (query.afterId !== undefined) select = select.where('id', '>', query.afterId);
    const rows = await select
      .orderBy('id')
      .limit(query.limit + 1)
      .execute();
    return {
      items: rows.slice(0, query.limit).map(toStoredTrajectory),
      hasMore: rows.length > query.limit,
    };
  }

  async insertRunMetrics(
    runId: string,
    step: number,
    source: string,
    metrics: Record<string, number>,
    createdAt: string,
  ): Promise<void> {
    await this.db
      .insertInto('run_metrics')
      .values({ run_id: runId, step, source, metrics: JSON.stringify(metrics), created_at: createdAt })
      .execute();
  }

  /** Rows that each name where they came from (`dedupeKey`): a row already stored under its key is not added again. */
  async insertRunMetricsOnce(
    rows: { runId: string; step: number; source: string; metrics: Record<string, number>; dedupeKey: string }[],
    createdAt: string,
  ): Promise<void> {
    if (rows.length === 0) return;
    await this.db
      .insertInto('run_metrics')
      .values(
        rows.map((row) => ({
          run_id: row.runId,
          step: row.step,
          source: row.source,
          metrics: JSON.stringify(row.metrics),
          created_at: createdAt,
          dedupe_key: row.dedupeKey,
        })),
      )
      .onConflict((conflict) => conflict.columns(['run_id', 'dedupe_key']).doNothing())
      .execute();
  }

  async runMetrics(runId: string): Promise<RunMetricRecord[]> {
    const rows = await this.db
      .selectFrom('run_metrics')
      .selectAll()
      .where('run_id', '=', runId)
      .orderBy('step')
      .orderBy('id')
      .execute();
    return rows.map((row) => ({
      step: Number(row.step),
      source: row.source,
      metrics: JSON.parse(row.metrics) as Record<string, number>,
      createdAt: row.created_at,
    }));
  }
}
