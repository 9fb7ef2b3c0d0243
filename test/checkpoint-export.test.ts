/**
 * A trained checkpoint leaves the service as a PEFT adapter archive: standard `tar` unpacks it, its config names
 * the base model by its public id, its weights are the checkpoint's, and Python `peft` on the Hugging Face base
 * model gives the same logprobs as our engine. Step 0, unknown steps, bad steps and other entities are refused.
 * The archive imported into a new model serves identical logprobs; a corrupt or mismatched one is a 422 that names
 * the problem and keeps nothing. A fork of a checkpoint serves it identically, trains on from it and outlives its parent.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { repoRoot } from '../src/config.ts';
import { servingAdapterKey } from '../src/engine/adapter-keys.ts';
import { DOWN_PROJ_A, tarWithValue, withValue } from './helpers/adapters.ts';
import { NO_REFERENCE, REFERENCE_PYTHON } from './helpers/reference.ts';
import { sampleGroup, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const run = promisify(execFile);

/** Logprob of each token given the ones before it, from transformers + peft on the exported adapter. */
const PEFT_LOGPROBS = `
import json, sys, torch
from transformers import AutoModelForCausalLM
from peft import PeftModel
base, adapter, tokens = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32), adapter).eval()
with torch.no_grad():
    logits = model(torch.tensor([tokens])).logits[0].double()
lp = torch.log_softmax(logits[:-1], -1).gather(1, torch.tensor(tokens[1:]).unsqueeze(1)).squeeze(1)
print(json.dumps([None] + lp.tolist()))
`;

