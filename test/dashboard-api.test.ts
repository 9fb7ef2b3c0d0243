/**
 * The dashboard's read-only endpoints through the real HTTP stack on SQLite and PostgreSQL: the static page
 * and its headers, model summaries, metric history, trajectories (100 000 of them, paged by index seeks),
 * job lists, cursor pagination and entity isolation. Also type-checks the browser code.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import zlib from 'node:zlib';
import { CompiledQuery } from 'kysely';
import { withTrajectoryDefaults } from '../src/api/models.ts';
import type { JobStatus } from '../src/api/training-vocabulary.ts';
import { repoRoot } from '../src/config.ts';
import { newId } from '../src/ids.ts';
import { DashboardRepository } from '../src/store/dashboard-repository.ts';
import type { TrajectoryTable } from '../src/store/schema.ts';
import { createModel as createModelVia } from './helpers/api.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { backends } from './helpers/database.ts';

function agentTrajectory(reward: number, extra: Record<string, unknown> = {}) {
  return {
    messages_and_choices: [
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: '<think>I need the tool.</think>',
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
      },
      { role: 'tool', tool_call_id: 'c1', content: '{"temperature_c": 21}' },
      {
        index: 0,
        finish_reason: 'stop',
        message: { role: 'assistant', content: 'It is 21 °C in Paris.' },
        logprobs: null,
      },
    ],
    reward,
    metrics: { tool_calls: 1, label: 'not a number' },
    ...extra,
  };
}

test('the browser code type-checks (web/tsconfig.json: DOM, strict)', () => {
  execFileSync(
    process.execPath,
    [
      path.join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc'),
      '-p',
      path.join(repoRoot, 'web', 'tsconfig.json'),
    ],
    { stdio: 'pipe' },
  );
});

for (const backend of backends()) {
  describe(`dashboard API on ${backend.name}`, () => {
    let t: TestApp;
    let outsider: string;

    before(async () => {
      t = await startTestApp(backend);
      outsider = (await t.services.auth.createKey('outsider')).key;
    });
    after(async () => {
      await t.close();
    });

    const createModel = (project: string, name: string, key?: string, entity?: string) =>
      createModelVia(t.call, project, name, { base: 'test/base', key, entity });

    async function addStep(model: { id: string; run_id: string }, step: number, metrics: Record<string, number>) {
      const now = new Date().toISOString();
      await t.services.repositories.models.insertCheckpoint({
        id: newId(),
        model_id: model.id,
        step,
        metrics: JSON.stringify(metrics),
        adapter_path: null,
        created_at: now,
      });
      await t.services.repositories.trajectories.insertRunMetrics(model.run_id, step, 'train', metrics, now);
    }

    async function addJob(modelId: string, status: JobStatus, gradientSteps = 0) {
      const id = newId();
      const now = new Date().toISOString();
      await t.services.repositories.jobs.insert({
        id,
        model_id: modelId,
        type: 'rl',
        status,
        payload_path: '/nonexistent',
        attempts: 0,
        lease_owner: null,
        lease_expires_at: null,
        cancel_requested: 0,
        num_sequences: gradientSteps || null,
        checkpoint_step: status === 'COMPLETED' ? 1 : null,
        metrics: JSON.stringify(status === 'COMPLETED' ? { reward: 0.5 } : {}),
        error_code: status === 'FAILED' ? 'bad_trajectory' : null,
        error_message: status === 'FAILED' ? 'trajectory 3 is bad' : null,
        created_at: now,
        started_at: status === 'QUEUED' ? null : now,
        finished_at: ['COMPLETED', 'FAILED', 'CANCELLED'].includes(status) ? now : null,
      });
      for (let step = 1; step <= gradientSteps; step += 1) {
        await t.services.repositories.jobs.appendEvent({
          id: newId(),
          job_id: id,
          type: 'gradient_step',
          data: JSON.stringify({ step, loss: 1 / step }),
          created_at: now,
        });
      }
      return id;
    }

    test('the page and its assets are served without a key, with a strict CSP; data endpoints need the key', async () => {
      const page = await t.app.inject({ method: 'GET', url: '/' });
      assert.equal(page.statusCode, 200);
      assert.match(String(page.headers['content-type']), /^text\/html/);
      assert.match(
        String(page.headers['content-security-policy']),
        /default-src 'none'; script-src 'self'; style-src 'self'/,
      );
      assert.match(String(page.headers['content-security-policy']), /frame-ancestors 'none'/);
      assert.equal(page.headers['cache-control'], 'no-cache');
      const script = /<script type="module" src="(\/assets\/main-[A-Z0-9]+\.js)">/.exec(page.body)?.[1];
      const style = /<link rel="stylesheet" href="(\/assets\/main-[A-Z0-9]+\.css)"/.exec(page.body)?.[1];
      assert.ok(script && style, page.body);
      const js = await t.app.inject({ method: 'GET', url: script, headers: { 'accept-encoding': 'gzip' } });
      assert.equal(js.statusCode, 200);
      assert.match(String(js.headers['content-type']), /^text\/javascript/);
      assert.equal(js.headers['cache-control'], 'public, max-age=31536000, immutable');
      assert.equal(js.headers['content-encoding'], 'gzip');
      assert.match(zlib.gunzipSync(js.rawPayload).toString(), /\/v1\/dashboard\/models/);
      const css = await t.app.inject({ method: 'GET', url: style, headers: { 'accept-encoding': 'br, gzip' } });
      assert.equal(css.headers['content-encoding'], 'br');
      assert.match(zlib.brotliDecompressSync(css.rawPayload).toString(), /--accent/);
      assert.equal((await t.app.inject({ method: 'GET', url: '/favicon.svg' })).statusCode, 200);
      assert.equal((await t.app.inject({ method: 'GET', url: '/assets/nope.js' })).statusCode, 404);
      const anonymous = await t.call('GET', '/v1/dashboard/models', undefined, null);
      assert.equal(anonymous.status, 401);
      assert.equal(anonymous.headers['www-authenticate'], 'Bearer');
    });

    test('models: per project with base model, latest step, checkpoint count, rewards per split and last job', async () => {
      const model = await createModel('summary', 'policy');
      await addStep(model, 1, { reward: 0.2, reward_std_dev: 0.1, loss: 1 });
      await addStep(model, 2, { reward: 0.4, reward_std_dev: 0.05, loss: 0.5 });
      const logged = await t.call('POST', `/v1/preview/models/${model.id}/log`, {
        split: 'val',
        trajectory_groups: [{ trajectories: [agentTrajectory(0.5), agentTrajectory(0.7)] }],
      });
      assert.equal(logged.status, 200);
      await addJob(model.id, 'COMPLETED');
      const running = await addJob(model.id, 'RUNNING');

      const summary = await t.call('GET', `/v1/dashboard/models/${model.id}`);
      assert.equal(summary.status, 200);
      assert.equal(summary.body.latest_step, 2);
      assert.equal(summary.body.checkpoint_count, 3);
      assert.equal(summary.body.inference_name, 'local/summary/policy');
      assert.deepEqual(summary.body.rewards.train, { value: 0.4, std_dev: 0.05, step: 2 });
      assert.equal(summary.body.rewards.val.step, 2);
      assert.ok(Math.abs(summary.body.rewards.val.value - 0.6) < 1e-9);
      assert.ok(Math.abs(summary.body.rewards.val.std_dev - 0.1) < 1e-9);
      assert.equal(summary.body.last_reward.split, 'val', 'the newest reward is the logged one');
      assert.deepEqual(summary.body.last_job, { id: running, status: 'RUNNING' });

      const fresh = await createModel('summary', 'fresh');
      const list = await t.call('GET', '/v1/dashboard/models?project=summary');
      assert.deepEqual(
        list.body.data.map((entry: { name: string }) => entry.name),
        ['fresh', 'policy'],
      );
      const freshSummary = list.body.data[0];
      assert.equal(freshSummary.id, fresh.id);
      assert.equal(freshSummary.latest_step, 0);
      assert.equal(freshSummary.last_reward, null);
      assert.deepEqual(freshSummary.rewards, {});
      assert.equal(freshSummary.last_job, null);

      // Deleting every checkpoint leaves no latest step, and the history keeps its rewards.
      await t.call('DELETE', `/v1/preview/models/${model.id}/checkpoints`, { steps: [0, 1, 2] });
      const emptied = await t.call('GET', `/v1/dashboard/models/${model.id}`);
      assert.equal(emptied.body.latest_step, null);
      assert.equal(emptied.body.checkpoint_count, 0);
      assert.equal(emptied.body.rewards.train.value, 0.4);
    });

    test('models: cursor pages in (entity, project, name) order; a bad cursor is 422', async () => {
      for (const name of ['c', 'a', 'e', 'b', 'd']) await createModel('paged', name);
      const names: string[] = [];
      let cursor = '';
      for (let pages = 0; pages < 10; pages += 1) {
        const page = await t.call(
          'GET',
          `/v1/dashboard/models?project=paged&limit=2${cursor ? `&after=${cursor}` : ''}`,
        );
        assert.equal(page.status, 200);
        assert.ok(page.body.data.length <= 2);
        names.push(...page.body.data.map((entry: { name: string }) => entry.name));
        if (!page.body.has_more) break;
        cursor = page.body.last_id;
      }
      assert.deepEqual(names, ['a', 'b', 'c', 'd', 'e']);
      const all = await t.call('GET', '/v1/dashboard/models?limit=500');
      const keys = all.body.data.map((entry: { entity: string; project: string; name: string }) =>
        [entry.entity, entry.project, entry.name].join('\u0000'),
      );
      assert.deepEqual(keys, [...keys].sort(), 'ordered by entity, project, name');
      assert.equal((await t.call('GET', '/v1/dashboard/models?after=nope')).status, 422);
      assert.equal((await t.call('GET', '/v1/dashboard/models?limit=0')).status, 422);
      assert.equal((await t.call('GET', '/v1/dashboard/models?limit=501')).status, 422);
    });

    test("isolation: another entity's models, metrics, trajectories and jobs are 404 or absent; a team member sees the team's", async () => {
      const mine = await createModel('secret', 'mine');
      await addStep(mine, 1, { reward: 1 });
      await t.call('POST', `/v1/preview/models/${mine.id}/log`, {
        split: 'val',
        trajectory_groups: [{ trajectories: [agentTrajectory(1)] }],
      });
      const trajectoryId = (await t.call('GET', `/v1/dashboard/models/${mine.id}/trajectories?split=val`)).body.data[0]
        .id;
      const jobId = await addJob(mine.id, 'COMPLETED', 2);

      for (const url of [
        `/v1/dashboard/models/${mine.id}`,
        `/v1/dashboard/models/${mine.id}/metrics`,
        `/v1/dashboard/models/${mine.id}/trajectory-steps`,
        `/v1/dashboard/models/${mine.id}/trajectories?split=val`,
        `/v1/dashboard/models/${mine.id}/trajectories/${trajectoryId}`,
        `/v1/dashboard/jobs?model_id=${mine.id}`,
      ]) {
        const foreign = await t.call('GET', url, undefined, outsider);
        assert.equal(foreign.status, 404, url);
        assert.equal(foreign.body.detail, 'Model not found', url);
      }
      const theirs = await createModel('secret', 'theirs', outsider);
      const theirList = await t.call('GET', '/v1/dashboard/models', undefined, outsider);
      assert.deepEqual(
        theirList.body.data.map((entry: { id: string }) => entry.id),
        [theirs.id],
      );
      assert.deepEqual((await t.call('GET', '/v1/dashboard/jobs', undefined, outsider)).body.data, []);
      assert.ok(
        !(await t.call('GET', '/v1/dashboard/models?limit=500')).body.data.some(
          (entry: { id: string }) => entry.id === theirs.id,
        ),
      );
      assert.ok(
        (await t.call('GET', '/v1/dashboard/jobs?limit=200')).body.data.some(
          (entry: { id: string }) => entry.id === jobId,
        ),
      );
      // A job's configuration: another entity's job is as unknown as a missing one; a request file that is
      // gone leaves the configuration null, not a 500.
      for (const [id, key] of [
        [jobId, outsider],
        [newId(), undefined],
      ] as const) {
        const missing = await t.call('GET', `/v1/dashboard/jobs/${id}/config`, undefined, key);
        assert.equal(missing.status, 404);
        assert.equal(missing.body.detail, 'Training job not found');
      }
      assert.deepEqual((await t.call('GET', `/v1/dashboard/jobs/${jobId}/config`)).body, {
        job_id: jobId,
        type: 'rl',
        config: null,
        num_trajectory_groups: null,
        num_trajectories: null,
      });
      // A cursor naming another entity's model is as unknown as a missing one.
      assert.equal((await t.call('GET', `/v1/dashboard/models?after=${theirs.id}`)).status, 422);
      // A trajectory id of one model does not open under another.
      assert.equal(
        (await t.call('GET', `/v1/dashboard/models/${theirs.id}/trajectories/${trajectoryId}`, undefined, outsider))
          .status,
        404,
      );

      // Team models are visible to members, and only to them.
      const member = await t.services.auth.createKey('member');
      await t.services.auth.addMembership('research', 'member');
      const team = await createModel('shared', 'team-model', member.key, 'research');
      assert.ok(
        (await t.call('GET', '/v1/dashboard/models', undefined, member.key)).body.data.some(
          (entry: { id: string; entity: string }) => entry.id === team.id && entry.entity === 'research',
        ),
      );
      assert.equal((await t.call('GET', `/v1/dashboard/models/${team.id}`, undefined, member.key)).status, 200);
      assert.equal((await t.call('GET', `/v1/dashboard/models/${team.id}`, undefined, outsider)).status, 404);
      const overview = await t.call('GET', '/v1/dashboard/overview', undefined, member.key);
      assert.deepEqual(overview.body, {
        entity: 'member',
        entities: ['member', 'research'],
        base_models: ['test/base'],
        default_base_model: 'test/base',
      });
    });

    test('metrics: the run history in step order with each row’s split, paged by cursor', async () => {
      const model = await createModel('history', 'run');
      for (let step = 1; step <= 7; step += 1) {
        await addStep(model, step, { reward: step / 10, loss: 1 / step });
        if (step % 2 === 0)
          await t.call('POST', `/v1/preview/models/${model.id}/log`, {
            split: 'val',
            trajectory_groups: [{ trajectories: [agentTrajectory(step), agentTrajectory(0)] }],
          });
      }
      const rows: { id: string; step: number; source: string; split: string; metrics: Record<string, number> }[] = [];
      let cursor = '';
      for (;;) {
        const page = await t.call(
          'GET',
          `/v1/dashboard/models/${model.id}/metrics?limit=3${cursor ? `&after=${cursor}` : ''}`,
        );
        assert.equal(page.status, 200);
        rows.push(...page.body.data);
        if (!page.body.has_more) break;
        cursor = page.body.last_id;
      }
      assert.equal(rows.length, 10);
      assert.deepEqual(
        rows.map((row) => row.step),
        [1, 2, 2, 3, 4, 4, 5, 6, 6, 7],
      );
      assert.deepEqual(
        rows.filter((row) => row.step === 2).map((row) => [row.source, row.split]),
        [
          ['train', 'train'],
          ['log:val', 'val'],
        ],
      );
      assert.equal(rows[2].metrics['val/reward'], 1);
      assert.equal(new Set(rows.map((row) => row.id)).size, 10);
      assert.equal((await t.call('GET', `/v1/dashboard/models/${model.id}/metrics?after=999999999`)).status, 422);
      assert.equal((await t.call('GET', `/v1/dashboard/models/${model.id}/metrics?after=x`)).status, 422);
    });

    test('jobs: newest first, filtered by model and status, paged, with completed gradient steps and errors', async () => {
      const model = await createModel('jobs', 'trainee');
      const other = await createModel('jobs', 'other');
      const ids = [
        await addJob(model.id, 'COMPLETED', 3),
        await addJob(model.id, 'FAILED', 1),
        await addJob(model.id, 'RUNNING', 2),
        await addJob(other.id, 'QUEUED'),
        await addJob(model.id, 'CANCELLED'),
      ];
      const seen: string[] = [];
      let cursor = '';
      for (;;) {
        const page = await t.call(
          'GET',
          `/v1/dashboard/jobs?model_id=${model.id}&limit=2${cursor ? `&after=${cursor}` : ''}`,
        );
        assert.equal(page.status, 200);
        seen.push(...page.body.data.map((job: { id: string }) => job.id));
        if (!page.body.has_more) break;
        cursor = page.body.last_id;
      }
      assert.deepEqual(seen, [ids[4], ids[2], ids[1], ids[0]]);

      const active = await t.call('GET', '/v1/dashboard/jobs?status=queued,RUNNING&limit=200');
      assert.deepEqual(
        active.body.data
          .filter((job: { model: { project: string } }) => job.model.project === 'jobs')
          .map((job: { id: string; status: string }) => [job.id, job.status]),
        [
          [ids[3], 'QUEUED'],
          [ids[2], 'RUNNING'],
        ],
      );
      const failed = (await t.call('GET', `/v1/dashboard/jobs?model_id=${model.id}&status=FAILED`)).body.data[0];
      assert.deepEqual(failed.error, { code: 'bad_trajectory', message: 'trajectory 3 is bad' });
      assert.deepEqual(failed.model, { id: model.id, entity: 'local', project: 'jobs', name: 'trainee' });
      const completed = (await t.call('GET', `/v1/dashboard/jobs?model_id=${model.id}&status=COMPLETED`)).body.data[0];
      assert.equal(completed.completed_steps, 3);
      assert.equal(completed.num_sequences, 3);
      assert.deepEqual(completed.metrics, { reward: 0.5 });
      assert.ok(!('payload_path' in completed) && !('lease_owner' in completed), 'internal columns never leave');
      assert.equal((await t.call('GET', '/v1/dashboard/jobs?status=DONE')).status, 422);
      assert.equal((await t.call('GET', '/v1/dashboard/jobs?model_id=nope')).status, 404);
    });

    test('trajectories: steps per split, readable summaries, the full trajectory; split is required', async () => {
      const model = await createModel('browse', 'agent');
      await t.call('POST', `/v1/preview/models/${model.id}/log`, {
        split: 'val',
        trajectory_groups: [
          { trajectories: [agentTrajectory(0.25), agentTrajectory(0.75, { metadata: { seed: 3 } })] },
        ],
      });
      await addStep(model, 1, {});
      await t.call('POST', `/v1/preview/models/${model.id}/log`, {
        split: 'val',
        trajectory_groups: [{ trajectories: [agentTrajectory(1)] }],
      });
      await t.call('POST', `/v1/preview/models/${model.id}/log`, {
        split: 'test',
        trajectory_groups: [
          {
            trajectories: [
              {
                messages_and_choices: [
                  {
                    role: 'user',
                    content: [
                      { type: 'text', text: 'parts ' },
                      { type: 'text', text: 'joined' },
                    ],
                  },
                ],
                reward: 0,
              },
            ],
          },
        ],
      });

      const steps = await t.call('GET', `/v1/dashboard/models/${model.id}/trajectory-steps`);
      assert.deepEqual(steps.body, {
        splits: [
          { split: 'test', count: 1, steps: [{ step: 1, count: 1 }] },
          {
            split: 'val',
            count: 3,
            steps: [
              { step: 0, count: 2 },
              { step: 1, count: 1 },
            ],
          },
        ],
      });
      const page = await t.call('GET', `/v1/dashboard/models/${model.id}/trajectories?split=val&step=0`);
      assert.equal(page.body.data.length, 2);
      const summary = page.body.data[1];
      assert.deepEqual(
        { ...summary, id: undefined, created_at: undefined },
        {
          id: undefined,
          created_at: undefined,
          split: 'val',
          step: 0,
          group_index: 0,
          trajectory_index: 1,
          reward: 0.75,
          num_messages: 4,
          num_tool_calls: 1,
          has_reasoning: true,
          prompt_preview: 'Weather in Paris?',
          response_preview: 'It is 21 °C in Paris.',
          // Both assistant turns' text; the sampled Choice kept no logprobs; it stopped by itself.
          response_chars: 52,
          completion_tokens: null,
          finish_reason: 'stop',
          metrics: { tool_calls: 1 },
        },
      );
      const detail = await t.call('GET', `/v1/dashboard/models/${model.id}/trajectories/${summary.id}`);
      assert.equal(detail.status, 200);
      assert.deepEqual(
        detail.body.data,
        withTrajectoryDefaults(agentTrajectory(0.75, { metadata: { seed: 3 } })),
        'stored as sent, read with ART’s defaults in place',
      );
      const parts = await t.call('GET', `/v1/dashboard/models/${model.id}/trajectories?split=test`);
      assert.equal(parts.body.data[0].prompt_preview, 'parts joined');
      await t.call('POST', `/v1/preview/models/${model.id}/log`, {
        split: 'think',
        trajectory_groups: [
          {
            trajectories: [
              {
                messages_and_choices: [
                  { role: 'user', content: '2+2?' },
                  { role: 'assistant', content: '<think>Add them.</think>\n\nFour.' },
                ],
                reward: 1,
              },
            ],
          },
        ],
      });
      const thought = (await t.call('GET', `/v1/dashboard/models/${model.id}/trajectories?split=think`)).body.data[0];
      assert.equal(thought.response_preview, 'Four.', 'the preview is the answer, not the inline reasoning');
      assert.equal(thought.has_reasoning, true);
      // Without a step: every step in order.
      const allVal = await t.call('GET', `/v1/dashboard/models/${model.id}/trajectories?split=val`);
      assert.deepEqual(
        allVal.body.data.map((item: { step: number; reward: number }) => [item.step, item.reward]),
        [
          [0, 0.25],
          [0, 0.75],
          [1, 1],
        ],
      );

      assert.equal((await t.call('GET', `/v1/dashboard/models/${model.id}/trajectories`)).status, 422);
      assert.equal((await t.call('GET', `/v1/dashboard/models/${model.id}/trajectories?split=a/b`)).status, 422);
      assert.equal(
        (await t.call('GET', `/v1/dashboard/models/${model.id}/trajectories?split=val&step=-1`)).status,
        422,
      );
      assert.equal(
        (await t.call('GET', `/v1/dashboard/models/${model.id}/trajectories?split=test&after=${summary.id}`)).status,
        422,
        'a cursor from another split',
      );
      assert.equal(
        (await t.call('GET', `/v1/dashboard/models/${model.id}/trajectories?split=val&step=1&after=${summary.id}`))
          .status,
        422,
        'a cursor from another step',
      );
      assert.equal((await t.call('GET', `/v1/dashboard/models/${model.id}/trajectories/${newId()}`)).status, 404);
    });

    test('trajectory detail: the trained tokens kept for its step, replaced when the step is written again, null when not trained, gone with the model', async () => {
      const model = await createModel('tokens', 'trained');
      await t.call('POST', `/v1/preview/models/${model.id}/log`, {
        split: 'train',
        trajectory_groups: [{ trajectories: [agentTrajectory(0.25), agentTrajectory(0.75)] }],
      });
      const [first, second] = (await t.call('GET', `/v1/dashboard/models/${model.id}/trajectories?split=train&step=0`))
        .body.data as { id: string }[];
      const trained = {
        groupIndex: 0,
        trajectoryIndex: 1,
        advantage: 1.5,
        token_ids: [5, 6],
        sampler_logprobs: [-0.5, null],
        trainer_logprobs: [-0.25, -1],
      };
      await t.services.repositories.trainedTokens.replaceStep(model.id, 0, [
        { ...trained, trainer_logprobs: [-9, -9] },
      ]);
      await t.services.repositories.trainedTokens.replaceStep(model.id, 0, [trained]);
      const detail = await t.call('GET', `/v1/dashboard/models/${model.id}/trajectories/${second.id}`);
      assert.deepEqual(detail.body.trained_tokens, {
        advantage: 1.5,
        token_ids: [5, 6],
        sampler_logprobs: [-0.5, null],
        trainer_logprobs: [-0.25, -1],
      });
      assert.equal(
        (await t.call('GET', `/v1/dashboard/models/${model.id}/trajectories/${first.id}`)).body.trained_tokens,
        null,
        'not trained',
      );
      assert.equal((await t.call('DELETE', `/v1/preview/models/${model.id}`)).status, 200);
      assert.equal(await t.services.repositories.trainedTokens.find(model.id, 0, 0, 1), undefined);
    });

    test('100 000 trajectories: counted per step, paged by index seeks (no sort, no OFFSET), a deep page as fast as the first', async () => {
      const model = await createModel('scale', 'big');
      const STEPS = 100;
      const PER_STEP = 1000;
      const createdAt = new Date().toISOString();
      const rows: TrajectoryTable[] = [];
      for (let step = 0; step < STEPS; step += 1) {
        for (let index = 0; index < PER_STEP; index += 1) {
          const reward = (index % 10) / 10;
          rows.push({
            id: newId(),
            model_id: model.id,
            split: 'train',
            step,
            group_index: Math.floor(index / 8),
            trajectory_index: index % 8,
            reward,
            data: JSON.stringify({
              messages_and_choices: [
                { role: 'user', content: `question ${step}.${index}` },
                { role: 'assistant', content: 'answer' },
              ],
              reward,
            }),
            created_at: createdAt,
          });
        }
      }
      await t.services.repositories.trajectories.insertMany(rows.length, (index) => rows[index]);
      if (backend.name === 'postgres') await t.store.db.executeQuery(CompiledQuery.raw('analyze trajectories'));

      const countStarted = performance.now();
      const counted = await t.call('GET', `/v1/dashboard/models/${model.id}/trajectory-steps`);
      const countMs = performance.now() - countStarted;
      assert.equal(counted.body.splits[0].count, STEPS * PER_STEP);
      assert.equal(counted.body.splits[0].steps.length, STEPS);

      // Every trajectory of one step, page by page: none missed, none twice, in logging order.
      const ids: string[] = [];
      let cursor = '';
      for (;;) {
        const page = await t.call(
          'GET',
          `/v1/dashboard/models/${model.id}/trajectories?split=train&step=57&limit=200${cursor ? `&after=${cursor}` : ''}`,
        );
        ids.push(...page.body.data.map((item: { id: string }) => item.id));
        if (!page.body.has_more) break;
        cursor = page.body.last_id;
      }
      assert.equal(ids.length, PER_STEP);
      assert.deepEqual(
        ids,
        rows.filter((row) => row.step === 57).map((row) => row.id),
      );

      // The query plans: an index seek in (model_id, split, step, id) order, never a sort of the split.
      const repository = new DashboardRepository(t.store.db);
      const deepCursor = { step: 98, id: rows[98 * PER_STEP + 500].id };
      for (const query of [
        { limit: 50 },
        { step: 42, limit: 50 },
        { after: deepCursor, limit: 50 },
        { step: 98, after: deepCursor, limit: 50 },
      ]) {
        const compiled = repository.trajectoryPageQuery(model.id, 'train', query).compile();
        const plan = await explain(t, backend.name, compiled.sql, compiled.parameters);
        if (process.env.SHOW_PLANS) console.log(`# ${backend.name} ${JSON.stringify(query)}: ${plan}`);
        assert.match(plan, /trajectories_model_split_step/, `${JSON.stringify(query)}: ${plan}`);
        assert.doesNotMatch(plan, /TEMP B-TREE|Sort|Seq Scan/i, `${JSON.stringify(query)}: ${plan}`);
        // The cursor is part of the index condition: a seek, not a scan from the start of the split or step.
        if (query.after)
          assert.match(plan, /\(step,\s*id\)\s*>|ROW\(step, id\) >|\bid\s*>/, `${JSON.stringify(query)}: ${plan}`);
      }

      // And the clock agrees: the page after the 98 500th trajectory costs what the first page costs.
      const time = async (url: string) => {
        const samples = [];
        for (let run = 0; run < 7; run += 1) {
          const started = performance.now();
          const response = await t.call('GET', url);
          samples.push(performance.now() - started);
          assert.equal(response.status, 200);
          assert.equal(response.body.data.length, 50);
        }
        return Math.min(...samples);
      };
      const base = `/v1/dashboard/models/${model.id}/trajectories?split=train&limit=50`;
      const first = await time(base);
      const deep = await time(`${base}&after=${deepCursor.id}`);
      const deepStep = await time(`${base}&step=98&after=${deepCursor.id}`);
      console.log(
        `# ${backend.name}, 100 000 trajectories (best of 7): first page ${first.toFixed(1)} ms, after #98 500 ${deep.toFixed(1)} ms (${deepStep.toFixed(1)} ms within its step); steps counted in ${countMs.toFixed(0)} ms`,
      );
      assert.ok(deep < first * 4 + 25, `deep page ${deep} ms vs first ${first} ms`);
      assert.ok(deepStep < first * 4 + 25, `deep page in a step ${deepStep} ms vs first ${first} ms`);
      const deepPage = await t.call('GET', `${base}&after=${deepCursor.id}`);
      assert.deepEqual(
        deepPage.body.data.map((item: { id: string }) => item.id),
        rows.slice(98 * PER_STEP + 501, 98 * PER_STEP + 551).map((row) => row.id),
      );
    });
  });
}

async function explain(t: TestApp, backend: string, sqlText: string, parameters: readonly unknown[]): Promise<string> {
  if (backend === 'sqlite') {
    const result = await t.store.db.executeQuery<{ detail: string }>(
      CompiledQuery.raw(`explain query plan ${sqlText}`, [...parameters]),
    );
    return result.rows.map((row) => row.detail).join(' | ');
  }
  const result = await t.store.db.executeQuery<{ 'QUERY PLAN': string }>(
    CompiledQuery.raw(`explain ${sqlText}`, [...parameters]),
  );
  return result.rows.map((row) => row['QUERY PLAN']).join(' | ');
}
