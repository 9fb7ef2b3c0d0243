/** src/training/payloads.ts, rl/payload.ts and sft/payload.ts without a server: versioned job payloads checked on write and on read, older payloads upgraded. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { withGroupDefaults } from '../src/api/models.ts';
import { JobError } from '../src/errors.ts';
import { payloadView } from '../src/training/job-service.ts';
import { PAYLOAD_VERSION } from '../src/training/payloads.ts';
import { parseRlConfig } from '../src/training/rl/config.ts';
import { readRlPayload, rlPayload } from '../src/training/rl/payload.ts';
import { readSftPayload, sftPayload } from '../src/training/sft/payload.ts';
import { VERSION_0_RL_CONFIG } from './helpers/payloads.ts';

const group = {
  trajectories: [
    {
      messages_and_choices: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'a' },
      ],
      reward: 1,
    },
    {
      messages_and_choices: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'b' },
      ],
    },
  ],
};

const unreadable = (read: () => unknown, where: RegExp) =>
  assert.throws(
    read,
    (error: unknown) => error instanceof JobError && error.code === 'unreadable_payload' && where.test(error.message),
  );

describe('RL payloads', () => {
  const today = parseRlConfig({ learning_rate: 0.01, packed_sequence_length: 32 }, () => 1e-3).config;

  test('written with a version and read back as written, the groups with ART defaults', () => {
    const payload = rlPayload({ trajectory_groups: [withGroupDefaults(group)], config: today });
    assert.equal(payload.version, PAYLOAD_VERSION);
    assert.deepEqual(readRlPayload(JSON.parse(JSON.stringify(payload))), payload);
  });

  test('a version-0 payload (camelCase, no version) reads exactly as today writes the same request', () => {
    const read = readRlPayload({ trajectory_groups: [group], config: VERSION_0_RL_CONFIG });
    assert.deepEqual(read, rlPayload({ trajectory_groups: [withGroupDefaults(group)], config: today }));
  });

  test('a version-0 payload older than some keys reads them at their defaults; its KL reference is renamed too', () => {
    const { logprobCalculationChunkSize, numTrajectoriesLearningRateMultiplierPower, ...older } = VERSION_0_RL_CONFIG;
    assert.ok(logprobCalculationChunkSize && numTrajectoriesLearningRateMultiplierPower === 0);
    const read = readRlPayload({
      trajectory_groups: [group],
      config: { ...older, klPenaltyCoef: 0.1, klReference: { modelId: 'm1', step: 3 } },
    });
    assert.equal(read.config.logprob_calculation_chunk_size, today.logprob_calculation_chunk_size);
    assert.equal(read.config.num_trajectories_learning_rate_multiplier_power, 0);
    assert.equal(read.config.kl_penalty_coef, 0.1);
    assert.deepEqual(read.config.kl_reference, { model_id: 'm1', step: 3 });
  });

  test('what matches no version fails as unreadable_payload, naming where', () => {
    const good = rlPayload({ trajectory_groups: [withGroupDefaults(group)], config: today });
    unreadable(() => readRlPayload({ ...good, version: PAYLOAD_VERSION + 1 }), /\/version/);
    unreadable(() => readRlPayload({ ...good, config: { ...today, learning_rate: -1 } }), /\/config\/learning_rate/);
    unreadable(() => readRlPayload({ ...good, config: { ...today, someFutureKey: 1 } }), /\/config/);
    unreadable(
      () =>
        readRlPayload({
          trajectory_groups: [group],
          config: { ...VERSION_0_RL_CONFIG, importanceSamplingLevel: 'nonsense' },
        }),
      /importance_sampling_level/,
    );
    unreadable(() => readRlPayload('not a payload'), /\//);
  });

  test('a payload this server builds wrong is never written', () => {
    assert.throws(
      () =>
        rlPayload({ trajectory_groups: [withGroupDefaults(group)], config: { ...today, learning_rate: Number.NaN } }),
      /learning_rate/,
    );
  });
});

describe('SFT payloads', () => {
  const fields = {
    artifact: { key: 'k', file: 'train.jsonl' },
    batch_size: 2,
    learning_rate: [1e-3, 0],
    num_conversations: 4,
    assistant_turns: 'last' as const,
    chat_template_kwargs: { enable_thinking: false },
    metric_logging: { enabled: true, target_training_step: 3 },
  };

  test('written with a version and read back as written (a schedule may decay to 0)', () => {
    const payload = sftPayload(fields);
    assert.deepEqual(readSftPayload(JSON.parse(JSON.stringify(payload))), payload);
  });

  test('a version-0 payload (no version; from before assistant_turns and metric_logging) reads with their defaults', () => {
    const { assistant_turns, chat_template_kwargs, metric_logging, ...older } = fields;
    assert.ok(assistant_turns && chat_template_kwargs && metric_logging);
    assert.deepEqual(readSftPayload(older), {
      ...older,
      version: PAYLOAD_VERSION,
      assistant_turns: 'all',
      chat_template_kwargs: null,
      metric_logging: null,
    });
  });

  test('what matches no version fails as unreadable_payload', () => {
    unreadable(() => readSftPayload({ ...sftPayload(fields), batch_size: 0 }), /\/batch_size/);
    unreadable(() => readSftPayload({ ...sftPayload(fields), learning_rate: [0.1, -0.1] }), /\/learning_rate/);
  });
});

describe('the dashboard view of a stored payload', () => {
  test('RL: the config named as experimental_config names it (older payloads too), and the data counted', () => {
    const view = payloadView('rl', { trajectory_groups: [group, group], config: VERSION_0_RL_CONFIG });
    assert.equal(view?.config.allow_training_without_logprobs, false);
    assert.equal(view?.config.learning_rate, 0.01);
    assert.equal(view?.num_trajectory_groups, 2);
    assert.equal(view?.num_trajectories, 4);
  });

  test('SFT: the config without the version or the artifact key; a payload that reads as none shows none', () => {
    const view = payloadView('sft', {
      artifact: { key: 'k', file: 'train.jsonl' },
      batch_size: 2,
      learning_rate: 1e-3,
      num_conversations: 4,
    });
    assert.deepEqual(view, {
      config: {
        batch_size: 2,
        learning_rate: 1e-3,
        num_conversations: 4,
        assistant_turns: 'all',
        chat_template_kwargs: null,
        metric_logging: null,
      },
      num_trajectory_groups: null,
      num_trajectories: null,
    });
    assert.equal(payloadView('sft', { version: 99 }), null);
  });
});
