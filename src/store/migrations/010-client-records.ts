/**
 * What two clients' protocols ask the server to keep.
 * - W&B run history in the run's metrics: rows the `wandb` SDK streams (`file_stream`, e.g. ART's
 *   `model.log(split="val")`) are `run_metrics` rows whose `dedupe_key` names the history line they came from, so a
 *   batch the SDK sends again (it retries) adds nothing. Null for every other row.
 * - Tinker's sampled sequences recorded for StableReinforce (`record_stability_info`): each sequence a sample returned,
 *   by its `sequence_id`, with its prompt, its tokens and the sampler's logprobs (JSON arrays), its entity, and when a
 *   training request last named it (a sequence unused for a day is swept).
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
  await db.schema
    .createTable('tinker_sampled_sequences')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('entity_id', 'text', (c) => c.notNull())
    .addColumn('prompt', 'text', (c) => c.notNull())
    .addColumn('tokens', 'text', (c) => c.notNull())
    .addColumn('logprobs', 'text', (c) => c.notNull())
    .addColumn('used_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex('tinker_sampled_sequences_used')
    .on('tinker_sampled_sequences')
    .column('used_at')
    .execute();
}
