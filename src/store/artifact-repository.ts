/** Artifact versions: the next version number is allocated inside the insert's transaction. */
import { type Kysely, sql } from 'kysely';
import type { ArtifactVersionRecord, StoredArtifactFile } from '../api/artifacts.ts';
import type { Dialect } from './migrations/context.ts';
import type { ArtifactVersionTable, Database } from './schema.ts';

const MAX_VERSION = 2 ** 31 - 1;

function toVersion(row: ArtifactVersionTable): ArtifactVersionRecord {
  return {
    id: row.id,
    entityId: row.entity_id,
    project: row.project,
    name: row.name,
    version: Number(row.version),
    files: JSON.parse(row.files) as StoredArtifactFile[],
    type: row.type,
    metadata: row.metadata,
    createdAt: row.created_at,
  };
}

export class ArtifactRepository {
  constructor(
    private readonly db: Kysely<Database>,
    private readonly dialect: Dialect,
  ) {}

  /** Inserts the next version of (entity, project, name); `place` moves its files into place before commit. */
  async insertNextVersion(
    identity: {
      id: string;
      entityId: string;
      project: string;
      name: string;
      type: string | null;
      metadata: string | null;
      createdAt: string;
    },
    files: StoredArtifactFile[],
    place: (version: number) => Promise<void>,
  ): Promise<ArtifactVersionRecord> {
    return this.db.transaction().execute(async (trx) => {
      if (this.dialect === 'postgres') await sql`select pg_advisory_xact_lock(7262003)`.execute(trx);
      const row = await trx
        .selectFrom('artifact_versions')
        .select((eb) => eb.fn.max('version').as('version'))
        .where('entity_id', '=', identity.entityId)
        .where('project', '=', identity.project)
        .where('name', '=', identity.name)
        .executeTakeFirst();
      const version = row?.version === null || row?.version === undefined ? 0 : Number(row.version) + 1;
      await place(version);
      const inserted: ArtifactVersionTable = {
        id: identity.id,
        entity_id: identity.entityId,
        project: identity.project,
        name: identity.name,
        version,
        files: JSON.stringify(files),
        type: identity.type,
        metadata: identity.metadata,
        created_at: identity.createdAt,
      };
      await trx.insertInto('artifact_versions').values(inserted).execute();
      return toVersion(inserted);
    });
  }

  async versions(entityId: string, project: string, name: string): Promise<ArtifactVersionRecord[]> {
    const rows = await this.db
      .selectFrom('artifact_versions')
      .selectAll()
      .where('entity_id', '=', entityId)
      .where('project', '=', project)
      .where('name', '=', name)
      .orderBy('version')
      .execute();
    return rows.map(toVersion);
  }

  /** A version by number, or the latest when `version` is 'latest'. */
  async find(
    entityId: string,
    project: string,
    name: string,
    version: number | 'latest',
  ): Promise<ArtifactVersionRecord | undefined> {
    // The column is a 32-bit integer: a larger version names nothing (and PostgreSQL would refuse the comparison).
    if (version !== 'latest' && !(Number.isSafeInteger(version) && version <= MAX_VERSION)) return undefined;
    let select = this.db
      .selectFrom('artifact_versions')
      .selectAll()
      .where('entity_id', '=', entityId)
      .where('project', '=', project)
      .where('name', '=', name);
    select = version === 'latest' ? select.orderBy('version', 'desc').limit(1) : select.where('version', '=', version);
    const row = await select.executeTakeFirst();
    return row && toVersion(row);
  }

  async findById(id: string): Promise<ArtifactVersionRecord | undefined> {
    const row = await this.db.selectFrom('artifact_versions').selectAll().where('id', '=', id).executeTakeFirst();
    return row && toVersion(row);
  }
}
