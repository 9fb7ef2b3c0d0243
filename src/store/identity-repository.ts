/** Entities (users and teams), team memberships and API keys (stored as SHA-256 hashes only). */
import type { Kysely } from 'kysely';
import type { Database, EntityTable } from './schema.ts';

export type EntityRow = EntityTable;

export interface ApiKeyRecord {
  id: string;
  entityId: string;
  entityName: string;
  keyPrefix: string;
  createdAt: string;
  revokedAt: string | null;
}

export class IdentityRepository {
  constructor(private readonly db: Kysely<Database>) {}

  async countEntities(): Promise<number> {
    const row = await this.db
      .selectFrom('entities')
      .select((eb) => eb.fn.countAll().as('n'))
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }

  findEntityByName(name: string): Promise<EntityRow | undefined> {
    return this.db.selectFrom('entities').selectAll().where('name', '=', name).executeTakeFirst();
  }

  async insertEntity(entity: EntityRow): Promise<void> {
    await this.db.insertInto('entities').values(entity).execute();
  }

  async addMembership(teamId: string, memberId: string, createdAt: string): Promise<void> {
    await this.db
      .insertInto('memberships')
      .values({ team_id: teamId, member_id: memberId, created_at: createdAt })
      .onConflict((oc) => oc.columns(['team_id', 'member_id']).doNothing())
      .execute();
  }

  async insertApiKey(key: {
    id: string;
    entityId: string;
    keyHash: string;
    keyPrefix: string;
    createdAt: string;
  }): Promise<void> {
    await this.db
      .insertInto('api_keys')
      .values({
        id: key.id,
        entity_id: key.entityId,
        key_hash: key.keyHash,
        key_prefix: key.keyPrefix,
        created_at: key.createdAt,
        revoked_at: null,
      })
      .execute();
  }

  /** The live key with this hash and the names of every entity it may act for (its own first). */
  async findActiveKey(
    keyHash: string,
  ): Promise<{ entityId: string; entityName: string; memberOf: { id: string; name: string }[] } | undefined> {
    const key = await this.db
      .selectFrom('api_keys')
      .innerJoin('entities', 'entities.id', 'api_keys.entity_id')
      .select(['api_keys.entity_id', 'entities.name'])
      .where('api_keys.key_hash', '=', keyHash)
      .where('api_keys.revoked_at', 'is', null)
      .executeTakeFirst();
    if (!key) return undefined;
    const teams = await this.db
      .selectFrom('memberships')
      .innerJoin('entities', 'entities.id', 'memberships.team_id')
      .select(['entities.id', 'entities.name'])
      .where('memberships.member_id', '=', key.entity_id)
      .execute();
    return { entityId: key.entity_id, entityName: key.name, memberOf: teams };
  }

  async listKeys(): Promise<ApiKeyRecord[]> {
    const rows = await this.db
      .selectFrom('api_keys')
      .innerJoin('entities', 'entities.id', 'api_keys.entity_id')
      .select([
        'api_keys.id',
        'api_keys.entity_id',
        'entities.name',
        'api_keys.key_prefix',
        'api_keys.created_at',
        'api_keys.revoked_at',
      ])
      .orderBy('api_keys.created_at')
      .execute();
    return rows.map((row) => ({
      id: row.id,
      entityId: row.entity_id,
      entityName: row.name,
      keyPrefix: row.key_prefix,
      createdAt: row.created_at,
      revokedAt: row.revoked_at,
    }));
  }

  /** Revokes by key id or by the full key's hash; answers how many keys changed. */
  async revokeKey(idOrHash: string, revokedAt: string): Promise<number> {
    const result = await this.db
      .updateTable('api_keys')
      .set({ revoked_at: revokedAt })
      .where((eb) => eb.or([eb('id', '=', idOrHash), eb('key_hash', '=', idOrHash)]))
      .where('revoked_at', 'is', null)
      .executeTakeFirst();
    return Number(result.numUpdatedRows);
  }
}
