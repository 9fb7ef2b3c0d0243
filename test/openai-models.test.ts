/** GET /v1/models through the OpenAI Node SDK: base models and every servable name of the key's entities, nothing of others. */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI, { NotFoundError } from 'openai';
import { newId } from '../src/ids.ts';
import { fakeBaseModelFolder, startTestApp, type TestApp } from './helpers/app.ts';
import { backends } from './helpers/database.ts';
import { writeTokenizerFolder } from './helpers/families.ts';

/** Real tokenizers and templates in folders that pass for models (no weights: listing never loads them). */
function familyFolder(family: 'qwen3' | 'llama3.1'): string {
  const folder = writeTokenizerFolder(family);
  fs.writeFileSync(path.join(folder, 'config.json'), '{"model_type": "llama"}');
  return folder;
}

for (const backend of backends()) {
  describe(`/v1/models on ${backend.name}`, () => {
    let t: TestApp;
    let client: OpenAI;
    let otherClient: OpenAI;
    before(async () => {
      const bases = `test/base=${fakeBaseModelFolder()},test/qwen3=${familyFolder('qwen3')},test/llama3.1=${familyFolder('llama3.1')}`;
      t = await startTestApp(backend, { env: { BASE_MODELS: bases, DEFAULT_BASE_MODEL: 'test/base' } });
      const url = await t.listen();
      client = new OpenAI({ baseURL: `${url}/v1`, apiKey: t.key, maxRetries: 0 });
      otherClient = new OpenAI({
        baseURL: `${url}/v1`,
        apiKey: (await t.services.auth.createKey('someone-else')).key,
        maxRetries: 0,
      });
    });
    after(async () => {
      await t.close();
    });

    test('list: base models, then each model by name and by step, and nothing of another entity', async () => {
      const created = await t.call('POST', '/v1/preview/models', {
        project: 'demo',
        name: 'agent',
        base_model: 'test/base',
      });
      await t.services.repositories.models.insertCheckpoint({
        id: newId(),
        model_id: created.body.id,
        step: 3,
        metrics: '{}',
        adapter_path: null,
        created_at: new Date().toISOString(),
      });
      await otherClient.models.list(); // another entity's key sees its own (empty) list without error
      const foreign = await t.call(
        'POST',
        '/v1/preview/models',
        { project: 'demo', name: 'hidden', base_model: 'test/base' },
        (await t.services.auth.createKey('third')).key,
      );
      assert.equal(foreign.status, 200);

      const ids = [];
      for await (const card of client.models.list()) ids.push(card.id);
      assert.deepEqual(ids, [
        'test/base',
        'test/qwen3',
        'test/llama3.1',
        'local/demo/agent',
        'local/demo/agent:step0',
        'local/demo/agent:step3',
      ]);
      const cards = (await client.models.list()).data as unknown as Record<string, unknown>[];
      assert.deepEqual(
        cards.map((card) => [card.object, card.owned_by, card.root, card.parent, card.tool_call_parser]),
        [
          ['model', 'agent-trainer', 'test/base', null, null],
          ['model', 'agent-trainer', 'test/qwen3', null, 'hermes'],
          ['model', 'agent-trainer', 'test/llama3.1', null, 'llama3_json'],
          ['model', 'local', 'test/base', 'test/base', null],
          ['model', 'local', 'test/base', 'local/demo/agent', null],
          ['model', 'local', 'test/base', 'local/demo/agent', null],
        ],
      );
      assert.ok(cards.every((card) => Number.isInteger(card.created) && (card.created as number) > 1.7e9));
      assert.deepEqual(
        (await otherClient.models.list()).data.map((card) => card.id),
        ['test/base', 'test/qwen3', 'test/llama3.1'],
      );
    });

    test('retrieve resolves exactly the names chat completions serve; unknown or foreign names are OpenAI 404s', async () => {
      const step = (await client.models.retrieve('local/demo/agent:step3')) as unknown as Record<string, unknown>;
      assert.deepEqual([step.id, step.root, step.parent], ['local/demo/agent:step3', 'test/base', 'local/demo/agent']);
      const latest = (await client.models.retrieve('local/demo/agent')) as unknown as Record<string, unknown>;
      assert.deepEqual([latest.id, latest.parent], ['local/demo/agent', 'test/base']);
      assert.equal((await client.models.retrieve('test/base')).owned_by, 'agent-trainer');
      assert.equal(
        ((await client.models.retrieve('test/llama3.1')) as unknown as Record<string, unknown>).tool_call_parser,
        'llama3_json',
      );
      for (const [who, name] of [
        [client, 'local/demo/agent:step9'],
        [client, 'nobody/x/y'],
        [otherClient, 'local/demo/agent'],
      ] as const) {
        await assert.rejects(
          who.models.retrieve(name),
          (error: unknown) => error instanceof NotFoundError && (error.error as { param?: string }).param === 'model',
        );
      }
      const raw = await t.call('GET', '/v1/models/local/demo/missing');
      assert.equal(raw.status, 404);
      assert.equal(raw.body.error.type, 'NotFoundError');
      assert.equal((await t.call('GET', '/v1/models', undefined, null)).status, 401);
    });

    test('percent-encoded names are decoded once: %25 and other escapes are a 404, never a 500', async () => {
      assert.equal(
        (await t.call('POST', '/v1/preview/models', { project: 'enc', name: 'a.b', base_model: 'test/base' })).status,
        200,
      );
      for (const name of [
        '%25',
        'local%2Fx%25',
        '%25%25',
        '%E0%A4%A',
        'local%2Fenc%2Fa%252Eb',
        '%2525',
        'local/demo/%25',
      ]) {
        const response = await t.call('GET', `/v1/models/${name}`);
        assert.ok([400, 404].includes(response.status), `${name}: ${response.status} ${JSON.stringify(response.body)}`);
        if (name !== '%E0%A4%A') assert.equal(response.status, 404, name); // a truncated escape is a malformed URL (400)
      }
      // Encoded slashes and escapes name the model exactly as its unencoded name does.
      for (const name of ['local/enc/a%2Eb', 'local%2Fenc%2Fa.b%3Astep0', 'test%2Fbase']) {
        const response = await t.call('GET', `/v1/models/${name}`);
        assert.equal(response.status, 200, `${name}: ${JSON.stringify(response.body)}`);
        assert.equal(response.body.id, decodeURIComponent(name));
      }
    });
  });
}
