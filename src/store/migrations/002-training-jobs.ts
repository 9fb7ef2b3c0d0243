/** The durable job queue: training jobs with leases, and their append-only events. */
import type { Kysely } from 'kysely';
import type { MigrationContext } from './context.ts';

export async function up(db: Kysely<any>, _context: MigrationContext): Promise<void> {
  await db.schema
    .createTable('training_jobs')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('model_id', 'text', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('payload_path', 'text', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('lease_owner', 'text')
    .addColumn('lease_expires_at', 'text')
    .addColumn('cancel_requested', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('num_sequences', 'integer')
    .addColumn('checkpoint_step', 'integer')
    .addColumn('metrics', 'text', (c) => c.notNull().defaultTo('{}'))
    .addColumn('error_code', 'text')
    .addColumn('error_message', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('started_at', 'text')
    .addColumn('finished_at', 'text')
    .execute();
  await db.schema
    .createIndex('training_jobs_status_created')
    .on('training_jobs')
    .columns(['status', 'created_at'])
    .execute();
  await db.schema
    .createIndex('training_jobs_model_created')
    .on('training_jobs')
    .columns(['model_id', 'created_at'])
    .execute();

  await db.schema
    .createTable('training_job_events')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('job_id', 'text', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('data', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex('training_job_events_job_id')
    .on('training_job_events')
    .columns(['job_id', 'id'])
    .execute();
}
