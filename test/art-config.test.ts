/**
 * Every `experimental_config` key of OpenPipe ART 0.5.23, over HTTP against the real server and engine, with the
 * bodies ART's own ServerlessBackend builds (test/fixtures/art-0.5.23-experimental-config.json, written by
 * test/clients/art_experimental_config.py from ART's code; checked against ART itself when $ART_0523_PYTHON is set).
 *
 * A source model trains three steps; rollouts sampled from its step 1 are then off-policy for step 3, so ratios,
 * clipping and KL terms are all away from their trivial values. Each case trains on its own fork of step 3 (the
 * same adapter and optimizer state), so the first gradient step of two cases differs only by their bodies: each
 * key at a non-default value is asserted to change what a default body does, the way rl-loss.md says it should.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BUILTIN_BASE_MODEL, repoRoot } from '../src/config.ts';
import { runJsonScript } from './helpers/reference.ts';
import { allEvents, sampleGroup, type Trajectory, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

type Body = Record<string, unknown>;
interface Fixture {
  art_version: string;
  cases: Record<string, { kwargs: Body; experimental_config: Body }>;
}
interface Outcome {
  status: string;
  started: number;
  first: Record<string, number>;
}

const FIXTURE = path.join(repoRoot, 'test', 'fixtures', 'art-0.5.23-experimental-config.json');
const fixture = JSON.parse(fs.readFileSync(FIXTURE, 'utf8')) as Fixture;
const art = (name: string, over: Body = {}): Body => ({ ...fixture.cases[name].experimental_config, ...over });
const TWIN_BASE = 'test/tiny-twin';
/** The cases that also train on the rollouts with every ratio raised (withRatiosRaised). */
const RAISED = ['default', 'epsilon', 'epsilon_high', 'epsilon_both', 'mask_prob_ratio', 'precalculate_logprobs'];
/** How long a job may take to end: a bound on waiting, not on speed, generous for a machine shared with other work. */
const JOB_WAIT_MS = 600_000;

