/**
 * Checkpoint retention on SQLite and PostgreSQL: a model's policy keeps exactly the last N plus the best K by a
 * metric (and always the latest), deletes the rest with their folders, refuses a policy that would delete the
 * latest, and follows the server default when a model sets none. With the real engine, jobs queued together keep
 * exactly the chosen set, and each deletion is an event of the job whose checkpoint caused it.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { ConfigError, loadConfig } from '../src/config.ts';
import { newId } from '../src/ids.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { backends } from './helpers/database.ts';
import { allEvents, sampleGroup, waitForJob } from './helpers/rollouts.ts';
import { startE2eServer } from './helpers/server.ts';

async function modelWithCheckpoints(t: TestApp, rewards: number[]): Promise<string> {
  const model = (
    await t.call('POST', '/v1/preview/models', { project: 'keep', name: newId().slice(-8), base_model: 'test/base' })
  ).body;
  for (const [index, reward] of rewards.entries()) {
    const folder = path.join(t.dataDir, 'models', model.id, 'checkpoints', String(index + 1));
    fs.mkdirSync(folder, { recursive: true });
    await t.services.repositories.models.insertCheckpoint({
      id: newId(),
      model_id: model.id,
      step: index + 1,
      metrics: JSON.stringify({ reward }),
      adapter_path: folder,
      created_at: new Date().toISOString(),
    });
  }
  return model.id;
}

const stepsOf = async (t: TestApp, modelId: string) =>
  (await t.call('GET', `/v1/preview/models/${modelId}/checkpoints?limit=100`)).body.data.map(
    (c: { step: number }) => c.step,
  );

for (const backend of backends()) {
  describe(`retention on ${backend.name}`, () => {
    test('last N plus best K by a metric, the latest always; folders go with their rows', async () => {
      const t = await startTestApp(backend);
      try {
        const modelId = await modelWithCheckpoints(t, [0.1, 0.9, 0.3, 0.8, 0.2, 0.4]);
        assert.deepEqual((await t.call('GET', `/v1/preview/models/${modelId}/retention`)).body, {
          policy: { keep_last: null, keep_best: null, best_metric: null, best_mode: 'max' },
          source: 'server',
        });
        const set = await t.call('PUT', `/v1/preview/models/${modelId}/retention`, {
          keep_last: 2,
          keep_best: 2,
          best_metric: 'reward',
        });
        assert.equal(set.status, 200);
        assert.deepEqual(set.body.deleted_steps, [0, 1, 3]);
        assert.deepEqual(await stepsOf(t, modelId), [2, 4, 5, 6]);
        const folders = fs.readdirSync(path.join(t.dataDir, 'models', modelId, 'checkpoints')).sort();
        assert.deepEqual(folders, ['2', '4', '5', '6']);
        // Lower is better: the best one left by that measure is step 5 (0.2); the last one is 6.
        const min = await t.call('PUT', `/v1/preview/models/${modelId}/retention`, {
          keep_last: 1,
          keep_best: 1,
          best_metric: 'reward',
          best_mode: 'min',
        });
        assert.deepEqual(
          [min.body.deleted_steps, await stepsOf(t, modelId)],
          [
            [2, 4],
            [5, 6],
          ],
        );
        assert.equal((await t.call('GET', `/v1/preview/models/${modelId}/retention`)).body.source, 'model');
      } finally {
        await t.close();
      }
    });

    test('a policy that would delete the latest, or ranks by no metric, is refused and changes nothing', async () => {
      const t = await startTestApp(backend);
      try {
        const modelId = await modelWithCheckpoints(t, [0.5, 0.6]);
        const zero = await t.call('PUT', `/v1/preview/models/${modelId}/retention`, {
          keep_last: 0,
          keep_best: 1,
          best_metric: 'reward',
        });
        assert.equal(zero.status, 422);
        assert.match(JSON.stringify(zero.body), /would delete the latest checkpoint/);
        const noMetric = await t.call('PUT', `/v1/preview/models/${modelId}/retention`, { keep_best: 1 });
        assert.equal(noMetric.status, 422);
        assert.match(JSON.stringify(noMetric.body), /best_metric/);
        assert.equal(
          (await t.call('PUT', `/v1/preview/models/${modelId}/retention`, { keep_last: 1, extra: 1 })).status,
          422,
        );
        assert.deepEqual(await stepsOf(t, modelId), [0, 1, 2]);
        assert.equal((await t.call('GET', `/v1/preview/models/${modelId}/retention`)).body.source, 'server');
        const stranger = (await t.services.auth.createKey('stranger')).key;
        assert.equal(
          (await t.call('PUT', `/v1/preview/models/${modelId}/retention`, { keep_last: 1 }, stranger)).status,
          404,
        );
      } finally {
        await t.close();
      }
    });

    test('jobs queued together under a server default keep exactly the last two, each deletion an event of its job', async () => {
      const database = await backend.create();
      const e2e = await startE2eServer({ databaseUrl: database.databaseUrl, env: { RETENTION_KEEP_LAST: '2' } });
      try {
        const modelId = (
          await e2e.api('POST', '/v1/preview/models', {
            project: 'keep',
            name: 'agent',
            base_model: 'builtin/tiny-chat',
          })
        ).body.id;
        const group = await sampleGroup(e2e, 'local/keep/agent', 'Say something.', 2, (_choice, index) => index);
        const submit = () =>
          e2e.api('POST', '/v1/preview/training-jobs', {
            model_id: modelId,
            trajectory_groups: [group],
            experimental_config: { learning_rate: 1e-3 },
          });
        const jobs = [(await submit()).body.id, (await submit()).body.id, (await submit()).body.id];
        for (const job of jobs) assert.equal((await waitForJob(e2e, job)).status, 'COMPLETED');
        assert.deepEqual(
          (await e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints`)).body.data.map(
            (c: { step: number }) => c.step,
          ),
          [2, 3],
        );
        const deletions = [];
        for (const job of jobs)
          for (const event of await allEvents(e2e, job))
            if (event.type === 'checkpoints_deleted') deletions.push(event.data);
        assert.deepEqual(deletions, [
          { steps: [0], reason: 'retention', after_step: 2 },
          { steps: [1], reason: 'retention', after_step: 3 },
        ]);
      } finally {
        await e2e.close();
        await database.drop();
      }
    });
  });
}

test('the server default is checked like a model policy: RETENTION_KEEP_LAST=0 does not start', () => {
  assert.throws(
    () => loadConfig({ RETENTION_KEEP_LAST: '0' }),
    (error: unknown) =>
      error instanceof ConfigError && /RETENTION_KEEP_LAST: keep_last 0 would delete the latest/.test(error.message),
  );
  assert.throws(() => loadConfig({ RETENTION_KEEP_BEST: '2' }), /RETENTION_BEST_METRIC/);
});
