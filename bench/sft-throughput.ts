/**
 * SFT through the API (upload, queue, streaming parse, rendering, checkpoint) vs the engine alone on the
 * same batches: trainable tokens/s of each and their ratio. Prints figures; asserts nothing.
 * Usage: npx tsx bench/sft-throughput.ts
 */

import { loraInit, optimizerConfig } from '../src/training/defaults.ts';
import { trainingRenderer } from '../src/training/render.ts';
import { tokenizeConversation } from '../src/training/sft/tokens.ts';
import { uploadArtifact } from '../test/helpers/artifacts.ts';
import { allEvents, waitForJob } from '../test/helpers/rollouts.ts';
import { startE2eServer } from '../test/helpers/server.ts';

const CONVERSATIONS = 64;
const BATCH = 8;

const e2e = await startE2eServer();
try {
  const conversations = Array.from({ length: CONVERSATIONS }, (_, i) => ({
    messages: [
      { role: 'user', content: `What is ${i} plus ${i + 1}? Explain briefly.` },
      {
        role: 'assistant',
        content: `${i} plus ${i + 1} is ${2 * i + 1}, because adding one more to ${i} twice gives ${2 * i + 1}.`,
      },
    ],
  }));
  const artifact = await uploadArtifact(e2e, 'local/bench/sft-data', {
    'train.jsonl': conversations.map((c) => JSON.stringify(c)).join('\n'),
  });
  const modelId = (
    await e2e.api('POST', '/v1/preview/models', { project: 'bench', name: 'sft', base_model: 'builtin/tiny-chat' })
  ).body.id;

  const started = performance.now();
  const job = (
    await e2e.api('POST', '/v1/preview/sft-training-jobs', {
      model_id: modelId,
      training_data_url: artifact.url,
      config: { batch_size: BATCH, learning_rate: 1e-3 },
    })
  ).body;
  await waitForJob(e2e, job.id, 600_000);
  const apiSeconds = (performance.now() - started) / 1000;
  const trainable = (await allEvents(e2e, job.id))
    .filter((e) => e.type === 'gradient_step')
    .reduce((sum, e) => sum + Number(e.data.num_trainable_tokens), 0);

  const services = e2e.server.services;
  const base = await services.runtime.loadForTraining('builtin/tiny-chat');
  const engine = services.runtime.trainer();
  await engine.request('ensure_adapter', { adapter: 'bench-sft', base: base.id, init: loraInit(1) });
  const rows = conversations.map((conversation) => {
    const sequence = tokenizeConversation(
      trainingRenderer({ tokenizer: base.tokenizer, template: base.template! }, null, null),
      conversation.messages,
      'all',
    )!;
    const mask = sequence.mask.map((m, t) => (t === 0 ? 0 : m));
    return { tokens: sequence.tokens, segment_ids: sequence.tokens.map(() => 0), mask, weights: mask };
  });
  const engineStarted = performance.now();
  for (let start = 0; start < rows.length; start += BATCH) {
    await engine.request('train_step', {
      base: base.id,
      adapter: 'bench-sft',
      loss: 'sft',
      rows: rows.slice(start, start + BATCH),
      optimizer: optimizerConfig('sft', 1e-3),
    });
  }
  const engineSeconds = (performance.now() - engineStarted) / 1000;
  console.log(`SFT of ${CONVERSATIONS} conversations in batches of ${BATCH}: ${trainable} trainable tokens`);
  console.log(
    `trainable tokens/s: through the API ${(trainable / apiSeconds).toFixed(0)}, engine alone ${(trainable / engineSeconds).toFixed(0)}, ratio ${(engineSeconds / apiSeconds).toFixed(2)} (1.0 = no overhead)`,
  );
} finally {
  await e2e.close();
}
