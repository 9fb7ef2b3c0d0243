/** Artifact upload, listing and download through the real HTTP stack, on SQLite and PostgreSQL. */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { backends } from './helpers/database.ts';
import { multipartBody } from './helpers/multipart.ts';

const sha256 = (text: string) => crypto.createHash('sha256').update(text).digest('hex');

for (const backend of backends()) {
  describe(`artifacts API on ${backend.name}`, () => {
    let t: TestApp;
    before(async () => {
      t = await startTestApp(backend, { env: { ARTIFACT_MAX_FILE_BYTES: '4096' } });
    });
    after(async () => {
      await t.close();
    });

    const upload = (route: string, files: { name: string; content: string | Buffer }[], key = t.key) => {
      const { payload, headers } = multipartBody(files);
      return t.app.inject({
        method: 'POST',
        url: route,
        payload,
        headers: { ...headers, authorization: `Bearer ${key}` },
      });
    };

    test('upload, list and download round trip with hashes; versions count up', async () => {
      const train = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n';
      const first = await upload('/v1/preview/artifacts/local/data/chats', [
        { name: 'train.jsonl', content: train },
        { name: 'metadata.json', content: '{}' },
      ]);
      assert.equal(first.statusCode, 200, first.body);
      const body = JSON.parse(first.body);
      assert.equal(body.version, 'v0');
      assert.equal(body.url, 'wandb-artifact:///local/data/chats:v0');
      assert.deepEqual(body.files, [
        { name: 'train.jsonl', size: Buffer.byteLength(train), sha256: sha256(train) },
        { name: 'metadata.json', size: 2, sha256: sha256('{}') },
      ]);
      const second = JSON.parse(
        (await upload('/v1/preview/artifacts/local/data/chats', [{ name: 'train.jsonl', content: 'x' }])).body,
      );
      assert.equal(second.version, 'v1');

      const listed = await t.call('GET', '/v1/preview/artifacts/local/data/chats');
      assert.deepEqual(
        listed.body.data.map((v: { version: string }) => v.version),
        ['v0', 'v1'],
      );
      const download = await t.app.inject({
        method: 'GET',
        url: '/v1/preview/artifacts/local/data/chats:v0/files/train.jsonl',
        headers: { authorization: `Bearer ${t.key}` },
      });
      assert.equal(download.statusCode, 200);
      assert.equal(download.body, train);
      const latest = await t.app.inject({
        method: 'GET',
        url: '/v1/preview/artifacts/local/data/chats:latest/files/train.jsonl',
        headers: { authorization: `Bearer ${t.key}` },
      });
      assert.equal(latest.body, 'x');
      assert.equal((await t.call('GET', '/v1/preview/artifacts/local/data/chats:v7/files/train.jsonl')).status, 404);
    });

    test('traversal names are refused and nothing is stored', async () => {
      for (const name of ['../escape.jsonl', 'a/b.jsonl', '..', '.']) {
        const response = await upload('/v1/preview/artifacts/local/data/hostile', [{ name, content: 'x' }]);
        assert.equal(response.statusCode, 422, `${name}: ${response.body}`);
      }
      assert.equal((await t.call('GET', '/v1/preview/artifacts/local/data/hostile')).status, 404);
      const badName = await upload('/v1/preview/artifacts/local/data/..%2F..', [{ name: 'ok.jsonl', content: 'x' }]);
      assert.equal(badName.statusCode, 422);
    });

    test('an oversized file is 413 and nothing is stored', async () => {
      const response = await upload('/v1/preview/artifacts/local/data/big', [
        { name: 'train.jsonl', content: Buffer.alloc(10_000, 97) },
      ]);
      assert.equal(response.statusCode, 413, response.body);
      assert.equal((await t.call('GET', '/v1/preview/artifacts/local/data/big')).status, 404);
    });

    test('a complete body that ends inside a part or without its closing boundary is a prompt 400 and nothing is stored', async () => {
      const boundary = 'cutBoundary';
      const head = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="train.jsonl"\r\nContent-Type: application/octet-stream\r\n\r\n`;
      for (const payload of [`${head}hello\n\r\n`, `${head}hello\n\r\n--${boundary}`, `${head}hel`]) {
        const started = performance.now();
        const response = await t.app.inject({
          method: 'POST',
          url: '/v1/preview/artifacts/local/data/cut',
          payload,
          headers: { authorization: `Bearer ${t.key}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
        });
        assert.equal(response.statusCode, 400, `${JSON.stringify(payload)}: ${response.body}`);
        assert.match(JSON.parse(response.body).detail, /closing boundary/);
        assert.ok(performance.now() - started < 5000);
      }
      assert.equal((await t.call('GET', '/v1/preview/artifacts/local/data/cut')).status, 404);
      assert.deepEqual(fs.readdirSync(path.join(t.dataDir, 'artifacts', '.staging')), []);
    });

    test('uploads of 64 files (the most) and 65 over a real socket add no listener per part (no MaxListenersExceededWarning)', async () => {
      const warnings: string[] = [];
      const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`);
      process.on('warning', onWarning);
      try {
        const url = await t.listen();
        for (const count of [64, 65]) {
          const form = new FormData();
          for (let i = 0; i < count; i += 1) form.append('file', new Blob([`line ${i}\n`]), `part-${i}.txt`);
          const response = await fetch(`${url}/v1/preview/artifacts/local/data/many`, {
            method: 'POST',
            headers: { authorization: `Bearer ${t.key}` },
            body: form,
          });
          const body = (await response.json()) as { files?: unknown[]; detail?: string };
          if (count === 64) assert.equal(body.files?.length, 64, JSON.stringify(body));
          else assert.deepEqual([response.status, body.detail], [413, 'reach files limit']);
        }
        await new Promise((resolve) => setTimeout(resolve, 50)); // warnings are emitted on a later tick
      } finally {
        process.off('warning', onWarning);
      }
      assert.deepEqual(
        warnings.filter((w) => w.includes('MaxListeners')),
        [],
      );
    });

    test('another entity may neither write nor read', async () => {
      await upload('/v1/preview/artifacts/local/data/private', [{ name: 'train.jsonl', content: 'x' }]);
      const other = await t.services.auth.createKey('artifact-outsider');
      assert.equal(
        (await upload('/v1/preview/artifacts/local/data/private', [{ name: 'train.jsonl', content: 'y' }], other.key))
          .statusCode,
        403,
      );
      assert.equal((await t.call('GET', '/v1/preview/artifacts/local/data/private', undefined, other.key)).status, 404);
      assert.equal(
        (await t.call('GET', '/v1/preview/artifacts/local/data/private:v0/files/train.jsonl', undefined, other.key))
          .status,
        404,
      );
      const json = await t.call('POST', '/v1/preview/artifacts/local/data/private', { not: 'multipart' });
      assert.equal(json.status, 415);
    });
  });
}
