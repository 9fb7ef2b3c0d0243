/** Models with their runs and checkpoints: one aggregate, so its rows change together in transactions. */
import { setImmediate } from 'node:timers/promises';
import type { Kysely, Transaction } from 'kysely';
import type { Page } from '../api/lists.ts';
import type { CheckpointRecord, ModelRow, RetentionPolicy } from '../api/models.ts';
import type { CheckpointTable, Database, ModelTable } from './schema.ts';

export function toModelRow(row: ModelTable & { entity_name: string }): ModelRow {
  return {
    ...row,
    last_step: Number(row.last_step),
    retention: row.retention ? (JSON.parse(row.retention) as RetentionPolicy) : null,
  };
}

export interface CheckpointPageQuery {
  after: string | undefined;
  limit: number;
  order: 'asc' | 'desc';
}

function toCheckpoint(row: CheckpointTable): CheckpointRecord {
  return {
    id: row.id,
    modelId: row.model_id,
    step: Number(row.step),
    metrics: JSON.parse(row.metrics) as Record<string, unknown>,
    adapterPath: row.adapter_path,
    createdAt: row.created_at,
  };
}

/** Most values bound in one statement: under the 999 of older SQLite builds, let alone PostgreSQL's 65,535. */
const SQL_BATCH = 500;

function* batches<T>(items: T[], size: number = SQL_BATCH): Iterable<T[]> {
  for (let start = 0; start < items.length; start += size) yield items.slice(start, start + size);
}

export class ModelRepository {
  constructor(private readonly db: Kysely<Database>) {}

  private selectModels(db: Kysely<Database> | Transaction<Database> = this.db) {
    return db
      .selectFrom('models')
      .innerJoin('entities', 'entities.id', 'models.entity_id')
      .selectAll('models')
      .select('entities.name as entity_name');
  }

