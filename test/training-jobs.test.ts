/** RL training jobs through the real HTTP API, engine and database: lifecycle, events, checkpoints, order, cancel, isolation. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { VERSION_0_RL_CONFIG } from './helpers/payloads.ts';
import { waitFor } from './helpers/poll.ts';
import { allEvents, sampleGroup, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

describe('RL training jobs', () => {
  let e2e: E2eServer;
  let modelId: string;
  const modelName = 'local/rl/policy';
  let groups: Awaited<ReturnType<typeof sampleGroup>>[];

  before(async () => {
    e2e = await startE2eServer();
    modelId = (
      await e2e.api('POST', '/v1/preview/models', { project: 'rl', name: 'policy', base_model: 'builtin/tiny-chat' })
    ).body.id;
    groups = [
      await sampleGroup(e2e, modelName, 'Name a colour.', 2, (_, i) => (i === 0 ? 1 : 0)),
      await sampleGroup(e2e, modelName, 'Count to three.', 2, (_, i) => i),
    ];
  });
  after(async () => {
    await e2e.close();
  });

  /** Many small rows, so a job takes several gradient steps. */
  const manyRowsConfig = { packed_sequence_length: 32, learning_rate: null, ppo: null, epsilon: null };

  test('lifecycle: events in order, polled every second, each seen once; training_ended only once the checkpoint serves', async () => {
    const manyGroups = [...groups, ...groups, ...groups];
    const submitted = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: manyGroups,
      experimental_config: manyRowsConfig,
    });
    assert.equal(submitted.status, 200);
    assert.deepEqual(Object.keys(submitted.body), ['id']);
    const jobId = submitted.body.id;

    // Poll like ART's client: after=<last id> every second until a terminal event.
    const seen: { id: string; type: string; data: Record<string, unknown> }[] = [];
    let cursor = '';
    const ended = await waitFor(
      'a terminal event',
      async () => {
        const page = await e2e.api(
          'GET',
          `/v1/preview/training-jobs/${jobId}/events${cursor ? `?after=${cursor}` : ''}`,
        );
        assert.equal(page.status, 200);
        seen.push(...page.body.data);
        if (page.body.data.length > 0) cursor = page.body.last_id;
        return page.body.data.find(
          (event: { type: string }) => event.type === 'training_ended' || event.type === 'training_failed',
        ) as { id: string; type: string; data: Record<string, any> } | undefined;
      },
      { timeoutMs: 120_000, intervalMs: 1000 },
    );
    assert.equal(ended.type, 'training_ended', JSON.stringify(ended.data));
    // At the moment training_ended is visible, the checkpoint is listed and serves chat.
    const step = ended.data.step as number;
    const latest = await e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints?order=desc&limit=1`);
    assert.equal(latest.body.data[0].step, step);
    assert.equal(latest.body.data[0].id, ended.data.checkpoint_id);
    const served = await e2e.api('POST', '/v1/chat/completions', {
      model: `${modelName}:step${step}`,
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
    });
    assert.equal(served.status, 200);

    const types = seen.map((event) => event.type);
    assert.equal(new Set(seen.map((event) => event.id)).size, seen.length, 'no event seen twice');
    assert.deepEqual(seen, await allEvents(e2e, jobId), 'polling saw exactly the stored events');
    assert.equal(types[0], 'training_started');
    assert.equal(types.at(-1), 'training_ended');
    const numSequences = seen[0].data.num_sequences as number;
    assert.ok(Number.isInteger(numSequences) && numSequences > 1, `several rows: ${numSequences}`);
    const steps = seen.filter((event) => event.type === 'gradient_step');
    assert.equal(steps.length, numSequences);
    steps.forEach((event, index) => {
      assert.equal(event.data.step, index + 1);
      for (const [key, value] of Object.entries(event.data))
        assert.equal(typeof value, 'number', `gradient_step ${key} is numeric`);
      for (const key of [
        'loss',
        'policy_loss',
        'grad_norm',
        'learning_rate',
        'num_trainable_tokens',
        'tokens_per_second',
        'reward',
        'reward_std_dev',
        'num_groups_submitted',
        'num_groups_trainable',
        'entropy',
      ]) {
        assert.ok(key in event.data, `gradient_step has ${key}`);
      }
    });
    assert.deepEqual(ids(seen), [...ids(seen)].sort(), 'event ids sort in creation order');

    const job = (await e2e.api('GET', `/v1/preview/training-jobs/${jobId}`)).body;
    assert.equal(job.status, 'COMPLETED');
    assert.equal(job.object, 'training_job');
    assert.equal(job.type, 'rl');
    assert.equal(job.checkpoint_step, step);
    assert.equal(job.num_sequences, numSequences);
    assert.equal(job.error, null);
    assert.ok(job.started_at && job.finished_at);
    assert.equal(job.metrics.num_groups_submitted, 6);
  });

  test('groups with equal rewards: nothing trainable, the job still completes and the step advances', async () => {
    const before = (await e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints?order=desc&limit=1`)).body.data[0]
      .step;
    const flat = groups.map((group) => ({ trajectories: group.trajectories.map((t) => ({ ...t, reward: 0.5 })) }));
    const submitted = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: flat,
      experimental_config: {},
    });
    const job = await waitForJob(e2e, submitted.body.id);
    assert.equal(job.status, 'COMPLETED');
    assert.equal(job.checkpoint_step, before + 1);
    const events = await allEvents(e2e, submitted.body.id);
    assert.deepEqual(
      events.map((event) => event.type),
      ['training_started', 'training_ended'],
    );
    assert.equal(events[0].data.num_sequences, 0);
  });

  test('two jobs on one model run in submission order', async () => {
    const first = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: [...groups, ...groups],
      experimental_config: manyRowsConfig,
    });
    const second = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: groups,
      experimental_config: {},
    });
    const [a, b] = [await waitForJob(e2e, first.body.id), await waitForJob(e2e, second.body.id)];
    assert.equal(a.status, 'COMPLETED');
    assert.equal(b.status, 'COMPLETED');
    assert.equal(b.checkpoint_step, a.checkpoint_step + 1);
    assert.ok(b.started_at >= a.finished_at, 'the second started after the first finished');
  });

  test('a job an older build stored (camelCase RL config, no payload version) still runs, at its own rate', async () => {
    const before = (await e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints?order=desc&limit=1`)).body.data[0]
      .step;
    const stored = await e2e.server.services.queue.enqueue({
      modelId,
      type: 'rl',
      payload: { trajectory_groups: groups, config: VERSION_0_RL_CONFIG },
    });
    e2e.server.worker.wake();
    const job = await waitForJob(e2e, stored.id);
    assert.equal(job.status, 'COMPLETED', JSON.stringify(job.error));
    assert.equal(job.checkpoint_step, before + 1);
    const steps = (await allEvents(e2e, stored.id)).filter((event) => event.type === 'gradient_step');
    assert.ok(steps.length > 1, 'packed at 32 tokens, the groups make several rows');
    for (const step of steps) assert.equal(step.data.learning_rate, 0.01);
  });

  test('a stored payload that matches no version fails its job as unreadable_payload, naming where', async () => {
    const stored = await e2e.server.services.queue.enqueue({
      modelId,
      type: 'rl',
      payload: { version: 1, trajectory_groups: groups, config: { learning_rate: -1 } },
    });
    e2e.server.worker.wake();
    const job = await waitForJob(e2e, stored.id);
    assert.equal(job.status, 'FAILED');
    assert.equal(job.error.code, 'unreadable_payload');
    assert.match(job.error.message, /\/config/);
  });

  test('cancel: a queued job ends at once, a running one stops without a checkpoint', async () => {
    const stepsBefore = (await e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints?limit=100`)).body.data.length;
    const big = Array.from({ length: 8 }, () => groups).flat();
    const running = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: big,
      experimental_config: manyRowsConfig,
    });
    const queued = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: groups,
      experimental_config: {},
    });
    const cancelledQueued = await e2e.api('POST', `/v1/preview/training-jobs/${queued.body.id}/cancel`);
    assert.equal(cancelledQueued.status, 200);
    assert.equal(cancelledQueued.body.status, 'CANCELLED');

    // Wait until the big job is training, then cancel it.
    await waitFor(
      'a gradient step',
      async () => (await allEvents(e2e, running.body.id)).some((event) => event.type === 'gradient_step'),
      { timeoutMs: 60_000, intervalMs: 50 },
    );
    await e2e.api('POST', `/v1/preview/training-jobs/${running.body.id}/cancel`);
    const job = await waitForJob(e2e, running.body.id);
    assert.equal(job.status, 'CANCELLED');
    assert.equal(job.checkpoint_step, null);
    const events = await allEvents(e2e, running.body.id);
    assert.equal(events.at(-1)?.type, 'training_failed');
    assert.equal(
      events.filter((event) => event.type === 'training_failed' || event.type === 'training_ended').length,
      1,
    );
    assert.equal(
      (await e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints?limit=100`)).body.data.length,
      stepsBefore,
    );
    assert.equal((await allEvents(e2e, queued.body.id)).map((event) => event.type).join(), 'training_failed');
  });

  test("bad bodies are 422 with loc; another entity's model and jobs are 404", async () => {
    const bad = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: [{ trajectories: [{ messages_and_choices: [{ content: 'no role' }], reward: 'x' }] }],
      experimental_config: { epsilon: -1, plot_tensors: true, some_future_key: null, another_key: 3 },
    });
    assert.equal(bad.status, 422);
    const locs = bad.body.detail.map((d: { loc: unknown[] }) => JSON.stringify(d.loc));
    assert.ok(
      locs.includes(JSON.stringify(['body', 'trajectory_groups', 0, 'trajectories', 0, 'reward'])),
      locs.join(' '),
    );

    const config = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: groups,
      experimental_config: { epsilon: -1, plot_tensors: 'yes', some_future_key: null, another_key: 3 },
    });
    assert.equal(config.status, 422);
    assert.deepEqual(config.body.detail.map((d: { loc: string[] }) => d.loc.at(-1)).sort(), [
      'another_key',
      'epsilon',
      'plot_tensors',
    ]);

    // A sampled token id the base model's vocabulary does not have is refused at submission, where it is.
    const [sampled] = groups[0].trajectories;
    const choice = structuredClone(sampled.messages_and_choices[1]) as { logprobs: { content: { token: string }[] } };
    choice.logprobs.content[0].token = 'token_id:99999999';
    const outside = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: [
        { trajectories: [sampled, { ...sampled, messages_and_choices: [sampled.messages_and_choices[0], choice] }] },
      ],
    });
    assert.equal(outside.status, 422);
    assert.deepEqual(
      outside.body.detail.map((d: { loc: unknown[] }) => d.loc),
      [
        [
          'body',
          'trajectory_groups',
          0,
          'trajectories',
          1,
          'messages_and_choices',
          1,
          'logprobs',
          'content',
          0,
          'token',
        ],
      ],
    );
    assert.match(outside.body.detail[0].msg, /token id 99999999 is outside the base model's vocabulary/);

    const other = await e2e.server.services.auth.createKey('rl-outsider');
    const foreign = await e2e.api(
      'POST',
      '/v1/preview/training-jobs',
      { model_id: modelId, trajectory_groups: groups },
      other.key,
    );
    assert.equal(foreign.status, 404);
    const mine = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: [],
      experimental_config: {},
    });
    assert.equal((await e2e.api('GET', `/v1/preview/training-jobs/${mine.body.id}`, undefined, other.key)).status, 404);
    assert.equal(
      (await e2e.api('GET', `/v1/preview/training-jobs/${mine.body.id}/events`, undefined, other.key)).status,
      404,
    );
    assert.equal(
      (await e2e.api('POST', `/v1/preview/training-jobs/${mine.body.id}/cancel`, undefined, other.key)).status,
      404,
    );
    await waitForJob(e2e, mine.body.id);
  });
});

function ids(events: { id: string }[]): string[] {
  return events.map((event) => event.id);
}
