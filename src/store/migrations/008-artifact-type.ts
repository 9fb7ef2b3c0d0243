/** An artifact version's W&B type and metadata (JSON text), for versions logged with the `wandb` SDK; null for the rest. */
import type { Kysely } from 'kysely';
import type { MigrationContext } from './context.ts';

export async function up(db: Kysely<any>, _context: MigrationContext): Promise<void> {
  await db.schema.alterTable('artifact_versions').addColumn('type', 'text').execute();
  await db.schema.alterTable('artifact_versions').addColumn('metadata', 'text').execute();
}