describe('checkpoints leave and come back as PEFT adapters, and start forks', () => {
  let e2e: E2eServer;
  let modelId: string;
  let folder: string;
  const download = (route: string, key = e2e.key) =>
    fetch(`${e2e.url}${route}`, { headers: { authorization: `Bearer ${key}` } });
  const upload = async (name: string, body: Buffer, base = 'builtin/tiny-chat') => {
    const query = new URLSearchParams({ project: 'export', name, base_model: base });
    const response = await fetch(`${e2e.url}/v1/preview/models/import?${query}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/x-tar' },
      body: new Uint8Array(body),
    });
    return { status: response.status, body: await response.json() };
  };
  before(async () => {
    e2e = await startE2eServer();
    modelId = (
      await e2e.api('POST', '/v1/preview/models', { project: 'export', name: 'agent', base_model: 'builtin/tiny-chat' })
    ).body.id;
    const group = await sampleGroup(e2e, 'local/export/agent', 'Say something.', 2, (_choice, index) => index);
    const job = (
      await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: modelId,
        trajectory_groups: [group],
        experimental_config: { learning_rate: 0.01 },
      })
    ).body;
    assert.equal((await waitForJob(e2e, job.id)).status, 'COMPLETED');
    folder = fs.mkdtempSync(path.join(os.tmpdir(), 'export-'));
  });
  after(async () => {
    await e2e?.close();
    fs.rmSync(folder, { recursive: true, force: true });
  });

  test('the archive unpacks with tar into the public adapter config and the checkpoint weights', async () => {
    const response = await download(`/v1/preview/models/${modelId}/checkpoints/1/adapter`);
    assert.equal(response.status, 200);
    assert.equal(response.headers.get('content-type'), 'application/x-tar');
    assert.match(response.headers.get('content-disposition') ?? '', /attachment; filename="agent-step1-adapter\.tar"/);
    fs.writeFileSync(path.join(folder, 'a.tar'), Buffer.from(await response.arrayBuffer()));
    const { stdout } = await run('tar', ['-xvf', 'a.tar'], { cwd: folder });
    assert.deepEqual(stdout.trim().split('\n'), ['adapter_config.json', 'adapter_model.safetensors']);
    const config = JSON.parse(fs.readFileSync(path.join(folder, 'adapter_config.json'), 'utf8'));
    assert.deepEqual([config.peft_type, config.base_model_name_or_path, config.r], ['LORA', 'builtin/tiny-chat', 8]);
    const checkpoint = (await e2e.server.services.repositories.models.findCheckpointByStep(modelId, 1))!;
    assert.ok(
      fs
        .readFileSync(path.join(folder, 'adapter_model.safetensors'))
        .equals(fs.readFileSync(path.join(checkpoint.adapterPath!, 'adapter_model.safetensors'))),
    );
    // The checkpoint on disk names the public id too: no local path leaks into a copied folder either.
    assert.equal(
      JSON.parse(fs.readFileSync(path.join(checkpoint.adapterPath!, 'adapter_config.json'), 'utf8'))
        .base_model_name_or_path,
      'builtin/tiny-chat',
    );
  });

  test("cli checkpoints download (by model name) writes the same archive, and reports a refusal with the server's reason", async () => {
    const target = path.join(folder, 'cli.tar');
    const cli = (args: string[]) =>
      run(
        process.execPath,
        [
          '--import',
          'tsx',
          'src/main.ts',
          'checkpoints',
          'download',
          '--model-id',
          'export/agent',
          ...args,
          '--url',
          e2e.url,
          '--key',
          e2e.key,
        ],
        { cwd: repoRoot },
      );
    const { stdout, stderr } = await cli(['--step', '1', '--output', target]);
    assert.equal(stdout.trim(), target);
    assert.match(stderr, /download \[#+\] 100%/);
    // Byte for byte: an archive's entries carry the checkpoint's own time, so every export of it is identical.
    assert.ok(fs.readFileSync(target).equals(fs.readFileSync(path.join(folder, 'a.tar'))));
    assert.ok(!fs.existsSync(`${target}.partial`));
    await assert.rejects(cli(['--step', '0', '--output', path.join(folder, 'zero.tar')]), /409.*no adapter to export/);
  });

  test('refusals: step 0 has no adapter (409), unknown step 404, malformed step 422, another entity 404, no key 401', async () => {
    const step0 = await download(`/v1/preview/models/${modelId}/checkpoints/0/adapter`);
    assert.equal(step0.status, 409);
    assert.match((await step0.json()).detail ?? '', /base model builtin\/tiny-chat itself/);
    assert.equal((await download(`/v1/preview/models/${modelId}/checkpoints/7/adapter`)).status, 404);
    const malformed = await download(`/v1/preview/models/${modelId}/checkpoints/-1/adapter`);
    assert.equal(malformed.status, 422);
    assert.match(JSON.stringify(await malformed.json()), /step/);
    const stranger = (await e2e.server.services.auth.createKey('stranger')).key;
    assert.equal((await download(`/v1/preview/models/${modelId}/checkpoints/1/adapter`, stranger)).status, 404);
    assert.equal((await fetch(`${e2e.url}/v1/preview/models/${modelId}/checkpoints/1/adapter`)).status, 401);
    // Names resolve for the owner only.
    assert.equal((await e2e.api('GET', '/v1/preview/models/by-name/local/export/agent')).body.id, modelId);
    assert.equal(
      (await e2e.api('GET', '/v1/preview/models/by-name/local/export/agent', undefined, stranger)).status,
      404,
    );
  });

  test('Python peft on the Hugging Face base model gives our engine’s logprobs for the exported adapter (skipped without the reference Python)', {
    skip: NO_REFERENCE,
  }, async () => {
    assert.ok(fs.existsSync(path.join(folder, 'adapter_config.json')), 'the first test unpacked the archive');
    const services = e2e.server.services;
    const base = await services.runtime.load('builtin/tiny-chat');
    const tokens = base.tokenizer.encode('The quick brown fox jumps over the lazy dog, twice.');
    const checkpoint = (await services.repositories.models.findCheckpointByStep(modelId, 1))!;
    const ours = await services.runtime.sampler().request('forward', {
      base: base.id,
      adapter: servingAdapterKey(checkpoint.id),
      adapter_path: checkpoint.adapterPath!,
      rows: [{ tokens }],
    });
    const { stdout } = await run(REFERENCE_PYTHON!, [
      '-c',
      PEFT_LOGPROBS,
      path.join(repoRoot, 'models', 'tiny-chat'),
      folder,
      JSON.stringify(tokens),
    ]);
    const theirs = JSON.parse(stdout) as (number | null)[];
    let worst = 0;
    for (let t = 1; t < tokens.length; t += 1) worst = Math.max(worst, Math.abs(ours.logprobs[0][t]! - theirs[t]!));
    console.log(
      `# exported adapter, peft vs engine: max |logprob difference| ${worst.toExponential(2)} over ${tokens.length - 1} tokens`,
    );
    assert.ok(worst <= 1e-4, `max difference ${worst}`);
  });

  test('an exported archive imported into a new model serves identical logprobs and trains on', async () => {
    const chat = (model: string) =>
      e2e.api('POST', '/v1/chat/completions', {
        model,
        messages: [{ role: 'user', content: 'Say something.' }],
        max_tokens: 6,
        seed: 8,
        logprobs: true,
      });
    const imported = await upload('imported', fs.readFileSync(path.join(folder, 'a.tar')));
    assert.equal(imported.status, 200, JSON.stringify(imported.body));
    assert.deepEqual([imported.body.name, imported.body.base_model], ['imported', 'builtin/tiny-chat']);
    const [source, copy] = [await chat('local/export/agent:step1'), await chat('local/export/imported')];
    assert.deepEqual(copy.body.choices[0].logprobs, source.body.choices[0].logprobs);
    const group = await sampleGroup(e2e, 'local/export/imported', 'Say something.', 2, (_choice, index) => index);
    const job = (
      await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: imported.body.id,
        trajectory_groups: [group],
        experimental_config: { learning_rate: 0.01 },
      })
    ).body;
    assert.equal((await waitForJob(e2e, job.id)).status, 'COMPLETED');
  });

  test('a corrupt or mismatched archive is a 422 naming the problem, and leaves nothing behind', async () => {
    const models = () => fs.readdirSync(path.join(e2e.dataDir, 'models')).length;
    const before = models();
    const good = JSON.parse(fs.readFileSync(path.join(folder, 'adapter_config.json'), 'utf8'));
    const weights = fs.readFileSync(path.join(folder, 'adapter_model.safetensors'));
    const archive = async (files: Record<string, string | Buffer>) => {
      const dir = fs.mkdtempSync(path.join(folder, 'bad-'));
      for (const [name, content] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), content);
      await run('tar', ['-cf', 'x.tar', ...Object.keys(files)], { cwd: dir });
      return fs.readFileSync(path.join(dir, 'x.tar'));
    };
    const cases: [string, Buffer, RegExp][] = [
      ['random bytes', Buffer.alloc(3000, 7), /not a readable tar archive/],
      ['no weights', await archive({ 'adapter_config.json': JSON.stringify(good) }), /no adapter_model\.safetensors/],
      [
        'rank mismatch',
        await archive({
          'adapter_config.json': JSON.stringify({ ...good, r: 4 }),
          'adapter_model.safetensors': weights,
        }),
        /shape \[8,192\]; the base model and rank 4 need \[4,192\]/,
      ],
      [
        'unknown target',
        await archive({
          'adapter_config.json': JSON.stringify({ ...good, target_modules: ['lm_head'] }),
          'adapter_model.safetensors': weights,
        }),
        /lm_head\W{0,3} is not supported/,
      ],
      [
        'fewer targets than tensors',
        await archive({
          'adapter_config.json': JSON.stringify({ ...good, target_modules: ['q_proj'] }),
          'adapter_model.safetensors': weights,
        }),
        /module k_proj is not among target_modules/,
      ],
      [
        'not safetensors',
        await archive({
          'adapter_config.json': JSON.stringify(good),
          'adapter_model.safetensors': Buffer.alloc(100, 255),
        }),
        /runs past the file/,
      ],
    ];
    for (const [label, body, reason] of cases) {
      const response = await upload(`bad-${label.replace(/ /g, '-')}`, body);
      assert.equal(response.status, 422, label);
      assert.match(JSON.stringify(response.body.detail), reason, label);
    }
    assert.equal((await upload('other-base', fs.readFileSync(path.join(folder, 'a.tar')), 'nobody/base')).status, 422);
    assert.equal(models(), before);
    assert.deepEqual(fs.readdirSync(path.join(e2e.dataDir, 'imports')), []);
    const names = (await e2e.api('GET', '/v1/models')).body.data.map((card: { id: string }) => card.id);
    assert.ok(!names.some((id: string) => id.includes('bad-')));
  });

  test('an adapter holding NaN, ±Inf or a value beyond ±65504 is a 422 naming the tensor and its first bad index; nothing is kept', async () => {
    const models = () => fs.readdirSync(path.join(e2e.dataDir, 'models')).length;
    const before = models();
    const tar = fs.readFileSync(path.join(folder, 'a.tar'));
    const cases: [number, string][] = [
      [Number.NaN, 'NaN'],
      [Infinity, 'Infinity'],
      [-Infinity, '-Infinity'],
      [1e38, '9.999999680285692e+37'],
      [65505, '65505'],
    ];
    for (const [i, [value, shown]] of cases.entries()) {
      const response = await upload(`poisoned-${i}`, tarWithValue(tar, value, DOWN_PROJ_A, [5, 7]));
      assert.equal(response.status, 422, `${value}: ${JSON.stringify(response.body)}`);
      assert.deepEqual(response.body.detail, [
        {
          loc: ['body', 'adapter_model.safetensors', DOWN_PROJ_A],
          msg: `value ${shown} at index [0,5]: adapter values must be finite and within ±65504`,
          type: 'value_error',
        },
      ]);
    }
    assert.equal(models(), before);
    assert.deepEqual(fs.readdirSync(path.join(e2e.dataDir, 'imports')), []);
    const edge = await upload('edge', tarWithValue(tar, -65504, DOWN_PROJ_A, [5]));
    assert.equal(edge.status, 200, 'the bound itself is allowed');
  });

  test('a checkpoint whose values went bad on disk is refused by fork (422) and by the engine at load (chat 422), nothing kept', async () => {
    const legacy = await upload('legacy', fs.readFileSync(path.join(folder, 'a.tar')));
    assert.equal(legacy.status, 200);
    const weights = path.join(
      e2e.server.services.models.modelFolder(legacy.body.id),
      'checkpoints',
      '0',
      'adapter_model.safetensors',
    );
    fs.writeFileSync(weights, withValue(fs.readFileSync(weights), Number.NaN, DOWN_PROJ_A, [2]));
    const fork = await e2e.api('POST', `/v1/preview/models/${legacy.body.id}/fork`, { name: 'legacy-fork' });
    assert.equal(fork.status, 422, JSON.stringify(fork.body));
    assert.match(JSON.stringify(fork.body.detail), /down_proj\.lora_A\.weight.*value NaN at index \[0,2\]/);
    assert.equal((await e2e.api('GET', '/v1/preview/models/by-name/local/export/legacy-fork')).status, 404);
    const chat = await e2e.api('POST', '/v1/chat/completions', {
      model: 'local/export/legacy',
      messages: [{ role: 'user', content: 'Say something.' }],
      max_tokens: 4,
    });
    assert.equal(chat.status, 422, JSON.stringify(chat.body));
    assert.match(chat.body.error.message, /down_proj\.lora_A\.weight: value NaN at index \[0,2\]/);
  });

  test('a job driven to divergence (an absurd learning rate) fails as training_diverged; the latest checkpoint is unchanged and serves as before', async () => {
    const chat = () =>
      e2e.api('POST', '/v1/chat/completions', {
        model: 'local/export/agent',
        messages: [{ role: 'user', content: 'Say something.' }],
        max_tokens: 6,
        seed: 3,
        logprobs: true,
      });
    const checkpoints = async () => (await e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints`)).body.data;
    const [answer, listed] = [await chat(), await checkpoints()];
    const group = await sampleGroup(e2e, 'local/export/agent', 'Say something.', 2, (_choice, index) => index);
    const rl = (
      await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: modelId,
        trajectory_groups: [group],
        experimental_config: { learning_rate: 1e30 },
      })
    ).body;
    const form = new FormData();
    form.append(
      'file',
      new Blob([
        `${JSON.stringify({
          messages: [
            { role: 'user', content: 'Hi' },
            { role: 'assistant', content: 'Hello' },
          ],
        })}\n`,
      ]),
      'train.jsonl',
    );
    const uploaded = await fetch(`${e2e.url}/v1/preview/artifacts/local/export/sft-data`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e2e.key}` },
      body: form,
    });
    const sftData = ((await uploaded.json()) as { url: string }).url;
    const sft = (
      await e2e.api('POST', '/v1/preview/sft-training-jobs', {
        model_id: modelId,
        training_data_url: sftData,
        config: { batch_size: 1, learning_rate: 1e30 },
      })
    ).body;
    for (const job of [rl, sft]) {
      const ended = await waitForJob(e2e, job.id);
      assert.equal(ended.status, 'FAILED', JSON.stringify(ended));
      assert.equal(ended.error.code, 'training_diverged');
      assert.match(
        ended.error.message,
        /^Training diverged: .*no checkpoint was written .*\(training diverged: the step would leave .* at index/,
      );
    }
    assert.deepEqual(await checkpoints(), listed);
    assert.deepEqual((await chat()).body.choices[0].logprobs, answer.body.choices[0].logprobs);
  });

  test("a fork starts from its parent's checkpoint, serves it identically, trains on, and outlives the parent", async () => {
    const chat = (model: string) =>
      e2e.api('POST', '/v1/chat/completions', {
        model,
        messages: [{ role: 'user', content: 'Say something.' }],
        max_tokens: 6,
        seed: 5,
        logprobs: true,
      });
    const fork = await e2e.api('POST', `/v1/preview/models/${modelId}/fork`, { name: 'fork', step: 1 });
    assert.equal(fork.status, 200);
    assert.deepEqual([fork.body.project, fork.body.base_model], ['export', 'builtin/tiny-chat']);
    const [parentAnswer, forkAnswer] = [await chat('local/export/agent:step1'), await chat('local/export/fork')];
    assert.deepEqual(forkAnswer.body.choices[0].logprobs, parentAnswer.body.choices[0].logprobs);
    const step0 = (await e2e.server.services.repositories.models.findCheckpointByStep(fork.body.id, 0))!;
    assert.ok(
      fs.existsSync(path.join(step0.adapterPath!, 'optimizer.pt')),
      'the optimizer state comes along, so training goes on where the parent stood',
    );

    const group = await sampleGroup(e2e, 'local/export/fork', 'Say something.', 2, (_choice, index) => index);
    const job = (
      await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: fork.body.id,
        trajectory_groups: [group],
        experimental_config: { learning_rate: 0.01 },
      })
    ).body;
    assert.equal((await waitForJob(e2e, job.id)).status, 'COMPLETED');
    const steps = (await e2e.api('GET', `/v1/preview/models/${fork.body.id}/checkpoints`)).body.data.map(
      (c: { step: number }) => c.step,
    );
    assert.deepEqual(steps, [0, 1]);
    assert.notDeepEqual(
      (await chat('local/export/fork:step1')).body.choices[0].logprobs,
      forkAnswer.body.choices[0].logprobs,
    );

    assert.equal((await e2e.api('POST', `/v1/preview/models/${modelId}/fork`, { name: 'fork' })).status, 409);
    assert.equal(
      (await e2e.api('POST', `/v1/preview/models/${modelId}/fork`, { name: 'nowhere', step: 9 })).status,
      404,
    );
    assert.equal((await e2e.api('POST', `/v1/preview/models/${modelId}/fork`, { name: 'x', step: -1 })).status, 422);
    const stranger = (await e2e.server.services.auth.createKey('stranger2')).key;
    assert.equal(
      (await e2e.api('POST', `/v1/preview/models/${modelId}/fork`, { name: 'theirs' }, stranger)).status,
      404,
    );
    const names = (await e2e.api('GET', '/v1/models')).body.data.map((card: { id: string }) => card.id);
    assert.ok(!names.some((id: string) => id.includes('nowhere')));

    assert.equal((await e2e.api('DELETE', `/v1/preview/models/${modelId}`)).status, 200);
    assert.deepEqual(
      (await chat('local/export/fork:step0')).body.choices[0].logprobs,
      forkAnswer.body.choices[0].logprobs,
    );
  });
});
