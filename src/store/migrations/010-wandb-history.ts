/**
 * W&B run history kept in the run's metrics: rows the `wandb` SDK streams (`file_stream`, e.g. ART's
 * `model.log(split="val")`) are `run_metrics` rows whose `dedupe_key` names the history line they came from, so a
 * batch the SDK sends again (it retries) adds nothing. Null for every other row.
 */
import type { Kysely } from 'kysely';
import type { MigrationContext } from './context.ts';

export async function up(db: Kysely<any>, _context: MigrationContext): Promise<void> {
  await db.schema.alterTable('run_metrics').addColumn('dedupe_key', 'text').execute();
  await db.schema
    .createIndex('run_metrics_dedupe')
    .on('run_metrics')
    .columns(['run_id', 'dedupe_key'])
    .unique()
    .execute();
}
