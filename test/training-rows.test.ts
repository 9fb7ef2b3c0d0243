/**
 * Training rows end to end on the built-in model (training-rows.md §3, §4): multi-turn agent loops trained in
 * their sampled contexts with every sampler logprob kept, chat template kwargs reaching the training render,
 * missing logprobs reported, the KL penalty against an earlier checkpoint, and SFT schedules and turns.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { LegacyTrajectory as Trajectory } from '../src/api/models.ts';
import { agentLoop, type LogprobsMode, samplerTrainerGap, toolCallsIn } from './helpers/agent-loops.ts';
import { createModel as createModelVia } from './helpers/api.ts';
import { uploadArtifact } from './helpers/artifacts.ts';
import { allEvents, sampleGroup, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const BASE = 'builtin/tiny-chat';

describe('training rows (built-in model)', () => {
  let e2e: E2eServer;
  const createModel = async (name: string) => (await createModelVia(e2e.api, 'rows', name, { base: BASE })).id;
  const train = async (modelId: string, trajectories: Trajectory[], experimental: Record<string, unknown> = {}) => {
    const scored = trajectories.map((trajectory, i) => ({ ...trajectory, reward: i % 2 }));
    const submitted = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: [{ trajectories: scored }],
      experimental_config: { learning_rate: 1e-2, ...experimental },
    });
    assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
    const job = await waitForJob(e2e, submitted.body.id, 120_000);
    return { job, events: await allEvents(e2e, submitted.body.id) };
  };

  before(async () => {
    e2e = await startE2eServer();
  });
  after(async () => {
    await e2e.close();
  });

  test('three-turn loops (tools or not; logprobs omitted, true, token_id) keep every sampler logprob; trainer equals sampler at step 0', async () => {
    const modelId = await createModel('loops');
    const trajectories: Trajectory[] = [];
    for (const mode of ['omitted', 'true', 'token_id'] as LogprobsMode[]) {
      for (const tools of [false, true])
        trajectories.push(await agentLoop(e2e, { model: 'local/rows/loops', mode, tools, seed: 7 }));
    }
    assert.ok(
      trajectories.filter((trajectory) => trajectory.tools).every((trajectory) => toolCallsIn(trajectory) === 1),
      'each tool loop made its call',
    );
    const gap = await samplerTrainerGap(e2e, BASE, trajectories);
    console.log(
      `# built-in model, 6 three-turn loops: max |trainer − sampler| ${gap.worst.toExponential(2)} over ${gap.compared} tokens in ${gap.sequences} sequences`,
    );
    assert.equal(gap.missing, 0, 'every trained token carries its sampler logprob');
    assert.ok(gap.compared >= 6 * 3 * 2, `compared ${gap.compared}`);
    assert.ok(gap.worst <= 1e-4, `max difference ${gap.worst}`);

    const { job, events } = await train(modelId, trajectories);
    assert.equal(job.status, 'COMPLETED', JSON.stringify(job.error));
    assert.equal(job.metrics.frac_sampler_logprobs, 1);
    assert.ok(
      events.filter((event) => event.type === 'gradient_step').every((event) => event.data.frac_sampler_logprobs === 1),
    );
    assert.ok(!events.some((event) => event.type === 'sampler_logprobs_missing'));
  });

  test('chat_template_kwargs sent with the requests reach the training render, on the trajectory or per job', async () => {
    const kwargs = { enable_thinking: false };
    const loops = [await agentLoop(e2e, { model: BASE, mode: 'omitted', tools: false, seed: 3, turns: 2, kwargs })];
    const withKwargs = await samplerTrainerGap(e2e, BASE, loops);
    assert.ok(withKwargs.compared > 0 && withKwargs.worst <= 1e-4, `with kwargs: ${withKwargs.worst}`);
    const { chat_template_kwargs: _dropped, ...bare } = loops[0];
    const without = await samplerTrainerGap(e2e, BASE, [bare as Trajectory]);
    assert.ok(without.worst > 1e-3, 'without the kwargs the row is not the sampler’s prompt, so the logprobs disagree');

    const modelId = await createModel('kwargs');
    const perJob = await train(modelId, [bare as Trajectory, bare as Trajectory], { chat_template_kwargs: kwargs });
    assert.equal(perJob.job.status, 'COMPLETED', JSON.stringify(perJob.job.error));
    const bad = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: [],
      experimental_config: { chat_template_kwargs: 'no' },
    });
    assert.equal(bad.status, 422);
    assert.deepEqual(bad.body.detail[0].loc, ['body', 'experimental_config', 'chat_template_kwargs']);
  });

  test('logprobs that identify no token: trained without them, named in an event, and the metric says how many', async () => {
    const modelId = await createModel('stripped');
    const group = await sampleGroup(e2e, 'local/rows/stripped', 'Say hi.', 2, (_, i) => i);
    const stripped = JSON.parse(JSON.stringify(group.trajectories[1])) as Trajectory;
    const choice = stripped.messages_and_choices[1] as { logprobs: { content: { token: string; bytes: unknown }[] } };
    for (const entry of choice.logprobs.content) Object.assign(entry, { token: 'x', bytes: null });
    const { job, events } = await train(modelId, [group.trajectories[0] as Trajectory, stripped]);
    assert.equal(job.status, 'COMPLETED', JSON.stringify(job.error));
    assert.ok(
      job.metrics.frac_sampler_logprobs > 0 && job.metrics.frac_sampler_logprobs < 1,
      String(job.metrics.frac_sampler_logprobs),
    );
    const missing = events.find((event) => event.type === 'sampler_logprobs_missing');
    assert.deepEqual(missing?.data.trajectories, ['trajectory_groups[0].trajectories[1]']);
  });

  test('messages no template can take are refused at submit; text content parts train', async () => {
    const modelId = await createModel('parts');
    const group = await sampleGroup(e2e, 'local/rows/parts', 'Say hi.', 2, (_, i) => i);
    const withParts = (content: unknown) =>
      group.trajectories.map((trajectory) => ({
        ...trajectory,
        messages_and_choices: [{ role: 'user', content }, trajectory.messages_and_choices[1]],
      }));
    const image = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: [{ trajectories: withParts([{ type: 'image_url', image_url: { url: 'data:,' } }]) }],
    });
    assert.equal(image.status, 422);
    assert.deepEqual(image.body.detail[0].loc, [
      'body',
      'trajectory_groups',
      0,
      'trajectories',
      0,
      'messages_and_choices',
    ]);
    assert.match(image.body.detail[0].msg, /image_url/);
    const { job } = await train(modelId, withParts([{ type: 'text', text: 'Say hi.' }]) as Trajectory[]);
    assert.equal(job.status, 'COMPLETED', JSON.stringify(job.error));
  });

  test('kl_penalty_reference_step and kl_penalty_step_lag: the reference is that checkpoint’s adapter', async () => {
    const modelId = await createModel('kl');
    const group = (await sampleGroup(e2e, 'local/rows/kl', 'Name a fruit.', 2, (_, i) => i))
      .trajectories as Trajectory[];
    assert.equal((await train(modelId, group)).job.status, 'COMPLETED');
    const kl = async (experimental: Record<string, unknown>) => {
      const { job, events } = await train(modelId, group, {
        kl_penalty_coef: 0.5,
        kl_penalty_source: 'current_learner',
        ...experimental,
      });
      assert.equal(job.status, 'COMPLETED', JSON.stringify(job.error));
      return Number(events.find((event) => event.type === 'gradient_step')!.data.kl_policy_ref);
    };
    // First gradient step of a job: the policy is the latest checkpoint, so KL against that same step is 0.
    assert.ok(Math.abs(await kl({ kl_penalty_reference_step: 1 })) < 1e-6, 'reference = the current step (1)');
    assert.ok(
      Math.abs(await kl({ kl_penalty_step_lag: 1 })) > 1e-4,
      'lag 1 behind step 2 (trained from) = step 1, which step 2 has moved from',
    );
    assert.ok(
      Math.abs(await kl({ kl_penalty_reference_step: 0 })) > 1e-4,
      'against the base model the trained policy has moved',
    );
    assert.ok(Math.abs(await kl({ kl_penalty_reference_step: 1 })) > 1e-4, 'step 4 has moved away from step 1');

    const both = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: [],
      experimental_config: { kl_penalty_reference_step: 0, kl_penalty_step_lag: 1 },
    });
    assert.equal(both.status, 422);
    assert.match(JSON.stringify(both.body.detail), /Only one of/);
    const missing = await train(modelId, group, { kl_penalty_coef: 0.5, kl_penalty_reference_step: 99 });
    assert.equal(missing.job.status, 'FAILED');
    assert.match(missing.job.error.message, /step 99/);
  });

  test('SFT: a learning-rate schedule may decay to 0, a negative rate is named; assistant_turns "last" trains only the last turn', async () => {
    const modelId = await createModel('sft');
    const line = JSON.stringify({
      messages: [
        { role: 'user', content: 'France?' },
        { role: 'assistant', content: 'Paris, the capital.' },
        { role: 'user', content: 'Italy?' },
        { role: 'assistant', content: 'Rome.' },
      ],
    });
    const artifact = await uploadArtifact(e2e, 'local/rows/sft-data', { 'train.jsonl': `${line}\n${line}\n` });
    const sft = async (config: Record<string, unknown>) =>
      e2e.api('POST', '/v1/preview/sft-training-jobs', {
        model_id: modelId,
        training_data_url: artifact.url,
        config: { batch_size: 1, ...config },
      });

    const negative = await sft({ learning_rate: [1e-3, -1e-3] });
    assert.equal(negative.status, 422);
    assert.deepEqual(
      negative.body.detail.map((problem: { loc: unknown }) => problem.loc),
      [['body', 'config', 'learning_rate', 1]],
    );
    const trained: Record<string, number> = {};
    for (const turns of ['all', 'last']) {
      const submitted = await sft({ learning_rate: [1e-3, 0.0], assistant_turns: turns });
      assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
      assert.equal((await waitForJob(e2e, submitted.body.id)).status, 'COMPLETED');
      const steps = (await allEvents(e2e, submitted.body.id)).filter((event) => event.type === 'gradient_step');
      assert.deepEqual(
        steps.map((event) => event.data.learning_rate),
        [1e-3, 0],
      );
      trained[turns] = Number(steps[0].data.num_trainable_tokens);
    }
    assert.ok(trained.last > 0 && trained.last < trained.all, JSON.stringify(trained));
  });
});
