/**
 * The logprobs chat completions report for sampled tokens (on the sampler engine) equal the trainer
 * engine's logprobs for the same tokens under the same checkpoint (same adapter files from the
 * checkpoint store, the runner's own tokenization).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { servingAdapterKey } from '../src/engine/adapter-keys.ts';
import { trainingRenderer } from '../src/training/render.ts';
import { tokenizeTrajectory } from '../src/training/rl/tokens.ts';
import { sampleGroup, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

describe('sampler vs trainer logprobs', () => {
  let e2e: E2eServer;
  before(async () => {
    e2e = await startE2eServer();
  });
  after(async () => {
    await e2e.close();
  });

  test('chat completion logprobs match the trainer’s forward pass within 1e-4 on a trained checkpoint', async () => {
    const modelId = (
      await e2e.api('POST', '/v1/preview/models', { project: 'agree', name: 'm', base_model: 'builtin/tiny-chat' })
    ).body.id;
    const group = await sampleGroup(e2e, 'local/agree/m', 'Tell me something.', 2, (_, i) => i);
    const job = (
      await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: modelId,
        trajectory_groups: [group],
        experimental_config: { learning_rate: 0.01 },
      })
    ).body;
    assert.equal((await waitForJob(e2e, job.id)).status, 'COMPLETED');

    const services = e2e.server.services;
    const base = await services.runtime.load('builtin/tiny-chat');
    const checkpoint = (await services.repositories.models.latestCheckpoint(modelId))!;
    let worst = 0;
    let compared = 0;
    for (const seed of [11, 12, 13]) {
      const sampled = await sampleGroup(e2e, 'local/agree/m:step1', 'Describe the weather.', 1, () => 0, seed);
      const [sequence] = tokenizeTrajectory(
        trainingRenderer({ tokenizer: base.tokenizer, template: base.template! }, null, null),
        sampled.trajectories[0],
        { allow_training_without_logprobs: false },
      );
      const forward = await services.runtime.trainer().request('forward', {
        base: base.id,
        adapter: servingAdapterKey(checkpoint.id),
        adapter_path: checkpoint.adapterPath!,
        rows: [{ tokens: sequence.tokens }],
      });
      sequence.mask.forEach((trainable, t) => {
        if (!trainable) return;
        const difference = Math.abs(forward.logprobs[0][t]! - sequence.logprobs[t]!);
        worst = Math.max(worst, difference);
        compared += 1;
      });
    }
    console.log(
      `# sampler vs trainer logprobs: max |difference| ${worst.toExponential(2)} over ${compared} sampled tokens`,
    );
    assert.ok(compared >= 12);
    assert.ok(worst <= 1e-4, `max difference ${worst}`);
  });
});
