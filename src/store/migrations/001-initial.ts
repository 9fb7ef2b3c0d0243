/** The foundation tables: identity, models, checkpoints, run history, trajectories, crash-safe file deletion. */
import type { Kysely } from 'kysely';
import type { MigrationContext } from './context.ts';

export async function up(db: Kysely<any>, context: MigrationContext): Promise<void> {
  await identityTables(db);
  await modelTables(db);
  await historyTables(db, context);
}

/** Entities (users and teams), team memberships and API keys. */
async function identityTables(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('entities')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('name', 'text', (c) => c.notNull().unique())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('memberships')
    .addColumn('team_id', 'text', (c) => c.notNull().references('entities.id'))
    .addColumn('member_id', 'text', (c) => c.notNull().references('entities.id'))
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('memberships_pk', ['team_id', 'member_id'])
    .execute();
  await db.schema.createIndex('memberships_member').on('memberships').column('member_id').execute();

  await db.schema
    .createTable('api_keys')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('entity_id', 'text', (c) => c.notNull().references('entities.id'))
    .addColumn('key_hash', 'text', (c) => c.notNull().unique())
    .addColumn('key_prefix', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('revoked_at', 'text')
    .execute();
}

/** Models, their runs and their checkpoints. */
async function modelTables(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('models')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('entity_id', 'text', (c) => c.notNull().references('entities.id'))
    .addColumn('project', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('base_model', 'text', (c) => c.notNull())
    .addColumn('run_id', 'text', (c) => c.notNull())
    .addColumn('last_step', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('models_entity_project_name', ['entity_id', 'project', 'name'])
    .execute();

  await db.schema
    .createTable('runs')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('model_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('runs_model').on('runs').column('model_id').execute();

  await db.schema
    .createTable('checkpoints')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('model_id', 'text', (c) => c.notNull().references('models.id'))
    .addColumn('step', 'integer', (c) => c.notNull())
    .addColumn('metrics', 'text', (c) => c.notNull())
    .addColumn('adapter_path', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('checkpoints_model_step', ['model_id', 'step'])
    .execute();
}

/** The run's metric history, logged trajectories, and file deletions still owed after a crash. */
async function historyTables(db: Kysely<any>, { serialType, serialConstraint }: MigrationContext): Promise<void> {
  await db.schema
    .createTable('run_metrics')
    .addColumn('id', serialType, serialConstraint)
    .addColumn('run_id', 'text', (c) => c.notNull())
    .addColumn('step', 'integer', (c) => c.notNull())
    .addColumn('source', 'text', (c) => c.notNull())
    .addColumn('metrics', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('run_metrics_run_step').on('run_metrics').columns(['run_id', 'step']).execute();

  await db.schema
    .createTable('trajectories')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('model_id', 'text', (c) => c.notNull().references('models.id'))
    .addColumn('split', 'text', (c) => c.notNull())
    .addColumn('step', 'integer', (c) => c.notNull())
    .addColumn('group_index', 'integer', (c) => c.notNull())
    .addColumn('trajectory_index', 'integer', (c) => c.notNull())
    .addColumn('reward', 'double precision')
    .addColumn('data', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex('trajectories_model_split_step')
    .on('trajectories')
    .columns(['model_id', 'split', 'step', 'id'])
    .execute();

  await db.schema
    .createTable('pending_file_deletions')
    .addColumn('id', serialType, serialConstraint)
    .addColumn('path', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
}
