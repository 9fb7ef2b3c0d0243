/** A model's checkpoint retention policy (JSON; null: the server default). */
import type { Kysely } from 'kysely';
import type { MigrationContext } from './context.ts';

export async function up(db: Kysely<any>, _context: MigrationContext): Promise<void> {
  await db.schema.alterTable('models').addColumn('retention', 'text').execute();
}
