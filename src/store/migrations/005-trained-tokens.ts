/**
 * Per trained trajectory of an RL job: its trained tokens with the sampler's logprob and the trainer's logprob
 * after the job's last step (JSON arrays), for the dashboard's tokens view. Capped per job by the runner.
 */
import type { Kysely } from 'kysely';
import type { MigrationContext } from './context.ts';

export async function up(db: Kysely<any>, _context: MigrationContext): Promise<void> {
  await db.schema
    .createTable('trained_tokens')
    .addColumn('model_id', 'text', (c) => c.notNull().references('models.id'))
    .addColumn('step', 'integer', (c) => c.notNull())
    .addColumn('group_index', 'integer', (c) => c.notNull())
    .addColumn('trajectory_index', 'integer', (c) => c.notNull())
    .addColumn('advantage', 'double precision', (c) => c.notNull())
    .addColumn('tokens', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('trained_tokens_pk', ['model_id', 'step', 'group_index', 'trajectory_index'])
    .execute();
}
