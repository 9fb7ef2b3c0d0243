/** W&B artifacts between createArtifact and commitArtifact, and the files uploaded for them so far. */
import type { Kysely } from 'kysely';
import type { StagedFile } from '../artifacts/blob-store.ts';
import type { Database, WandbPendingArtifactTable } from './schema.ts';

export interface PendingArtifactRecord {
  id: string;
  entityId: string;
  project: string;
  name: string;
  type: string;
  digest: string;
  description: string | null;
  metadata: string | null;
  stagingId: string;
  manifest: Buffer | null;
  createdAt: string;
  expiresAt: string;
}

function toRecord(row: WandbPendingArtifactTable): PendingArtifactRecord {
  return {
    id: row.id,
    entityId: row.entity_id,
    project: row.project,
    name: row.name,
    type: row.type,
    digest: row.digest,
    description: row.description,
    metadata: row.metadata,
    stagingId: row.staging_id,
    manifest: row.manifest === null ? null : Buffer.from(row.manifest, 'base64'),
    createdAt: row.created_at,
    expiresAt: row.expires_at,
  };
}

export class WandbRepository {
  constructor(private readonly db: Kysely<Database>) {}

  async insertPending(record: Omit<PendingArtifactRecord, 'manifest'>): Promise<void> {
    await this.db
      .insertInto('wandb_pending_artifacts')
      .values({
        id: record.id,
        entity_id: record.entityId,
        project: record.project,
        name: record.name,
        type: record.type,
        digest: record.digest,
        description: record.description,
        metadata: record.metadata,
        staging_id: record.stagingId,
        manifest: null,
        created_at: record.createdAt,
        expires_at: record.expiresAt,
      })
      .execute();
  }

  /** Pending artifacts not yet expired at `now`: of one entity, or of every entity when `entityId` is null. */
  async countLive(entityId: string | null, now: string): Promise<number> {
    let query = this.db
      .selectFrom('wandb_pending_artifacts')
      .select((eb) => eb.fn.countAll<number>().as('count'))
      .where('expires_at', '>=', now);
    if (entityId !== null) query = query.where('entity_id', '=', entityId);
    return Number((await query.executeTakeFirstOrThrow()).count);
  }

  async find(id: string): Promise<PendingArtifactRecord | undefined> {
    const row = await this.db.selectFrom('wandb_pending_artifacts').selectAll().where('id', '=', id).executeTakeFirst();
    return row && toRecord(row);
  }

  async files(id: string): Promise<StagedFile[]> {
    const rows = await this.db
      .selectFrom('wandb_pending_files')
      .selectAll()
      .where('artifact_id', '=', id)
      .orderBy('name')
      .execute();
    return rows.map((row) => ({ name: row.name, size: Number(row.size), sha256: row.sha256, md5: row.md5 }));
  }

  async forgetFile(id: string, name: string): Promise<void> {
    await this.db.deleteFrom('wandb_pending_files').where('artifact_id', '=', id).where('name', '=', name).execute();
  }

  /** Records a file that arrived whole; false when its artifact is gone (committed or expired meanwhile). */
  async recordFile(id: string, file: StagedFile): Promise<boolean> {
    return this.db.transaction().execute(async (trx) => {
      const exists = await trx
        .selectFrom('wandb_pending_artifacts')
        .select('id')
        .where('id', '=', id)
        .executeTakeFirst();
      if (!exists) return false;
      const row = { artifact_id: id, name: file.name, size: file.size, sha256: file.sha256, md5: file.md5 };
      await trx
        .insertInto('wandb_pending_files')
        .values(row)
        .onConflict((oc) =>
          oc.columns(['artifact_id', 'name']).doUpdateSet({ size: row.size, sha256: row.sha256, md5: row.md5 }),
        )
        .execute();
      return true;
    });
  }

  async setManifest(id: string, manifest: Buffer): Promise<boolean> {
    const result = await this.db
      .updateTable('wandb_pending_artifacts')
      .set({ manifest: manifest.toString('base64') })
      .where('id', '=', id)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }

  /** Removes a pending artifact and its file rows; true for the one caller that removed it. */
  async remove(id: string): Promise<boolean> {
    return this.db.transaction().execute(async (trx) => {
      await trx.deleteFrom('wandb_pending_files').where('artifact_id', '=', id).execute();
      const result = await trx.deleteFrom('wandb_pending_artifacts').where('id', '=', id).executeTakeFirst();
      return Number(result.numDeletedRows) > 0;
    });
  }

  /** Up to `limit` pending artifacts that expired before `now`, oldest first. */
  async expired(now: string, limit: number): Promise<{ id: string; stagingId: string }[]> {
    const rows = await this.db
      .selectFrom('wandb_pending_artifacts')
      .select(['id', 'staging_id'])
      .where('expires_at', '<', now)
      .orderBy('expires_at')
      .limit(limit)
      .execute();
    return rows.map((row) => ({ id: row.id, stagingId: row.staging_id }));
  }

  /** The staging areas of every pending artifact, which a start-up sweep of staging must leave in place. */
  async stagingIds(): Promise<string[]> {
    const rows = await this.db.selectFrom('wandb_pending_artifacts').select('staging_id').execute();
    return rows.map((row) => row.staging_id);
  }
}
