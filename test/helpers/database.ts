/**
 * The databases the service tests run against: SQLite always, and PostgreSQL when the test script
 * exported TEST_DATABASE_URL. Each PostgreSQL test app gets a database of its own, dropped afterwards.
 */
import crypto from 'node:crypto';
import pg from 'pg';

export interface Backend {
  name: 'sqlite' | 'postgres';
  /** Makes a fresh empty database; answers its URL (null: SQLite in the data folder) and how to drop it. */
  create(): Promise<{ databaseUrl: string | null; drop(): Promise<void> }>;
}

const sqlite: Backend = {
  name: 'sqlite',
  create: async () => ({ databaseUrl: null, drop: async () => {} }),
};

function postgres(adminUrl: string): Backend {
  return {
    name: 'postgres',
    async create() {
      const name = `t_${crypto.randomBytes(6).toString('hex')}`;
      const admin = new pg.Client({ connectionString: adminUrl });
      await admin.connect();
      await admin.query(`create database ${name}`);
      await admin.end();
      const url = new URL(adminUrl);
      url.pathname = `/${name}`;
      return {
        databaseUrl: url.toString(),
        async drop() {
          const client = new pg.Client({ connectionString: adminUrl });
          await client.connect();
          await client.query(`drop database if exists ${name} with (force)`);
          await client.end();
        },
      };
    },
  };
}

export function backends(): Backend[] {
  const url = process.env.TEST_DATABASE_URL;
  return url ? [sqlite, postgres(url)] : [sqlite];
}
