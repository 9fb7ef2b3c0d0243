/**
 * The Tinker API's own records: SDK sessions (with their last heartbeat), training clients (a Tinker model id
 * ↔ one of our models, with its LoRA rank and seed), sampling sessions, named checkpoints (a Tinker checkpoint
 * name ↔ a step of the model, with the training-state folder for `save_weights`), and futures (each request's
 * outcome, kept so a client can poll after the fact).
 */
import type { Kysely } from 'kysely';
import type { MigrationContext } from './index.ts';

export async function up(db: Kysely<any>, _context: MigrationContext): Promise<void> {
  await db.schema
    .createTable('tinker_sessions')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('entity_id', 'text', (c) => c.notNull().references('entities.id'))
    .addColumn('sdk_version', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('heartbeat_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema
    .createTable('tinker_models')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('model_id', 'text', (c) => c.notNull().unique().references('models.id').onDelete('cascade'))
    .addColumn('session_id', 'text', (c) => c.notNull())
    .addColumn('lora_rank', 'integer', (c) => c.notNull())
    .addColumn('seed', 'bigint', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema
    .createTable('tinker_sampling_sessions')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('entity_id', 'text', (c) => c.notNull().references('entities.id'))
    .addColumn('base_model', 'text', (c) => c.notNull())
    .addColumn('model_path', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema
    .createTable('tinker_checkpoints')
    .addColumn('model_id', 'text', (c) => c.notNull().references('models.id').onDelete('cascade'))
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('step', 'integer', (c) => c.notNull())
    .addColumn('state_path', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('tinker_checkpoints_pk', ['model_id', 'kind', 'name'])
    .execute();
  await db.schema
    .createTable('tinker_futures')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('entity_id', 'text', (c) => c.notNull())
    .addColumn('model_id', 'text')
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('result', 'text')
    .addColumn('error', 'text')
    .addColumn('category', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('finished_at', 'text')
    .execute();
  await db.schema.createIndex('tinker_futures_status').on('tinker_futures').column('status').execute();
}
