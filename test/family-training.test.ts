/**
 * Training rows for real model families (training-rows.md §3, §4), end to end over HTTP on random-weight Qwen3
 * and Llama 3.1 folders with the real tokenizers and templates: multi-turn agent loops (with and without tools;
 * logprobs omitted, `true` through the openai client, and as token ids) train with every trained token
 * carrying its sampler logprob, and at step 0 the trainer's logprob of every sampled token equals the
 * sampler's; SFT trains exactly the spans ART's response/instruction markers select on transformers' rendering.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { LegacyTrajectory as Trajectory } from '../src/api/models.ts';
import { trainingRenderer } from '../src/training/render.ts';
import { tokenizeConversation } from '../src/training/sft/tokens.ts';
import { agentLoop, type LogprobsMode, samplerTrainerGap, toolCallsIn, WEATHER_TOOL } from './helpers/agent-loops.ts';
import { uploadArtifact } from './helpers/artifacts.ts';
import { baseModelsSetting, type Family, writeFamilyModel } from './helpers/families.ts';
import { NO_REFERENCE, referenceRender } from './helpers/reference.ts';
import { allEvents, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const TESTED: Family[] = ['qwen3', 'llama3.1'];

/** ART's markers (get_instruction_response_parts) for these families. */
const ART_MARKERS: Record<string, { instruction: string; response: string }> = {
  qwen3: { instruction: '<|im_start|>user\n', response: '<|im_start|>assistant\n' },
  'llama3.1': {
    instruction: '<|start_header_id|>user<|end_header_id|>\n\n',
    response: '<|start_header_id|>assistant<|end_header_id|>\n\n',
  },
};

/** ART's response_only_labels: trained from after each response marker up to the next instruction marker. */
function artMask(ids: number[], instruction: number[], response: number[]): number[] {
  const at = (t: number, marker: number[]) => marker.every((id, k) => ids[t + k] === id);
  const mask = ids.map(() => 0);
  let inResponse = false;
  for (let t = 0; t < ids.length; t += 1) {
    if (at(t, response)) {
      inResponse = true;
      t += response.length - 1;
      continue;
    }
    if (at(t, instruction)) inResponse = false;
    if (inResponse) mask[t] = 1;
  }
  return mask;
}

const call = (id: string, city: string) => ({
  id,
  type: 'function',
  function: { name: 'get_weather', arguments: JSON.stringify({ city }) },
});
const SFT_CONVERSATIONS: Record<string, { messages: Record<string, unknown>[]; tools?: unknown[] }> = {
  'three assistant turns': {
    messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Capital of France?' },
      { role: 'assistant', content: 'Paris.' },
      { role: 'user', content: 'And of Italy?' },
      { role: 'assistant', content: 'Rome.' },
      { role: 'user', content: 'Spain?' },
      { role: 'assistant', content: 'Madrid.' },
    ],
  },
  'a tool loop (Qwen renders tool results inside user turns)': {
    messages: [
      { role: 'user', content: 'Weather in Oslo, then Rome?' },
      { role: 'assistant', content: '', tool_calls: [call('a', 'Oslo')] },
      { role: 'tool', tool_call_id: 'a', content: 'cold' },
      { role: 'assistant', content: 'Oslo is cold.', tool_calls: [call('b', 'Rome')] },
      { role: 'tool', tool_call_id: 'b', content: 'warm' },
      { role: 'assistant', content: 'Rome is warm.' },
    ],
    tools: [WEATHER_TOOL],
  },
};

