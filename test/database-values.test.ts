/**
 * Values PostgreSQL refuses where SQLite just matches nothing (a NUL character, an integer past its column):
 * in a URL, an id or a name they are a 4xx on both databases, never a 500. The fuzzer found these on PostgreSQL.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { backends } from './helpers/database.ts';

for (const backend of backends()) {
  describe(`values the database cannot hold, on ${backend.name}`, () => {
    let t: TestApp;
    let modelId = '';
    before(async () => {
      t = await startTestApp(backend);
      modelId = (await t.call('POST', '/v1/preview/models', { project: 'p', name: 'm', base_model: 'test/base' })).body
        .id;
    });
    after(async () => {
      await t.close();
    });

    test('a NUL anywhere in the URL is a 400 naming it', async () => {
      for (const url of [
        '/v1/preview/models/%00',
        `/v1/preview/models/${modelId}/checkpoints?after=%00`,
        '/v1/preview/training-jobs/%00/cancel',
        '/v1/dashboard/jobs?model_id=%00',
        '/v1/preview/artifacts/local/p/x%00',
      ]) {
        const response = await t.call(url.endsWith('cancel') ? 'POST' : 'GET', url);
        assert.equal(response.status, 400, `${url}: ${JSON.stringify(response.body)}`);
        assert.match(response.body.detail, /NUL/);
      }
    });

    test('a NUL in an id or name of a body, or a version past 32 bits, is a 4xx', async () => {
      const probes: [string, string, unknown?][] = [
        ['GET', '/v1/preview/artifacts/local/p/x:v99999999999999999999/files/a'],
        ['GET', '/v1/preview/artifacts/local/p/x:v2147483648/files/a'],
        [
          'POST',
          '/v1/preview/sft-training-jobs',
          { model_id: modelId, training_data_url: 'wandb-artifact:///local/p/x:v99999999999999999999' },
        ],
        [
          'POST',
          '/v1/preview/sft-training-jobs',
          { model_id: modelId, training_data_url: 'wandb-artifact:///local/p/x\u0000:v0' },
        ],
        ['POST', '/v1/preview/training-jobs', { model_id: '\u0000', trajectory_groups: [] }],
        ['POST', '/v1/chat/completions', { model: 'local/p/\u0000', messages: [{ role: 'user', content: 'hi' }] }],
      ];
      for (const [method, url, body] of probes) {
        const response = await t.call(method, url, body);
        assert.ok(
          response.status >= 400 && response.status < 500,
          `${method} ${url} ${JSON.stringify(body)}: ${response.status} ${JSON.stringify(response.body)}`,
        );
      }
    });

    test('logging that races the deletion of its model is a 404, never a 500', async () => {
      const trajectory = (i: number) => ({
        messages_and_choices: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: `x${i}` },
        ],
        reward: i,
      });
      const statuses = new Set<number>();
      for (let round = 0; round < 8; round += 1) {
        const model = (
          await t.call('POST', '/v1/preview/models', { project: 'race', name: `m${round}`, base_model: 'test/base' })
        ).body.id;
        const logs = Array.from({ length: 4 }, (_, i) =>
          t.call('POST', `/v1/preview/models/${model}/log`, {
            split: 'train',
            trajectory_groups: [{ trajectories: [trajectory(i)] }],
          }),
        );
        const answers = await Promise.all([t.call('DELETE', `/v1/preview/models/${model}`), ...logs]);
        for (const answer of answers) statuses.add(answer.status);
      }
      assert.deepEqual(
        [...statuses].filter((status) => status !== 200 && status !== 404),
        [],
      );
    });
  });
}
