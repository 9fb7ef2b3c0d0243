/**
 * Exactly-once Tinker requests and signed checkpoint downloads. A future records the request it answers
 * (`request_key`: the training client or session it addresses and the SDK's sequence number; `request_hash`: its
 * content), unique per entity, so a request the SDK re-sends after losing the answer finds the first one's future
 * instead of running again. `server_secrets` holds keys every server process of one database shares, such as the
 * one that signs checkpoint download URLs.
 */
import type { Kysely } from 'kysely';
import type { MigrationContext } from './context.ts';

export async function up(db: Kysely<any>, _context: MigrationContext): Promise<void> {
  await db.schema.alterTable('tinker_futures').addColumn('request_key', 'text').execute();
  await db.schema.alterTable('tinker_futures').addColumn('request_hash', 'text').execute();
  // Rows without a key (requests the SDK does not number) never collide: NULLs are distinct in both databases.
  await db.schema
    .createIndex('tinker_futures_request')
    .unique()
    .on('tinker_futures')
    .columns(['entity_id', 'request_key'])
    .execute();
  await db.schema
    .createTable('server_secrets')
    .addColumn('name', 'text', (c) => c.primaryKey())
    .addColumn('value', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
}