describe('ART 0.5.23 experimental_config: every key', () => {
  let e2e: E2eServer;
  let sourceId: string;
  let rollouts: { trajectories: Trajectory[] }[];
  const outcomes: Record<string, Outcome> = {};

  const submit = (modelId: string, groups: unknown, config: Body) =>
    e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: groups,
      experimental_config: config,
    });
  const run = async (modelId: string, config: Body, groups: unknown = rollouts): Promise<Outcome> => {
    const submitted = await submit(modelId, groups, config);
    assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
    const job = await waitForJob(e2e, submitted.body.id, JOB_WAIT_MS);
    const events = await allEvents(e2e, submitted.body.id);
    const started = Number(events.find((event) => event.type === 'training_started')?.data.num_sequences);
    const first = (events.find((event) => event.type === 'gradient_step')?.data ?? {}) as Record<string, number>;
    return { status: job.status, started, first };
  };
  const fork = async (name: string) => {
    const forked = await e2e.api('POST', `/v1/preview/models/${sourceId}/fork`, { name });
    assert.equal(forked.status, 200, JSON.stringify(forked.body));
    return forked.body.id as string;
  };
  /** Two groups of two with different spreads ([0, 1] and [0, 3]), so scaling by the spread changes relative advantages. */
  const scoredRollouts = async (model: string, scale: number, seed: number) => [
    await sampleGroup(e2e, model, 'Name a fruit.', 2, (_, i) => i * scale, seed),
    await sampleGroup(e2e, model, 'Name a colour.', 2, (_, i) => i * 3 * scale, seed + 10),
  ];

  before(async () => {
    e2e = await startE2eServer({
      env: {
        BASE_MODELS: `${BUILTIN_BASE_MODEL.id}=${BUILTIN_BASE_MODEL.path},${TWIN_BASE}=${BUILTIN_BASE_MODEL.path}`,
      },
    });
    sourceId = (
      await e2e.api('POST', '/v1/preview/models', {
        project: 'art-config',
        name: 'source',
        base_model: BUILTIN_BASE_MODEL.id,
      })
    ).body.id;
    // Three steps at a rate that moves the tiny model, each job with a different reward spread (a history to regress on).
    const fast = art('default', { learning_rate: 1e-2 });
    assert.equal((await run(sourceId, fast, await scoredRollouts(BUILTIN_BASE_MODEL.id, 3, 0))).status, 'COMPLETED');
    rollouts = await scoredRollouts('local/art-config/source:step1', 1, 100);
    assert.equal(
      (await run(sourceId, fast, await scoredRollouts('local/art-config/source', 2, 200))).status,
      'COMPLETED',
    );
    assert.equal(
      (await run(sourceId, fast, await scoredRollouts('local/art-config/source', 0.5, 300))).status,
      'COMPLETED',
    );

    const onForks: [string, Body, unknown?][] = [
      ...Object.keys(fixture.cases)
        .filter(
          (name) =>
            ![
              'truncated_importance_sampling_alone',
              'kl_penalty_reference_step',
              'kl_penalty_step_lag',
              'scale_learning_rate_by_reward_std_dev',
            ].includes(name),
        )
        .map((name): [string, Body] => [name, art(name)]),
      ['normalize_advantages_alone', art('default', { normalize_advantages: false })],
      [
        'kl_ref_tinker_path',
        art('kl_ref_adapter_path', { kl_ref_adapter_path: `tinker://${sourceId}/sampler_weights/step2` }),
      ],
      ['without_logprobs_default', art('default'), withoutLogprobs(rollouts)],
      ['without_logprobs_allowed', art('allow_training_without_logprobs'), withoutLogprobs(rollouts)],
      ...RAISED.map((name): [string, Body, unknown] => [`${name}_raised`, art(name), withRatiosRaised(rollouts, 1.5)]),
    ];
    const forks = [];
    for (const [name] of onForks) forks.push(await fork(name));
    for (const [index, [name, body, groups]] of onForks.entries())
      outcomes[name] = await run(forks[index], body, groups);
    // On the source itself (now at step 3): the KL reference by step and by lag, then the learning rate by spread.
    outcomes.lag = await run(sourceId, art('kl_penalty_step_lag'));
    for (const step of [1, 2, 3])
      outcomes[`reference_step_${step}`] = await run(
        sourceId,
        art('kl_penalty_reference_step', { kl_penalty_reference_step: step }),
      );
    outcomes.spread = await run(sourceId, art('scale_learning_rate_by_reward_std_dev'));
    for (const [name, outcome] of Object.entries(outcomes)) assert.equal(outcome.status, 'COMPLETED', name);
  });
  after(async () => {
    await e2e?.close();
  });

  const base = () => outcomes.default.first;
  /** The first step of a RAISED case on the rollouts with every ratio made 1.5×. */
  const raised = (name: string) => outcomes[`${name}_raised`].first;
  const differs = (a: number, b: number, what: string, tolerance = 1e-6) =>
    assert.ok(Math.abs(a - b) > tolerance, `${what}: ${a} vs ${b}`);
  const same = (a: number, b: number, what: string, tolerance = 1e-6) =>
    assert.ok(Math.abs(a - b) <= tolerance, `${what}: ${a} vs ${b}`);

  test('the fixture is ART 0.5.23’s: 25 keys in every body, defaults as its ServerlessBackend sends them', () => {
    assert.equal(fixture.art_version, '0.5.23');
    for (const { experimental_config } of Object.values(fixture.cases))
      assert.equal(Object.keys(experimental_config).length, 25);
    const defaults = fixture.cases.default.experimental_config;
    assert.deepEqual(
      [defaults.loss_fn, defaults.normalize_advantages, defaults.logprob_calculation_chunk_size, defaults.epsilon_high],
      ['cispo', true, 1024, null],
    );
  });

  test('ART 0.5.23’s own code builds these bodies (needs $ART_0523_PYTHON)', {
    skip: process.env.ART_0523_PYTHON ? false : 'no ART 0.5.23 Python ($ART_0523_PYTHON unset)',
  }, async () => {
    const built = await runJsonScript<Fixture>(
      process.env.ART_0523_PYTHON!,
      'test/clients/art_experimental_config.py',
      {},
    );
    assert.deepEqual(built, fixture);
  });

  test('learning_rate: the optimizer steps at the rate sent', () => {
    assert.equal(outcomes.learning_rate.first.learning_rate, 1e-3);
    assert.equal(base().learning_rate, 5e-6);
  });

  test('loss_fn "ppo" (and the legacy ppo flag, which ART sends with it) changes the loss from CISPO’s; an unknown loss_fn is a 422 naming it', async () => {
    differs(outcomes.loss_fn.first.loss, base().loss, 'ppo vs cispo');
    same(outcomes.ppo.first.loss, outcomes.loss_fn.first.loss, 'ppo: true is loss_fn "ppo"');
    const unknown = await submit(sourceId, rollouts, art('default', { loss_fn: 'grpo' }));
    assert.equal(unknown.status, 422);
    assert.deepEqual(
      unknown.body.detail.map((d: { loc: unknown[] }) => d.loc),
      [['body', 'experimental_config', 'loss_fn']],
    );
    const conflict = await submit(sourceId, rollouts, art('default', { loss_fn: 'ppo', ppo: false }));
    assert.deepEqual(
      conflict.body.detail.map((d: { loc: unknown[] }) => d.loc),
      [['body', 'experimental_config', 'loss_fn']],
    );
  });

  test('normalize_advantages: false and scale_rewards: false keep the group spread out of the advantages', () => {
    differs(outcomes.normalize_advantages.first.loss, base().loss, 'normalize_advantages false (as ART sends it)');
    differs(outcomes.normalize_advantages_alone.first.loss, base().loss, 'normalize_advantages false alone');
    same(
      outcomes.normalize_advantages_alone.first.loss,
      outcomes.scale_rewards.first.loss,
      'either key turns scaling off',
    );
  });

  test('advantage_balance, kimi_k2_tau and max_negative_advantage_importance_sampling_weight each change the loss', () => {
    for (const key of ['advantage_balance', 'kimi_k2_tau', 'max_negative_advantage_importance_sampling_weight'])
      differs(outcomes[key].first.loss, base().loss, key);
  });

  test('epsilon and epsilon_high narrow the clip range: more tokens clipped, or clipped closer; mask_prob_ratio zeroes them instead', () => {
    // ART's default body sends epsilon_high null, so the default range is (1 − 1, 1 + 1) and epsilon alone narrows both sides.
    assert.ok(base().clipped_token_fraction < 0.5, String(base().clipped_token_fraction));
    for (const key of ['epsilon', 'epsilon_high', 'epsilon_both']) {
      assert.ok(
        outcomes[key].first.clipped_token_fraction >= base().clipped_token_fraction,
        `${key}: ${outcomes[key].first.clipped_token_fraction}`,
      );
    }
    // Whether a ratio above 1.05 occurs at all depends on the tokens sampled (a tiny model's are often near-certain,
    // and a ratio cannot exceed 1/p): it did in some runs and CPUs and not in others. On the same rollouts with every
    // ratio made 1.5×, the upper bound binds on every trained token, so each key must change what the default does.
    for (const key of ['epsilon', 'epsilon_high']) {
      assert.ok(
        raised(key).clipped_token_fraction > raised('default').clipped_token_fraction,
        `${key}: ${raised(key).clipped_token_fraction}`,
      );
      differs(raised(key).loss, raised('default').loss, key);
    }
    // CISPO clips the masked ratio too, so a token masked below the range weighs 1 − ε as when clipped: masking
    // differs from clipping above it (1 − ε instead of 1 + ε_high).
    differs(raised('mask_prob_ratio').loss, raised('epsilon_both').loss, 'mask_prob_ratio vs the same bounds clipped');
  });

  test('importance_sampling_level "sequence" replaces the token ratios by their sequence mean', () => {
    differs(outcomes.importance_sampling_level.first.importance_ratio_mean, base().importance_ratio_mean, 'mean ratio');
    differs(outcomes.importance_sampling_level.first.loss, base().loss, 'loss');
  });

  test('precalculate_logprobs: the old policy is the pre-update trainer (ratio 1), not the sampler', () => {
    // The sampled tokens' ratios can average 1 by chance: on the raised rollouts the sampler's ratios average ~1.5.
    differs(raised('default').importance_ratio_mean, 1, 'the raised rollouts are off-policy', 0.1);
    same(outcomes.precalculate_logprobs.first.importance_ratio_mean, 1, 'precalculated', 1e-5);
    same(raised('precalculate_logprobs').importance_ratio_mean, 1, 'precalculated on the raised rollouts', 1e-5);
    differs(raised('precalculate_logprobs').loss, raised('default').loss, 'loss');
    same(
      raised('precalculate_logprobs').loss,
      outcomes.precalculate_logprobs.first.loss,
      'the sampler’s logprobs are not read',
      1e-6,
    );
  });

  test('truncated_importance_sampling: trainer/sampler ratios above the bound are truncated, visibly; without precalculate_logprobs it is a 422', async () => {
    const { first } = outcomes.truncated_importance_sampling;
    assert.ok(first.truncated_token_fraction > 0, String(first.truncated_token_fraction));
    assert.equal(outcomes.precalculate_logprobs.first.truncated_token_fraction, undefined);
    differs(first.loss, outcomes.precalculate_logprobs.first.loss, 'loss with vs without truncation');
    const alone = await submit(sourceId, rollouts, art('truncated_importance_sampling_alone'));
    assert.equal(alone.status, 422);
    assert.deepEqual(alone.body.detail[0].loc, ['body', 'experimental_config', 'truncated_importance_sampling']);
    assert.match(alone.body.detail[0].msg, /precalculate_logprobs/);
  });

  test('allow_training_without_logprobs: choices without logprobs train only when allowed', () => {
    assert.equal(outcomes.without_logprobs_default.started, 0);
    assert.ok(outcomes.without_logprobs_allowed.started > 0);
    assert.equal(outcomes.without_logprobs_allowed.first.frac_sampler_logprobs, 0);
    assert.ok(outcomes.allow_training_without_logprobs.started > 0, 'rollouts with logprobs train as before');
  });

  test('kl_penalty_coef: a KL term against the model’s step 0, reported and added to the advantages; kl_penalty_source picks whose logprobs', () => {
    assert.equal(base().kl_policy_ref, undefined);
    // With no reference named it is the model's step 0: for these forks, the adapter they start from (the source's
    // step 3). kl_policy_ref is the mean of (source − reference) over the sampled tokens, an estimate whose sign
    // depends on which tokens were sampled: its size, not its sign, shows the sampler (step 1) is not the reference.
    const sample = outcomes.kl_penalty_coef.first.kl_policy_ref;
    assert.ok(Math.abs(sample) > 1e-3, `step 1 (the sampler) has moved from step 3: ${sample}`);
    same(sample, outcomes.reference_step_3.first.kl_policy_ref, 'the fork’s step 0 is the source’s step 3', 1e-6);
    differs(outcomes.kl_penalty_coef.first.loss, base().loss, 'loss');
    // current_learner measures the adapter being trained, which at the first step is the reference itself.
    same(outcomes.kl_penalty_source.first.kl_policy_ref, 0, 'current_learner (step 3) against step 3');
    differs(
      outcomes.kl_penalty_source.first.kl_policy_ref,
      sample,
      'current_learner (step 3) vs sample (step 1)',
      1e-4,
    );
  });

  test('kl_ref_adapter_path: the named checkpoint is the reference (by ART inference name or tinker path)', () => {
    const toStep1 = outcomes.kl_ref_adapter_path.first.kl_policy_ref;
    assert.ok(Math.abs(toStep1) < 1e-3, `the rollouts were sampled from step 1 itself: ${toStep1}`);
    same(
      outcomes.kl_ref_tinker_path.first.kl_policy_ref,
      outcomes.reference_step_2.first.kl_policy_ref,
      'tinker://…/step2 is step 2',
    );
  });

  test('kl_ref_adapter_path: anything but a checkpoint of this key’s models on the same base is a 422 naming it', async () => {
    const other = (await e2e.server.services.auth.createKey('outsider')).key;
    const theirs = await e2e.api(
      'POST',
      '/v1/preview/models',
      { project: 'art-config', name: 'theirs', base_model: BUILTIN_BASE_MODEL.id },
      other,
    );
    const refused = [
      '/etc/passwd',
      '../../data/models',
      'file:///etc/passwd',
      `${e2e.dataDir}/checkpoints`,
      'local/art-config/source:step99',
      'outsider/art-config/theirs',
      `tinker://${theirs.body.id}/sampler_weights/step0`,
      TWIN_BASE,
    ];
    for (const value of refused) {
      const response = await submit(sourceId, rollouts, art('kl_ref_adapter_path', { kl_ref_adapter_path: value }));
      assert.equal(response.status, 422, value);
      assert.deepEqual(
        response.body.detail.map((d: { loc: unknown[] }) => d.loc),
        [['body', 'experimental_config', 'kl_ref_adapter_path']],
        value,
      );
    }
    const both = await submit(sourceId, rollouts, art('kl_ref_adapter_path', { kl_penalty_reference_step: 1 }));
    assert.equal(both.status, 422);
  });

  test('kl_penalty_reference_step and kl_penalty_step_lag: that checkpoint, or lag steps behind the one trained from', () => {
    const kl = (name: string) => outcomes[name].first.kl_policy_ref;
    assert.ok(Math.abs(kl('reference_step_1')) < 1e-3, `reference = the sampler's step: ${kl('reference_step_1')}`);
    differs(kl('reference_step_2'), kl('reference_step_3'), 'steps 2 and 3', 1e-4);
    same(kl('lag'), kl('reference_step_2'), 'lag 1 from step 3 is step 2');
  });

  test('logprob_calculation_chunk_size: the engine computes logits that many positions at a time', () => {
    assert.equal(outcomes.logprob_calculation_chunk_size.first.logprob_chunk_size, 8);
    assert.equal(base().logprob_chunk_size, 1024);
    same(outcomes.logprob_calculation_chunk_size.first.loss, base().loss, 'chunking changes memory, not numbers', 1e-5);
  });

  test('num_trajectories_learning_rate_multiplier_power: each step’s rate × (sequences in its row)^power', () => {
    assert.equal(outcomes.default.started, 1, 'all four rollouts share one row');
    same(outcomes.num_trajectories_learning_rate_multiplier_power.first.learning_rate, 5e-6 * 4 ** 0.5, 'rate', 1e-12);
  });

  test('packed_sequence_length: rows of that many tokens', () => {
    assert.ok(
      outcomes.packed_sequence_length.started > outcomes.default.started,
      String(outcomes.packed_sequence_length.started),
    );
  });

  test('plot_tensors: accepted and, being ART’s debug plots, trains exactly as without it', () => {
    assert.equal(outcomes.plot_tensors.first.loss, base().loss);
    assert.equal(outcomes.plot_tensors.first.grad_norm, base().grad_norm);
  });

  test('scale_learning_rate_by_reward_std_dev: the rate × the fitted spread at the last step over the fit’s intercept', async () => {
    const checkpoints = (await e2e.api('GET', `/v1/preview/models/${sourceId}/checkpoints?limit=100&order=asc`)).body
      .data as { step: number; metrics: Record<string, number> }[];
    // Each job's spread belongs to the step it trained from; this job trains from the latest with the rollouts' spread (0.5 and 1.5).
    const points = checkpoints
      .filter((c) => c.step > 0 && c.step < checkpoints.at(-1)!.step)
      .map((c) => [c.step - 1, c.metrics.reward_std_dev]);
    points.push([checkpoints.at(-2)!.step, 1]);
    const n = points.length;
    const mx = points.reduce((s, [x]) => s + x, 0) / n;
    const my = points.reduce((s, [, y]) => s + y, 0) / n;
    const slope =
      points.reduce((s, [x, y]) => s + (x - mx) * (y - my), 0) / points.reduce((s, [x]) => s + (x - mx) ** 2, 0);
    const intercept = my - slope * mx;
    const multiplier = (slope * points.at(-1)![0] + intercept) / intercept;
    assert.ok(Math.abs(multiplier - 1) > 0.05, `the history moves the rate: ${multiplier}`);
    same(outcomes.spread.first.learning_rate, 5e-6 * multiplier, 'rate', 1e-12);
  });
});

/** The rollouts with every choice (an item with a `message`) replaced by `change(choice)`; other items as they are. */
function withChoices(groups: { trajectories: Trajectory[] }[], change: (choice: any) => Record<string, unknown>) {
  return groups.map((group) => ({
    trajectories: group.trajectories.map((trajectory) => ({
      ...trajectory,
      messages_and_choices: trajectory.messages_and_choices.map((item) => ('message' in item ? change(item) : item)),
    })),
  }));
}

/** The rollouts with each sampled token's logprob lowered by ln(factor): every trainer/sampler ratio is `factor` times what it was. */
function withRatiosRaised(groups: { trajectories: Trajectory[] }[], factor: number) {
  const lower = (entry: { logprob: number }) => ({ ...entry, logprob: entry.logprob - Math.log(factor) });
  return withChoices(groups, (choice) => ({ ...choice, logprobs: { content: choice.logprobs.content.map(lower) } }));
}

/** The rollouts as an OpenAI answer without `logprobs: true` would have them: no logprobs, no token ids. */
function withoutLogprobs(groups: { trajectories: Trajectory[] }[]) {
  return withChoices(groups, (choice) => ({ ...choice, logprobs: null, token_ids: undefined }));
}
