/**
 * Opens the database (SQLite file in the data folder, or PostgreSQL when a URL is given) behind one
 * Kysely seam, and brings its schema up to date. Refuses a schema newer than this code knows.
 */
import fs from 'node:fs';
import path from 'node:path';
import SqliteDatabase from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect, sql } from 'kysely';
import pg from 'pg';
import { type Dialect, migrationContext } from './migrations/context.ts';
import { MIGRATIONS } from './migrations/index.ts';
import type { Database } from './schema.ts';

export interface Store {
  db: Kysely<Database>;
  dialect: Dialect;
  close(): Promise<void>;
}

export class SchemaTooNewError extends Error {}

export function openStore(options: { databaseUrl: string | null; dataDir: string }): Store {
  if (options.databaseUrl) {
    const pool = new pg.Pool({ connectionString: options.databaseUrl, max: 10, connectionTimeoutMillis: 5000 });
    // A dead server must surface as failed queries, not as an unhandled 'error' event that kills the process.
    pool.on('error', () => {});
    const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
    return { db, dialect: 'postgres', close: () => db.destroy() };
  }
  fs.mkdirSync(options.dataDir, { recursive: true });
  const file = new SqliteDatabase(path.join(options.dataDir, 'service.sqlite'));
  file.pragma('journal_mode = WAL');
  file.pragma('synchronous = NORMAL');
  file.pragma('foreign_keys = ON');
  file.pragma('busy_timeout = 5000');
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: file }) });
  return { db, dialect: 'sqlite', close: () => db.destroy() };
}

export async function migrate(store: Store): Promise<{ from: number; to: number }> {
  const { db } = store;
  await db.schema
    .createTable('schema_version')
    .ifNotExists()
    .addColumn('version', 'integer', (c) => c.primaryKey())
    .addColumn('applied_at', 'text', (c) => c.notNull())
    .execute();
  const latestKnown = MIGRATIONS[MIGRATIONS.length - 1].version;
  return db.transaction().execute(async (trx) => {
    if (store.dialect === 'postgres') {
      // Two servers starting together must not both run the same migration.
      await sql`select pg_advisory_xact_lock(7262001)`.execute(trx);
    }
    const applied = new Set(
      (await trx.selectFrom('schema_version').select('version').execute()).map((row) => Number(row.version)),
    );
    const current = [...applied].reduce((most, version) => Math.max(most, version), 0);
    if (current > latestKnown) {
      throw new SchemaTooNewError(
        `database schema version ${current} is newer than this server knows (${latestKnown}); upgrade the server`,
      );
    }
    // Every migration not yet recorded, a lower number included: numbers are handed out to work in parallel, so
    // one (009) may be merged after a higher one (011) already ran on a database.
    for (const migration of MIGRATIONS.filter((m) => !applied.has(m.version))) {
      await migration.up(trx, migrationContext(store.dialect));
      await trx
        .insertInto('schema_version')
        .values({ version: migration.version, applied_at: new Date().toISOString() })
        .execute();
    }
    return { from: current, to: latestKnown };
  });
}
