/** Models, checkpoints, auth and isolation through the real HTTP stack, on SQLite and on PostgreSQL. */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { silentLogger } from '../src/engine/logger.ts';
import { findEnginePython } from '../src/engine/python.ts';
import { announcedSupport } from '../src/engine/roles.ts';
import { EngineSupervisor } from '../src/engine/supervisor.ts';
import { newId } from '../src/ids.ts';
import { ModelRepository } from '../src/store/model-repository.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { backends } from './helpers/database.ts';

for (const backend of backends()) {
  describe(`models API on ${backend.name}`, () => {
    let t: TestApp;
    before(async () => {
      t = await startTestApp(backend);
    });
    after(async () => {
      await t.close();
    });

    const createModel = (name: string, extra: Record<string, unknown> = {}, key?: string) =>
      t.call('POST', '/v1/preview/models', { project: 'proj', name, base_model: 'test/base', ...extra }, key);

    async function addCheckpoints(modelId: string, steps: number[]): Promise<void> {
      const repository = new ModelRepository(t.store.db);
      for (const step of steps) {
        await repository.insertCheckpoint({
          id: newId(),
          model_id: modelId,
          step,
          metrics: JSON.stringify({ loss: step }),
          adapter_path: null,
          created_at: new Date().toISOString(),
        });
      }
    }

    test('create answers the model with the key entity, a run id and step 0', async () => {
      const created = await createModel('alpha');
      assert.equal(created.status, 200);
      assert.deepEqual(Object.keys(created.body).sort(), ['base_model', 'entity', 'id', 'name', 'project', 'run_id']);
      assert.equal(created.body.entity, 'local');
      assert.equal(created.body.project, 'proj');
      assert.equal(created.body.base_model, 'test/base');
      const checkpoints = await t.call('GET', `/v1/preview/models/${created.body.id}/checkpoints`);
      assert.equal(checkpoints.status, 200);
      assert.deepEqual(
        checkpoints.body.data.map((c: { step: number }) => c.step),
        [0],
      );
    });

    test('a duplicate name is 409; return_existing answers the existing model', async () => {
      const first = await createModel('dup');
      assert.equal((await createModel('dup')).status, 409);
      assert.equal((await createModel('dup', { return_existing: false })).status, 409);
      const again = await createModel('dup', { return_existing: true, entity: null });
      assert.equal(again.status, 200);
      assert.equal(again.body.id, first.body.id);
      assert.equal(again.body.run_id, first.body.run_id);
    });

    test('bad names, unknown base models and foreign entities are refused', async () => {
      const bad = await t.call('POST', '/v1/preview/models', { project: 'a/b', name: '', base_model: 'test/base' });
      assert.equal(bad.status, 422);
      assert.deepEqual(bad.body.detail.map((d: { loc: unknown[] }) => d.loc).sort(), [
        ['body', 'name'],
        ['body', 'project'],
      ]);
      const missing = await t.call('POST', '/v1/preview/models', { project: 'p' });
      assert.equal(missing.status, 422);
      assert.deepEqual(
        missing.body.detail.map((d: { loc: unknown[]; type: string }) => [d.loc.join('.'), d.type]).sort(),
        [
          ['body.base_model', 'missing'],
          ['body.name', 'missing'],
        ],
      );
      const unknownBase = await createModel('x', { base_model: 'nope/nope' });
      assert.equal(unknownBase.status, 422);
      assert.deepEqual(unknownBase.body.detail[0].loc, ['body', 'base_model']);
      assert.match(unknownBase.body.detail[0].msg, /test\/base/);
      const foreign = await createModel('x', { entity: 'someone-else' });
      assert.equal(foreign.status, 403);
    });

    test('a team member may create models for the team', async () => {
      const member = await t.services.auth.createKey('member-user');
      assert.equal((await createModel('team-model', { entity: 'the-team' }, member.key)).status, 403);
      await t.services.auth.addMembership('the-team', 'member-user');
      const created = await createModel('team-model', { entity: 'the-team' }, member.key);
      assert.equal(created.status, 200);
      assert.equal(created.body.entity, 'the-team');
    });

    test('missing, unknown and revoked keys are 401 with WWW-Authenticate', async () => {
      const none = await t.call('POST', '/v1/preview/models', {}, null);
      assert.equal(none.status, 401);
      assert.equal(none.headers['www-authenticate'], 'Bearer');
      assert.equal(typeof none.body.detail, 'string');
      assert.equal(
        (await t.call('GET', '/v1/preview/models/x/checkpoints', undefined, 'sk-not-a-real-key')).status,
        401,
      );
      const created = await t.services.auth.createKey('revokee');
      assert.equal((await createModel('r1', {}, created.key)).status, 200);
      assert.equal(await t.services.auth.revokeKey(created.id), true);
      assert.equal((await createModel('r2', {}, created.key)).status, 401);
    });

    test('keys are stored only as hashes', async () => {
      const created = await t.services.auth.createKey('hash-check');
      const rows = await t.store.db.selectFrom('api_keys').selectAll().execute();
      const dump = JSON.stringify(rows);
      assert.ok(!dump.includes(created.key));
      assert.ok(!dump.includes(t.key));
      assert.ok(rows.every((row) => /^[0-9a-f]{64}$/.test(row.key_hash)));
    });

    test("another entity's model is exactly as absent as a missing one", async () => {
      const mine = await createModel('private');
      const other = await t.services.auth.createKey('other-user');
      for (const id of [mine.body.id, newId()]) {
        const list = await t.call('GET', `/v1/preview/models/${id}/checkpoints`, undefined, other.key);
        assert.equal(list.status, 404);
        const del = await t.call('DELETE', `/v1/preview/models/${id}`, undefined, other.key);
        assert.equal(del.status, 404);
        const delCheckpoints = await t.call(
          'DELETE',
          `/v1/preview/models/${id}/checkpoints`,
          { steps: [0] },
          other.key,
        );
        assert.equal(delCheckpoints.status, 404);
        const log = await t.call(
          'POST',
          `/v1/preview/models/${id}/log`,
          { split: 'val', trajectory_groups: [] },
          other.key,
        );
        assert.equal(log.status, 404);
        assert.deepEqual(list.body, { detail: 'Model not found' });
      }
      // Same name in another entity is a different model, not a conflict.
      assert.equal((await createModel('private', {}, other.key)).status, 200);
    });

    test('checkpoint pages: asc, desc, cursors, has_more and limit bounds', async () => {
      const model = (await createModel('paged')).body;
      await addCheckpoints(model.id, [1, 2, 3, 4, 5]);
      const base = `/v1/preview/models/${model.id}/checkpoints`;

      const all = await t.call('GET', `${base}?limit=100`);
      assert.deepEqual(
        all.body.data.map((c: { step: number }) => c.step),
        [0, 1, 2, 3, 4, 5],
      );
      assert.equal(all.body.object, 'list');
      assert.equal(all.body.has_more, false);
      assert.equal(all.body.first_id, all.body.data[0].id);
      assert.equal(all.body.last_id, all.body.data[5].id);
      assert.deepEqual(all.body.data[3].metrics, { loss: 3 });

      const first = await t.call('GET', `${base}?limit=4`);
      assert.deepEqual(
        first.body.data.map((c: { step: number }) => c.step),
        [0, 1, 2, 3],
      );
      assert.equal(first.body.has_more, true);
      const second = await t.call('GET', `${base}?limit=4&after=${first.body.last_id}`);
      assert.deepEqual(
        second.body.data.map((c: { step: number }) => c.step),
        [4, 5],
      );
      assert.equal(second.body.has_more, false);

      const desc = await t.call('GET', `${base}?order=desc&limit=2`);
      assert.deepEqual(
        desc.body.data.map((c: { step: number }) => c.step),
        [5, 4],
      );
      const descNext = await t.call('GET', `${base}?order=desc&limit=10&after=${desc.body.last_id}`);
      assert.deepEqual(
        descNext.body.data.map((c: { step: number }) => c.step),
        [3, 2, 1, 0],
      );

      const empty = await t.call('GET', `${base}?after=${all.body.last_id}`);
      assert.deepEqual(empty.body, { object: 'list', data: [], has_more: false, first_id: '', last_id: '' });

      const defaultLimit = await t.call('GET', base);
      assert.equal(defaultLimit.body.data.length, 6);

      for (const [query, loc] of [
        ['limit=0', 'limit'],
        ['limit=101', 'limit'],
        ['limit=abc', 'limit'],
        ['order=sideways', 'order'],
        [`after=${newId()}`, 'after'],
      ]) {
        const refused = await t.call('GET', `${base}?${query}`);
        assert.equal(refused.status, 422, query);
        assert.deepEqual(refused.body.detail[0].loc, ['query', loc], query);
      }
    });

    test('deleting checkpoints answers counts; steps are never reused', async () => {
      const model = (await createModel('trim')).body;
      await addCheckpoints(model.id, [1, 2]);
      const deleted = await t.call('DELETE', `/v1/preview/models/${model.id}/checkpoints`, { steps: [2, 7, 2] });
      assert.equal(deleted.status, 200);
      assert.deepEqual(deleted.body, { deleted_count: 1, not_found_steps: [7] });
      const remaining = await t.call('GET', `/v1/preview/models/${model.id}/checkpoints`);
      assert.deepEqual(
        remaining.body.data.map((c: { step: number }) => c.step),
        [0, 1],
      );
      const row = await t.store.db
        .selectFrom('models')
        .select('last_step')
        .where('id', '=', model.id)
        .executeTakeFirstOrThrow();
      assert.equal(Number(row.last_step), 2);
      const bad = await t.call('DELETE', `/v1/preview/models/${model.id}/checkpoints`, { steps: ['x'] });
      assert.equal(bad.status, 422);
      assert.deepEqual(bad.body.detail[0].loc, ['body', 'steps', 0]);
    });

    test('deleting a model removes its rows and files and is then 404', async () => {
      const model = (await createModel('doomed')).body;
      await addCheckpoints(model.id, [1]);
      const folder = t.services.models.modelFolder(model.id);
      fs.mkdirSync(path.join(folder, 'checkpoints', '1'), { recursive: true });
      fs.writeFileSync(path.join(folder, 'checkpoints', '1', 'adapter_model.safetensors'), 'x');
      const logged = await t.call('POST', `/v1/preview/models/${model.id}/log`, {
        split: 'val',
        trajectory_groups: [{ trajectories: [{ messages_and_choices: [{ role: 'user', content: 'hi' }], reward: 1 }] }],
      });
      assert.equal(logged.status, 200);

      // As openai-python (ART's client) sends it: a JSON content type and no body.
      const response = await t.app.inject({
        method: 'DELETE',
        url: `/v1/preview/models/${model.id}`,
        headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' },
      });
      const deleted = { status: response.statusCode, body: JSON.parse(response.body) };
      assert.equal(deleted.status, 200, response.body);
      assert.deepEqual(deleted.body, { model_id: model.id, deleted_checkpoints: 2, deleted_run: true });
      assert.equal(fs.existsSync(folder), false);
      assert.equal((await t.call('GET', `/v1/preview/models/${model.id}/checkpoints`)).status, 404);
      assert.equal((await t.call('DELETE', `/v1/preview/models/${model.id}`)).status, 404);
      const leftovers = await t.store.db
        .selectFrom('trajectories')
        .select(sql<number>`count(*)`.as('n'))
        .where('model_id', '=', model.id)
        .executeTakeFirstOrThrow();
      assert.equal(Number(leftovers.n), 0);
    });

    test('a deletion interrupted before its files went is finished by the next start', async () => {
      const model = (await createModel('interrupted')).body;
      const folder = t.services.models.modelFolder(model.id);
      fs.mkdirSync(folder, { recursive: true });
      // The transaction committed (rows gone, deletion noted) and then the process died before removing files.
      await new ModelRepository(t.store.db).deleteModel(model.id, model.run_id, folder, new Date().toISOString());
      assert.equal(fs.existsSync(folder), true);
      assert.equal(await t.services.models.sweepPendingDeletions(), 1);
      assert.equal(fs.existsSync(folder), false);
      assert.equal(await t.services.models.sweepPendingDeletions(), 0);
    });

    test('a model folder that cannot be removed yet does not fail the deletion; it stays pending for the next sweep', async () => {
      // Stands in for a folder a cancelled job is still writing into (ENOTEMPTY): any path rm refuses.
      const blocker = path.join(t.dataDir, 'a-file');
      fs.writeFileSync(blocker, 'x');
      await t.store.db
        .insertInto('pending_file_deletions')
        .values({ path: path.join(blocker, 'folder'), created_at: new Date().toISOString() })
        .execute();
      const model = (await createModel('busy-folder')).body;
      assert.equal((await t.call('DELETE', `/v1/preview/models/${model.id}`)).status, 200);
      assert.equal((await new ModelRepository(t.store.db).pendingFileDeletions()).length, 1);
      fs.rmSync(blocker);
      assert.equal(await t.services.models.sweepPendingDeletions(), 1);
    });

    test('malformed JSON, wrong content type and unknown routes are clear 4xx', async () => {
      const malformed = await t.app.inject({
        method: 'POST',
        url: '/v1/preview/models',
        headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' },
        payload: '{"project":',
      });
      assert.equal(malformed.statusCode, 400);
      assert.match(JSON.parse(malformed.body).detail, /JSON/);
      const wrongType = await t.app.inject({
        method: 'POST',
        url: '/v1/preview/models',
        headers: { authorization: `Bearer ${t.key}`, 'content-type': 'text/csv' },
        payload: 'a,b',
      });
      assert.equal(wrongType.statusCode, 415);
      const unknown = await t.call('GET', '/v1/preview/nothing-here');
      assert.equal(unknown.status, 404);
      assert.equal(typeof unknown.body.detail, 'string');
    });

    test('every response carries a request id, echoing the caller’s', async () => {
      const response = await t.app.inject({
        method: 'GET',
        url: '/v1/health',
        headers: { 'x-request-id': 'trace-me-123' },
      });
      assert.equal(response.headers['x-request-id'], 'trace-me-123');
      const generated = await t.app.inject({ method: 'GET', url: '/v1/health' });
      assert.match(String(generated.headers['x-request-id']), /^[0-9a-f-]{36}$/);
    });

    test('health needs no key; system-check reports every part', async () => {
      const health = await t.call('GET', '/v1/health', undefined, null);
      assert.deepEqual([health.status, health.body], [200, { status: 'ok' }]);
      const check = await t.call('GET', '/v1/system-check', undefined, null);
      assert.equal(check.status, 200);
      assert.deepEqual(Object.keys(check.body).sort(), ['api', 'database', 'engine', 'queue']);
      assert.equal(check.body.database.success, true);
      assert.equal(typeof check.body.database.duration_ms, 'number');
    });
  });
}

