/**
 * RL training through the API vs the engine alone: trainable tokens/s of a whole job (queue, tokenization,
 * packing, checkpoint included) over the engine's train_step rate on the same rows, and the time from the
 * last gradient step to the checkpoint answering chat. Prints figures; asserts nothing.
 * Usage: npx tsx bench/training-throughput.ts
 */

import { loraInit, optimizerConfig } from '../src/training/defaults.ts';
import { trainingRenderer } from '../src/training/render.ts';
import { engineLossConfig, parseRlConfig } from '../src/training/rl/config.ts';
import { groupAdvantages, packRows, rowLength, type ScoredSequence, weighSequences } from '../src/training/rl/data.ts';
import { tokenizeTrajectory } from '../src/training/rl/tokens.ts';
import { allEvents, submitRl, waitForJob } from '../test/helpers/rollouts.ts';
import { startE2eServer } from '../test/helpers/server.ts';
import { questionGroups } from './measure.ts';

const GROUPS = 16;

const e2e = await startE2eServer();
try {
  const modelId = (
    await e2e.api('POST', '/v1/preview/models', { project: 'bench', name: 'train', base_model: 'builtin/tiny-chat' })
  ).body.id;
  const groups = await questionGroups(e2e, 'local/bench/train', GROUPS);

  // Through the API: submit, wait, and time from submission to COMPLETED.
  const submitted = performance.now();
  const jobId = await submitRl(e2e, modelId, groups);
  const done = await waitForJob(e2e, jobId, 600_000);
  const apiSeconds = (performance.now() - submitted) / 1000;
  const events = await allEvents(e2e, jobId);
  const steps = events.filter((event) => event.type === 'gradient_step');
  const trainable = steps.reduce((sum, event) => sum + Number(event.data.num_trainable_tokens), 0);
  const ended = events.find((event) => event.type === 'training_ended')!;
  const lastStepAt = Date.parse((steps.at(-1) as unknown as { created_at: string }).created_at);
  const endedAt = Date.parse((ended as unknown as { created_at: string }).created_at);
  const servedStarted = performance.now();
  const served = await e2e.api('POST', '/v1/chat/completions', {
    model: `local/bench/train:step${done.checkpoint_step}`,
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 1,
  });
  const firstServeMs = performance.now() - servedStarted;
  if (served.status !== 200) throw new Error('checkpoint not servable');

  // The engine alone: the same rows, straight into train_step on a fresh adapter.
  const services = e2e.server.services;
  const base = await services.runtime.loadForTraining('builtin/tiny-chat');
  const sequences: ScoredSequence[] = [];
  let trajectory = 0;
  for (const group of groups) {
    const advantages = groupAdvantages(
      group.trajectories.map((t) => t.reward),
      true,
    );
    group.trajectories.forEach((t, i) => {
      const id = trajectory++;
      const renderer = trainingRenderer({ tokenizer: base.tokenizer, template: base.template! }, null, null);
      for (const sequence of tokenizeTrajectory(renderer, t, { allow_training_without_logprobs: false }))
        sequences.push({ ...sequence, advantage: advantages[i], trajectory: id });
    });
  }
  const rows = packRows(
    sequences,
    weighSequences(sequences, 0),
    rowLength(sequences, base.engine.context_length, null),
  );
  const engine = services.runtime.trainer();
  await engine.request('ensure_adapter', { adapter: 'bench-direct', base: base.id, init: loraInit(1) });
  const engineStarted = performance.now();
  for (const row of rows) {
    await engine.request('train_step', {
      base: base.id,
      adapter: 'bench-direct',
      loss: 'rl',
      rows: [row],
      loss_config: engineLossConfig(parseRlConfig({}, () => 1e-3).config),
      optimizer: optimizerConfig('rl', 1e-3),
    });
  }
  const engineSeconds = (performance.now() - engineStarted) / 1000;

  console.log(`RL job of ${GROUPS} groups x 4: ${rows.length} rows, ${trainable} trainable tokens`);
  console.log(
    `trainable tokens/s: through the API ${(trainable / apiSeconds).toFixed(0)}, engine alone ${(trainable / engineSeconds).toFixed(0)}, ratio ${(engineSeconds / apiSeconds).toFixed(2)} (1.0 = no overhead)`,
  );
  console.log(
    `last gradient_step → training_ended (checkpoint listed and warm): ${endedAt - lastStepAt} ms; first chat on it: ${firstServeMs.toFixed(0)} ms`,
  );
} finally {
  await e2e.close();
}