  async insertModel(model: ModelTable, step0: CheckpointTable): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await trx.insertInto('models').values(model).execute();
      await trx
        .insertInto('runs')
        .values({ id: model.run_id, model_id: model.id, created_at: model.created_at })
        .execute();
      await trx.insertInto('checkpoints').values(step0).execute();
    });
  }

  /** Adds a trained checkpoint and records its step as the highest ever written, in one transaction. */
  async insertCheckpoint(checkpoint: CheckpointTable): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await trx.insertInto('checkpoints').values(checkpoint).execute();
      await trx
        .updateTable('models')
        .set({ last_step: checkpoint.step })
        .where('id', '=', checkpoint.model_id)
        .where('last_step', '<', checkpoint.step)
        .execute();
    });
  }

  async findById(id: string): Promise<ModelRow | undefined> {
    const row = await this.selectModels().where('models.id', '=', id).executeTakeFirst();
    return row && toModelRow(row);
  }

  async findByName(entityName: string, project: string, name: string): Promise<ModelRow | undefined> {
    const row = await this.selectModels()
      .where('entities.name', '=', entityName)
      .where('models.project', '=', project)
      .where('models.name', '=', name)
      .executeTakeFirst();
    return row && toModelRow(row);
  }

  /** Every checkpoint of the given entities' models, with the model's names, ordered by model name then step. */
  async servableCheckpoints(entityIds: string[]) {
    const rows = await this.db
      .selectFrom('checkpoints')
      .innerJoin('models', 'models.id', 'checkpoints.model_id')
      .innerJoin('entities', 'entities.id', 'models.entity_id')
      .select([
        'entities.name as entity_name',
        'models.project',
        'models.name',
        'models.base_model',
        'models.created_at',
        'checkpoints.step',
        'checkpoints.created_at as checkpoint_created_at',
      ])
      .where('models.entity_id', 'in', entityIds)
      .orderBy('entities.name')
      .orderBy('models.project')
      .orderBy('models.name')
      .orderBy('checkpoints.step')
      .execute();
    return rows.map((row) => ({ ...row, step: Number(row.step) }));
  }

  /**
   * Removes the model and everything hanging off it in one transaction, recording its folder as a
   * pending deletion in that same transaction so a crash before the files go leaves a note, not an orphan.
   */
  async deleteModel(
    modelId: string,
    runId: string,
    folder: string,
    now: string,
  ): Promise<{ deletedCheckpoints: number; deletedRun: boolean }> {
    return this.db.transaction().execute(async (trx) => {
      await trx.deleteFrom('trajectories').where('model_id', '=', modelId).execute();
      await trx.deleteFrom('trained_tokens').where('model_id', '=', modelId).execute();
      const checkpoints = await trx.deleteFrom('checkpoints').where('model_id', '=', modelId).executeTakeFirst();
      await trx.deleteFrom('run_metrics').where('run_id', '=', runId).execute();
      const run = await trx.deleteFrom('runs').where('id', '=', runId).executeTakeFirst();
      await trx.deleteFrom('models').where('id', '=', modelId).execute();
      await trx.insertInto('pending_file_deletions').values({ path: folder, created_at: now }).execute();
      return { deletedCheckpoints: Number(checkpoints.numDeletedRows), deletedRun: Number(run.numDeletedRows) > 0 };
    });
  }

  async findCheckpointById(modelId: string, id: string): Promise<CheckpointRecord | undefined> {
    const row = await this.db
      .selectFrom('checkpoints')
      .selectAll()
      .where('model_id', '=', modelId)
      .where('id', '=', id)
      .executeTakeFirst();
    return row && toCheckpoint(row);
  }

  async findCheckpointByStep(modelId: string, step: number): Promise<CheckpointRecord | undefined> {
    const row = await this.db
      .selectFrom('checkpoints')
      .selectAll()
      .where('model_id', '=', modelId)
      .where('step', '=', step)
      .executeTakeFirst();
    return row && toCheckpoint(row);
  }

  async latestCheckpoint(modelId: string): Promise<CheckpointRecord | undefined> {
    const row = await this.db
      .selectFrom('checkpoints')
      .selectAll()
      .where('model_id', '=', modelId)
      .orderBy('step', 'desc')
      .limit(1)
      .executeTakeFirst();
    return row && toCheckpoint(row);
  }

  /** One page of checkpoints by step, seeking from the cursor's step through the (model_id, step) index. */
  async pageCheckpoints(
    modelId: string,
    cursorStep: number | undefined,
    query: CheckpointPageQuery,
  ): Promise<Page<CheckpointRecord>> {
    let select = this.db.selectFrom('checkpoints').selectAll().where('model_id', '=', modelId);
    if (cursorStep !== undefined) select = select.where('step', query.order === 'asc' ? '>' : '<', cursorStep);
    const rows = await select
      .orderBy('step', query.order)
      .limit(query.limit + 1)
      .execute();
    return { items: rows.slice(0, query.limit).map(toCheckpoint), hasMore: rows.length > query.limit };
  }

  /**
   * Deletes the listed steps (any number of them: the statements go in batches under the databases' limits on
   * bound variables); their adapter folders become pending deletions in the same transaction.
   */
  async deleteCheckpoints(
    modelId: string,
    steps: number[],
    now: string,
  ): Promise<{ deletedSteps: number[]; folders: string[] }> {
    return this.db.transaction().execute(async (trx) => {
      const deletedSteps: number[] = [];
      const folders: string[] = [];
      for (const batch of batches(steps)) {
        // SQLite answers synchronously: without a turn of the event loop between batches, deleting 100 000 steps
        // would hold every other request (health included) until the last one.
        await setImmediate();
        const rows = await trx
          .selectFrom('checkpoints')
          .select(['id', 'step', 'adapter_path'])
          .where('model_id', '=', modelId)
          .where('step', 'in', batch)
          .execute();
        if (rows.length === 0) continue;
        await trx
          .deleteFrom('checkpoints')
          .where(
            'id',
            'in',
            rows.map((row) => row.id),
          )
          .execute();
        const paths = rows.map((row) => row.adapter_path).filter((p): p is string => p !== null);
        // Two bound values per row.
        for (const chunk of batches(paths, SQL_BATCH / 2)) {
          await trx
            .insertInto('pending_file_deletions')
            .values(chunk.map((p) => ({ path: p, created_at: now })))
            .execute();
        }
        for (const row of rows) deletedSteps.push(Number(row.step));
        for (const folder of paths) folders.push(folder);
      }
      return { deletedSteps, folders };
    });
  }

  /** Every checkpoint's step and metrics, oldest first: what a retention policy chooses from. */
  async checkpointSummaries(modelId: string): Promise<{ step: number; metrics: Record<string, unknown> }[]> {
    const rows = await this.db
      .selectFrom('checkpoints')
      .select(['step', 'metrics'])
      .where('model_id', '=', modelId)
      .orderBy('step', 'asc')
      .execute();
    return rows.map((row) => ({ step: Number(row.step), metrics: JSON.parse(row.metrics) as Record<string, unknown> }));
  }

  async setRetention(modelId: string, retention: RetentionPolicy | null): Promise<void> {
    await this.db
      .updateTable('models')
      .set({ retention: retention && JSON.stringify(retention) })
      .where('id', '=', modelId)
      .execute();
  }

  async setCheckpointMetrics(checkpointId: string, metrics: Record<string, unknown>): Promise<void> {
    await this.db
      .updateTable('checkpoints')
      .set({ metrics: JSON.stringify(metrics) })
      .where('id', '=', checkpointId)
      .execute();
  }

  async setCheckpointAdapterPath(checkpointId: string, adapterPath: string): Promise<void> {
    await this.db
      .updateTable('checkpoints')
      .set({ adapter_path: adapterPath })
      .where('id', '=', checkpointId)
      .execute();
  }

  pendingFileDeletions(): Promise<{ id: number; path: string }[]> {
    return this.db.selectFrom('pending_file_deletions').select(['id', 'path']).orderBy('id').execute();
  }

  async forgetPendingFileDeletion(id: number): Promise<void> {
    await this.db.deleteFrom('pending_file_deletions').where('id', '=', id).execute();
  }
}
