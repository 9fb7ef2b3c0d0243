/** POST /v1/preview/models/{id}/log: storage, per-split metrics on the current checkpoint, precise 422s. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { TrajectoryRepository } from '../src/store/trajectory-repository.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { backends } from './helpers/database.ts';

const choice = (content: string) => ({
  finish_reason: 'stop',
  index: 0,
  logprobs: { content: [{ token: 'token_id:5', logprob: -0.5, bytes: [53], top_logprobs: [] }] },
  message: { role: 'assistant', content },
});

const trajectory = (reward: number, metrics: Record<string, unknown> = {}) => ({
  messages_and_choices: [{ role: 'user', content: 'hi' }, choice('hello')],
  tools: null,
  reward,
  metrics,
  metadata: {},
  logs: [],
  auto_metrics: { extra: 'tolerated' },
});

for (const backend of backends()) {
  describe(`log API on ${backend.name}`, () => {
    let t: TestApp;
    let modelId: string;
    before(async () => {
      t = await startTestApp(backend);
      modelId = (await t.call('POST', '/v1/preview/models', { project: 'p', name: 'logged', base_model: 'test/base' }))
        .body.id;
    });
    after(async () => {
      await t.close();
    });

    test('metrics per split land on the current checkpoint and in the run history', async () => {
      const groups = [
        {
          trajectories: [trajectory(1, { correct: true, turns: 2 }), trajectory(0, { correct: false, turns: 4 })],
          exceptions: [],
        },
        {
          trajectories: [trajectory(0.5, { turns: 3 })],
          exceptions: [{ type: 'ValueError', message: 'boom', traceback: '' }],
          metrics: { spread: 2 },
        },
      ];
      const logged = await t.call('POST', `/v1/preview/models/${modelId}/log`, {
        model_id: modelId,
        split: 'val',
        trajectory_groups: groups,
      });
      assert.equal(logged.status, 200);
      assert.equal(logged.body.step, 0);
      const m = logged.body.metrics;
      assert.equal(m['val/reward'], 0.5);
      assert.equal(m['val/num_trajectories'], 3);
      assert.equal(m['val/exception_rate'], 0.25);
      assert.equal(m['val/reward_std_dev'], 0.5); // only groups with more than one trajectory: std(1, 0) = 0.5
      assert.equal(m['val/correct'], 0.5);
      assert.equal(m['val/turns'], 3);
      assert.equal(m['val/group_spread'], 2);

      await t.call('POST', `/v1/preview/models/${modelId}/log`, {
        split: 'train',
        trajectory_groups: [{ trajectories: [trajectory(2)] }],
      });
      const checkpoints = await t.call('GET', `/v1/preview/models/${modelId}/checkpoints`);
      const metrics = checkpoints.body.data[0].metrics;
      assert.equal(metrics['val/reward'], 0.5);
      assert.equal(metrics['train/reward'], 2);

      const model = await t.services.models.getOwned(await t.services.auth.authenticate(`Bearer ${t.key}`), modelId);
      const history = await new TrajectoryRepository(t.store.db).runMetrics(model.run_id);
      assert.deepEqual(
        history.map((h) => [h.step, h.source]),
        [
          [0, 'log:val'],
          [0, 'log:train'],
        ],
      );
    });

    test('trajectories are stored per split and step, exactly as sent', async () => {
      const page = await new TrajectoryRepository(t.store.db).page(modelId, 'val', { limit: 10 });
      assert.equal(page.items.length, 3);
      assert.deepEqual(
        page.items.map((item) => [item.step, item.groupIndex, item.trajectoryIndex, item.reward]),
        [
          [0, 0, 0, 1],
          [0, 0, 1, 0],
          [0, 1, 0, 0.5],
        ],
      );
      assert.deepEqual(page.items[0].data.auto_metrics, { extra: 'tolerated' });
      const next = await new TrajectoryRepository(t.store.db).page(modelId, 'val', { limit: 2 });
      assert.equal(next.hasMore, true);
      const rest = await new TrajectoryRepository(t.store.db).page(modelId, 'val', {
        limit: 2,
        afterId: next.items[1].id,
      });
      assert.deepEqual(
        rest.items.map((item) => item.reward),
        [0.5],
      );
    });

    test('bad bodies are 422 with the precise loc', async () => {
      const cases: [unknown, (string | number)[], string][] = [
        [{ trajectory_groups: [] }, ['body', 'split'], 'missing'],
        [{ split: 'va l', trajectory_groups: [] }, ['body', 'split'], 'string_pattern_mismatch'],
        [{ split: 'val', trajectory_groups: {} }, ['body', 'trajectory_groups'], 'list_type'],
        [
          {
            split: 'val',
            trajectory_groups: [{ trajectories: [trajectory(1), { ...trajectory(1), reward: 'high' }] }],
          },
          ['body', 'trajectory_groups', 0, 'trajectories', 1, 'reward'],
          'float_type',
        ],
        [
          { split: 'val', trajectory_groups: [{ trajectories: [{ reward: 1 }] }] },
          ['body', 'trajectory_groups', 0, 'trajectories', 0, 'messages_and_choices'],
          'missing',
        ],
        [
          {
            split: 'val',
            trajectory_groups: [
              { trajectories: [{ ...trajectory(1), messages_and_choices: [{ content: 'no role' }] }] },
            ],
          },
          ['body', 'trajectory_groups', 0, 'trajectories', 0, 'messages_and_choices', 0, 'role'],
          'missing',
        ],
        [
          {
            split: 'val',
            trajectory_groups: [{ trajectories: [{ ...trajectory(1), tools: [{ type: 'function' }] }] }],
          },
          ['body', 'trajectory_groups', 0, 'trajectories', 0, 'tools', 0, 'function'],
          'missing',
        ],
      ];
      for (const [body, loc, type] of cases) {
        const response = await t.call('POST', `/v1/preview/models/${modelId}/log`, body);
        assert.equal(response.status, 422, JSON.stringify(body));
        assert.ok(
          response.body.detail.some(
            (d: { loc: unknown[]; type: string }) => JSON.stringify(d.loc) === JSON.stringify(loc) && d.type === type,
          ),
          `${JSON.stringify(loc)} ${type} in ${JSON.stringify(response.body.detail)}`,
        );
      }
    });
  });
}
