/** Keys every server process of one database shares (the ones that sign URLs this server hands out). */
import type { Kysely } from 'kysely';
import type { Database } from './schema.ts';

export class SecretRepository {
  constructor(private readonly db: Kysely<Database>) {}

  /** The secret stored under `name`, made from `candidate` by whichever process asks first. */
  async sharedSecret(name: string, candidate: string, now: string): Promise<string> {
    await this.db
      .insertInto('server_secrets')
      .values({ name, value: candidate, created_at: now })
      .onConflict((oc) => oc.column('name').doNothing())
      .execute();
    const row = await this.db
      .selectFrom('server_secrets')
      .select('value')
      .where('name', '=', name)
      .executeTakeFirstOrThrow();
    return row.value;
  }
}
