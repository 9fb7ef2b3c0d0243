/**
 * The database seam itself: migrations, refusal of a newer schema, stored Responses API responses visible to their
 * entity alone, and the system check against a dead database.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { migrate, openStore, SchemaTooNewError } from '../src/store/db.ts';
import { MIGRATIONS } from '../src/store/migrations/index.ts';
import { ResponseRepository } from '../src/store/response-repository.ts';
import { buildTestApp } from './helpers/app.ts';
import { backends } from './helpers/database.ts';

const latest = MIGRATIONS[MIGRATIONS.length - 1].version;

for (const backend of backends()) {
  describe(`migrations on ${backend.name}`, () => {
    test('migrate is idempotent and a newer schema is refused', async () => {
      const database = await backend.create();
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'store-test-'));
      const store = openStore({ databaseUrl: database.databaseUrl, dataDir });
      try {
        assert.deepEqual(await migrate(store), { from: 0, to: latest });
        assert.deepEqual(await migrate(store), { from: latest, to: latest });
        await store.db
          .insertInto('schema_version')
          .values({ version: latest + 1, applied_at: new Date().toISOString() })
          .execute();
        await assert.rejects(migrate(store), SchemaTooNewError);
      } finally {
        await store.close();
        await database.drop();
        fs.rmSync(dataDir, { recursive: true, force: true });
      }
    });

    test('a stored response is found, and deleted, by its own entity only', async () => {
      const database = await backend.create();
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'store-test-'));
      const store = openStore({ databaseUrl: database.databaseUrl, dataDir });
      try {
        await migrate(store);
        const now = new Date().toISOString();
        for (const id of ['alice', 'bob'])
          await store.db.insertInto('entities').values({ id, name: id, kind: 'user', created_at: now }).execute();
        const responses = new ResponseRepository(store.db);
        const stored = {
          response: { id: 'resp_1', output: [{ type: 'message', content: [{ text: 'hé \u2603' }] }] },
          conversation: [{ role: 'user', content: 'hi' }],
        } as unknown as Parameters<ResponseRepository['save']>[1];
        await responses.save('alice', stored, now);
        assert.deepEqual(await responses.find('alice', 'resp_1'), stored);
        assert.equal(await responses.find('bob', 'resp_1'), undefined);
        assert.equal(await responses.delete('bob', 'resp_1'), false);
        assert.equal(await responses.delete('alice', 'resp_1'), true);
        assert.equal(await responses.find('alice', 'resp_1'), undefined);
      } finally {
        await store.close();
        await database.drop();
        fs.rmSync(dataDir, { recursive: true, force: true });
      }
    });
  });
}

describe('system check', () => {
  test('answers 503 naming the database when PostgreSQL is not running', async () => {
    // Port 1 on loopback has no server: exactly what a stopped PostgreSQL looks like to a client.
    const config = loadConfig({
      DATABASE_URL: 'postgres://postgres@127.0.0.1:1/test',
      LOG_LEVEL: 'silent',
      DATA_DIR: os.tmpdir(),
    });
    const store = openStore(config);
    const { app } = buildTestApp(config, store);
    try {
      const response = await app.inject({ method: 'GET', url: '/v1/system-check' });
      assert.equal(response.statusCode, 503);
      const body = JSON.parse(response.body);
      assert.equal(body.database.success, false);
      assert.equal(typeof body.database.error, 'string');
      assert.equal(body.api.success, true);
      const health = await app.inject({ method: 'GET', url: '/v1/health' });
      assert.equal(health.statusCode, 200);
    } finally {
      await app.close();
      await store.close();
    }
  });
});