describe('training rows on real families (random weights, real tokenizers)', () => {
  let e2e: E2eServer;
  const folders: Partial<Record<Family, string>> = {};
  before(async () => {
    for (const family of TESTED) folders[family] = writeFamilyModel(family, { seed: 1 });
    e2e = await startE2eServer({ env: { BASE_MODELS: baseModelsSetting(folders) } });
  });
  after(async () => {
    await e2e?.close();
  });

  for (const family of TESTED) {
    const baseId = `test/${family}`;

    test(`${family}: RL from multi-turn agent loops: every trained token has its sampler logprob; trainer = sampler at step 0`, async () => {
      const modelId = (
        await e2e.api('POST', '/v1/preview/models', { project: 'rows', name: family, base_model: baseId })
      ).body.id;
      const trajectories: Trajectory[] = [];
      for (const [m, mode] of (['omitted', 'true', 'token_id'] as LogprobsMode[]).entries()) {
        for (const tools of [false, true])
          trajectories.push(
            await agentLoop(e2e, {
              model: `local/rows/${family}`,
              mode,
              tools,
              seed: 10 * (2 * m + (tools ? 2 : 1)),
              maxTokens: 6,
            }),
          );
      }
      // Qwen3 without thinking: the template drops the empty think block of earlier turns, so later turns start their own sequences.
      if (family === 'qwen3')
        trajectories.push(
          await agentLoop(e2e, {
            model: `local/rows/${family}`,
            mode: 'omitted',
            tools: true,
            seed: 99,
            maxTokens: 6,
            kwargs: { enable_thinking: false },
          }),
        );
      assert.ok(
        trajectories.filter((trajectory) => trajectory.tools).every((trajectory) => toolCallsIn(trajectory) === 1),
        'each tool loop made its call',
      );
      const gap = await samplerTrainerGap(e2e, baseId, trajectories);
      console.log(
        `# ${family}: ${trajectories.length} three-turn loops, max |trainer − sampler| ${gap.worst.toExponential(2)} over ${gap.compared} sampled tokens in ${gap.sequences} sequences`,
      );
      assert.equal(gap.missing, 0, 'every trained token carries its sampler logprob');
      assert.ok(gap.compared >= trajectories.length * 3 * 4, `compared ${gap.compared}`);
      assert.ok(gap.worst <= 1e-4, `max difference ${gap.worst}`);

      const scored = trajectories.map((trajectory, i) => ({ ...trajectory, reward: i % 2 }));
      const submitted = await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: modelId,
        trajectory_groups: [{ trajectories: scored }],
        experimental_config: { learning_rate: 1e-3 },
      });
      assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
      const job = await waitForJob(e2e, submitted.body.id, 300_000);
      assert.equal(job.status, 'COMPLETED', JSON.stringify(job.error));
      assert.equal(job.metrics.frac_sampler_logprobs, 1);
      assert.ok(!(await allEvents(e2e, submitted.body.id)).some((event) => event.type === 'sampler_logprobs_missing'));
    });

    test(`${family}: SFT trains exactly the spans ART would on transformers’ rendering (skipped without the reference Python)`, {
      skip: NO_REFERENCE,
    }, async () => {
      const base = await e2e.server.services.runtime.load(baseId);
      const marker = (text: string) => base.tokenizer.encode(text);
      const cases = Object.entries(SFT_CONVERSATIONS);
      const references = referenceRender(
        folders[family]!,
        cases.map(([, { messages, tools }]) => ({ messages, tools, add_generation_prompt: false })),
      );
      for (const [index, [name, conversation]] of cases.entries()) {
        const reference = references[index];
        if (reference.error !== undefined) assert.fail(`${name}: transformers refused it: ${reference.error}`);
        const row = tokenizeConversation(
          trainingRenderer({ tokenizer: base.tokenizer, template: base.template! }, conversation.tools, null),
          conversation.messages,
          'all',
        )!;
        assert.deepEqual(row.tokens, reference.ids, `${name}: one rendering, the same ids as transformers`);
        const art = artMask(
          reference.ids,
          marker(ART_MARKERS[family].instruction),
          marker(ART_MARKERS[family].response),
        );
        if (family === 'llama3.1' && conversation.tools) {
          // Stricter than ART where Llama puts tool results in ipython turns: those are input, never trained.
          const ipython = marker('<|start_header_id|>ipython<|end_header_id|>')[0];
          assert.ok(
            art.some((m, t) => m && reference.ids[t] === ipython),
            'ART trains the ipython header',
          );
          assert.ok(
            row.mask.every((m, t) => !m || art[t]),
            `${name}: every span we train, ART trains`,
          );
          continue;
        }
        assert.deepEqual(row.mask, art, `${name}: the trained spans are ART's`);
      }
    });

    test(`${family}: SFT over HTTP with several assistant turns trains the same number of tokens`, async () => {
      const modelId = (
        await e2e.api('POST', '/v1/preview/models', { project: 'rows', name: `${family}-sft`, base_model: baseId })
      ).body.id;
      const { messages, tools } = SFT_CONVERSATIONS['three assistant turns'];
      const artifact = await uploadArtifact(e2e, `local/rows/${family}-sft`, {
        'train.jsonl': `${JSON.stringify({ messages, tools })}\n`,
      });
      const submitted = await e2e.api('POST', '/v1/preview/sft-training-jobs', {
        model_id: modelId,
        training_data_url: artifact.url,
        config: { batch_size: 1, learning_rate: [0.0] },
      });
      assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
      assert.equal((await waitForJob(e2e, submitted.body.id, 120_000)).status, 'COMPLETED');
      const step = (await allEvents(e2e, submitted.body.id)).find((event) => event.type === 'gradient_step')!;
      const base = await e2e.server.services.runtime.load(baseId);
      const answers = ['Paris.', 'Rome.', 'Madrid.'].map((answer) => base.tokenizer.encode(answer).length);
      const endOfTurn = family === 'qwen3' ? 2 : 1; // <|im_end|>\n or <|eot_id|>
      const thinkBlock = family === 'qwen3' ? base.tokenizer.encode('<think>\n\n</think>\n\n').length : 0; // Qwen3 renders it in the last turn
      assert.equal(step.data.num_trainable_tokens, answers.reduce((sum, n) => sum + n + endOfTurn, 0) + thinkBlock);
    });
  }
});
