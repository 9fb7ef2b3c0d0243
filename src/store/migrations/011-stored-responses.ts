/**
 * The Responses API's stored responses (`store`, the default): per response its entity (never visible to another),
 * the response object as it was answered (`GET /v1/responses/{id}`), and the conversation it ends as chat messages
 * (JSON text), which a later request continues with `previous_response_id`.
 */
import type { Kysely } from 'kysely';
import type { MigrationContext } from './context.ts';

export async function up(db: Kysely<any>, _context: MigrationContext): Promise<void> {
  await db.schema
    .createTable('stored_responses')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('entity_id', 'text', (c) => c.notNull().references('entities.id'))
    .addColumn('response', 'text', (c) => c.notNull())
    .addColumn('conversation', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
}
