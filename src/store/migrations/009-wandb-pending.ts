/**
 * W&B artifacts between createArtifact and commitArtifact, in the database rather than in one process's memory: a
 * restart keeps them (their files wait in the blob store's staging area, which start-up now leaves alone for
 * them), every server process of one database sees them, and they can be counted per entity and in all, so one key
 * cannot grow the server's state without bound. The files uploaded so far are rows of their own, so uploads that
 * arrive together never overwrite each other's record. The manifest's bytes are kept as the SDK sent them.
 */
import type { Kysely } from 'kysely';
import type { MigrationContext } from './context.ts';

export async function up(db: Kysely<any>, _context: MigrationContext): Promise<void> {
  await db.schema
    .createTable('wandb_pending_artifacts')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('entity_id', 'text', (c) => c.notNull().references('entities.id'))
    .addColumn('project', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('digest', 'text', (c) => c.notNull())
    .addColumn('description', 'text')
    .addColumn('metadata', 'text')
    .addColumn('staging_id', 'text', (c) => c.notNull())
    .addColumn('manifest', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex('wandb_pending_artifacts_entity')
    .on('wandb_pending_artifacts')
    .columns(['entity_id', 'expires_at'])
    .execute();
  await db.schema
    .createIndex('wandb_pending_artifacts_expiry')
    .on('wandb_pending_artifacts')
    .column('expires_at')
    .execute();
  await db.schema
    .createTable('wandb_pending_files')
    .addColumn('artifact_id', 'text', (c) => c.notNull().references('wandb_pending_artifacts.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('size', 'bigint', (c) => c.notNull())
    .addColumn('sha256', 'text', (c) => c.notNull())
    .addColumn('md5', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('wandb_pending_files_key', ['artifact_id', 'name'])
    .execute();
}
