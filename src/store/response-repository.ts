/** Stored Responses API responses, each visible only to its entity: saved, read and deleted by (entity, id). */
import type { Kysely } from 'kysely';
import type { ResponseObject } from '../api/responses.ts';
import type { ChatMessage } from '../conversation/chat-shapes.ts';
import type { Database } from './schema.ts';

export interface StoredResponse {
  response: ResponseObject;
  /** The conversation the response ends, as chat messages: what `previous_response_id` continues. */
  conversation: ChatMessage[];
}

export class ResponseRepository {
  constructor(private readonly db: Kysely<Database>) {}

  async save(entityId: string, stored: StoredResponse, createdAt: string): Promise<void> {
    await this.db
      .insertInto('stored_responses')
      .values({
        id: stored.response.id,
        entity_id: entityId,
        response: JSON.stringify(stored.response),
        conversation: JSON.stringify(stored.conversation),
        created_at: createdAt,
      })
      .execute();
  }

  /** The entity's response of that id; another entity's is not found, as if it did not exist. */
  async find(entityId: string, id: string): Promise<StoredResponse | undefined> {
    const row = await this.db
      .selectFrom('stored_responses')
      .select(['response', 'conversation'])
      .where('id', '=', id)
      .where('entity_id', '=', entityId)
      .executeTakeFirst();
    return (
      row && {
        response: JSON.parse(row.response) as ResponseObject,
        conversation: JSON.parse(row.conversation) as ChatMessage[],
      }
    );
  }

  /** Whether the entity had a response of that id (now deleted). */
  async delete(entityId: string, id: string): Promise<boolean> {
    const result = await this.db
      .deleteFrom('stored_responses')
      .where('id', '=', id)
      .where('entity_id', '=', entityId)
      .executeTakeFirst();
    return Number(result.numDeletedRows) > 0;
  }
}