describe('body limits', () => {
  test('an oversized body is 413', async () => {
    const t = await startTestApp(backends()[0], { env: { BODY_LIMIT_BYTES: '2048' } });
    try {
      const response = await t.call('POST', '/v1/preview/models', {
        project: 'p',
        name: 'n',
        base_model: 'x'.repeat(5000),
      });
      assert.equal(response.status, 413);
      assert.equal(typeof response.body.detail, 'string');
    } finally {
      await t.close();
    }
  });
});

describe('base models a model is created on', () => {
  let t: TestApp;
  /** The real engine: what it announces it runs is what creation checks (it loads none of these folders). */
  let engine: EngineSupervisor;
  const folderWith = (config: Record<string, unknown>) => {
    const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'arch-'));
    fs.writeFileSync(path.join(folder, 'config.json'), JSON.stringify(config));
    return folder;
  };
  const QWEN3 = { model_type: 'qwen3', architectures: ['Qwen3ForCausalLM'] };
  const BASES: Record<string, Record<string, unknown>> = {
    'ok/qwen3': QWEN3,
    'ok/llama31': {
      model_type: 'llama',
      architectures: ['LlamaForCausalLM'],
      rope_scaling: { rope_type: 'llama3', factor: 8 },
    },
    'ok/gemma3': { model_type: 'gemma3_text', architectures: ['Gemma3ForCausalLM'] },
    'ok/phi3': { model_type: 'phi3', architectures: ['Phi3ForCausalLM'] },
    'ok/moe': { model_type: 'qwen3_moe', architectures: ['Qwen3MoeForCausalLM'] },
    'ok/yarn': { ...QWEN3, rope_scaling: { rope_type: 'yarn', factor: 4 } },
    'bad/unknown': { model_type: 'no_such_family', architectures: ['NoSuchForCausalLM'] },
    'bad/moe': { model_type: 'qwen3', architectures: ['Qwen3MoeForCausalLM'] },
    'bad/hybrid': {
      model_type: 'qwen3_next',
      architectures: ['Qwen3NextForCausalLM'],
      layer_types: ['linear_attention', 'linear_attention', 'linear_attention', 'full_attention'],
    },
  };
  before(async () => {
    const setting = Object.entries(BASES)
      .map(([id, config]) => `${id}=${folderWith(config)}`)
      .join(',');
    engine = new EngineSupervisor({
      logger: silentLogger,
      python: process.env.ENGINE_PYTHON || (await findEnginePython()),
      args: ['--threads', '1'],
    });
    engine.start();
    const engines = { sampler: engine, trainer: engine, support: announcedSupport(engine) };
    t = await startTestApp(backends()[0], { env: { BASE_MODELS: setting }, engines });
  });
  after(async () => {
    await t.close();
    await engine.stop();
  });
  const create = (base: string) =>
    t.call('POST', '/v1/preview/models', { project: 'p', name: base.replace('/', '-'), base_model: base });

  test('what our implementation or transformers loads is created; anything else is 422 naming why, before any use', async () => {
    for (const base of Object.keys(BASES).filter((id) => id.startsWith('ok/')))
      assert.equal((await create(base)).status, 200, base);
    for (const [base, cause] of [
      ['bad/unknown', /model_type "no_such_family" is not one of ours.*not a causal LM transformers 5\.23\.0 knows/],
      ['bad/moe', /architecture \["Qwen3MoeForCausalLM"\] is not Qwen3ForCausalLM/],
      ['bad/hybrid', /layer types \["linear_attention"\] keep a recurrent state/],
    ] as const) {
      const response = await create(base);
      assert.equal(response.status, 422, base);
      assert.deepEqual(response.body.detail[0].loc, ['body', 'base_model']);
      assert.match(response.body.detail[0].msg, cause);
      assert.match(response.body.detail[0].msg, /no implementation of the engine can load it/);
    }
  });

  test("each base's card says which implementation serves it", async () => {
    const cards = (await t.call('GET', '/v1/models')).body.data as { id: string; implementation: string | null }[];
    const of = (id: string) => cards.find((card) => card.id === id)?.implementation;
    assert.deepEqual(['ok/qwen3', 'ok/llama31', 'ok/gemma3', 'ok/phi3', 'ok/moe', 'ok/yarn', 'bad/unknown'].map(of), [
      'ours',
      'ours',
      'transformers',
      'transformers',
      'transformers',
      'transformers',
      null,
    ]);
  });

  test('a hub path is 422 listing the configured base models and the setting that adds one', async () => {
    const response = await create('Qwen/Qwen3-0.6B');
    assert.equal(response.status, 422);
    const msg: string = response.body.detail[0].msg;
    assert.match(msg, /Unknown base model "Qwen\/Qwen3-0.6B"/);
    for (const id of Object.keys(BASES)) assert.ok(msg.includes(id), `${id} is listed`);
    assert.match(msg, /BASE_MODELS setting as id=\/path\/to\/folder/);
  });
});
