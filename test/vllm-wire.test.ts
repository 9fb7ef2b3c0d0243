/**
 * The vLLM sampler without vLLM: our generate request as vLLM's `/v1/completions` body and its answers as
 * our events (src/engine/vllm/wire.ts), the configuration that picks the sampler kind per base, and a vLLM URL that
 * does not answer: the system check names the sampler down and chat answers 503 naming it, while our trainer runs.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { type ConfigError, loadConfig } from '../src/config.ts';
import type { EngineError } from '../src/engine/errors.ts';
import { samplerKindOf } from '../src/engine/vllm/config.ts';
import { choiceEvents, completionBody, promptEvent, type VllmChoice } from '../src/engine/vllm/wire.ts';
import { startServer } from '../src/server.ts';
import { httpApi } from './helpers/api.ts';
import { enginePython } from './helpers/engine-process.ts';
import { TINY_MODEL_ENV } from './helpers/server.ts';

describe('our generate request as vLLM’s completions request', () => {
  test('every sampling field is explicit, token ids come back, single-token bans become biases', () => {
    const body = completionBody(
      {
        base: 'b',
        adapter: 'ckpt:1',
        prompt: [5, 6],
        max_tokens: 7,
        temperature: 0,
        logprobs: 2,
        bad_words_ids: [[9]],
        logit_bias: { '3': 1.5 },
      },
      'ckpt:1',
      true,
    );
    assert.deepEqual(body.prompt, [5, 6]);
    assert.equal(body.model, 'ckpt:1');
    assert.deepEqual(
      [body.n, body.max_tokens, body.temperature, body.top_p, body.top_k, body.min_p, body.repetition_penalty],
      [1, 7, 0, 1, -1, 0, 1],
    );
    assert.deepEqual(body.logit_bias, { '3': 1.5, '9': -100 });
    assert.deepEqual(
      [body.logprobs, body.return_token_ids, body.return_tokens_as_token_ids, body.stream],
      [2, true, true, true],
    );
    assert.deepEqual(body.stream_options, { include_usage: true });
    assert.ok(
      !('seed' in body) && !('prompt_logprobs' in body) && !('allowed_token_ids' in body),
      'nulls are left out, never sent as vLLM defaults',
    );
    assert.throws(
      () =>
        completionBody({ base: 'b', adapter: null, prompt: [1], max_tokens: 1, bad_words_ids: [[1, 2]] }, 'b', false),
      (error: EngineError) => error.code === 'bad_request',
    );
  });

  test('a constraint is vLLM’s structured_outputs as it is; none sends none', () => {
    const request = { base: 'b', adapter: null, prompt: [1], max_tokens: 1 };
    const constraint = { regex: 'a+', disable_any_whitespace: true };
    assert.deepEqual(completionBody({ ...request, constraint }, 'b', false).structured_outputs, {
      regex: 'a+',
      disable_any_whitespace: true,
    });
    assert.ok(!('structured_outputs' in completionBody({ ...request, constraint: null }, 'b', false)));
  });

  test('a choice’s tokens with logprobs and our top k, its finish with the stop id; prompt logprobs by rank', () => {
    const chunk: VllmChoice = {
      index: 1,
      token_ids: [10, 11],
      logprobs: {
        token_logprobs: [-0.5, -2],
        top_logprobs: [{ 'token_id:10': -0.5 }, { 'token_id:11': -2, 'token_id:13': -0.1 }],
      },
      finish_reason: 'stop',
      stop_reason: 11,
    };
    assert.deepEqual(choiceEvents(chunk, 1), [
      { type: 'tokens', seq: 1, tokens: [10, 11], logprobs: [-0.5, -2], top_logprobs: [[[10, -0.5]], [[13, -0.1]]] },
      { type: 'finish', seq: 1, finish_reason: 'stop', stop_token_id: 11 },
    ]);
    assert.deepEqual(choiceEvents({ index: 0, token_ids: [], finish_reason: 'length' }, null), [
      { type: 'finish', seq: 0, finish_reason: 'length', stop_token_id: null },
    ]);
    const prompt = promptEvent([null, { '7': { logprob: -3, rank: 4 }, '8': { logprob: -0.2, rank: 1 } }], [1, 7], 1);
    assert.deepEqual(prompt.prompt_logprobs, [null, { logprob: -3, top: [[8, -0.2]] }]);
  });
});

describe('which sampler serves a base', () => {
  const env = { BASE_MODELS: 'a=/m/a,b=/m/b', ENGINE_SECRET: 'x' };

  test('SAMPLER_ENGINE and per-base overrides; a vLLM URL makes vLLM the default', () => {
    const config = loadConfig({ ...env, SAMPLER_ENGINE: 'vllm', SAMPLER_ENGINES: 'b=ours' });
    assert.deepEqual([samplerKindOf(config.vllm, 'a'), samplerKindOf(config.vllm, 'b')], ['vllm', 'ours']);
    const attached = loadConfig({ ...env, SAMPLER_URLS: 'vllm+http://gpu:8000, tcp://cpu:7000' });
    assert.deepEqual(
      [attached.vllm.urls, attached.engines.samplerUrls, attached.vllm.defaultEngine],
      [['http://gpu:8000'], ['tcp://cpu:7000'], 'vllm'],
    );
    assert.equal(samplerKindOf(loadConfig(env).vllm, 'a'), 'ours');
  });

  test('bad settings are named', () => {
    assert.throws(
      () =>
        loadConfig({
          ...env,
          SAMPLER_ENGINE: 'sglang',
          SAMPLER_ENGINES: 'c=vllm',
          SAMPLER_URLS: 'vllm+ftp://x',
          VLLM_MAX_LORA_RANK: '12',
        }),
      (error: ConfigError) =>
        ['SAMPLER_ENGINE=', 'SAMPLER_ENGINES: "c"', 'SAMPLER_URLS: "vllm+ftp://x"', 'VLLM_MAX_LORA_RANK=12'].every(
          (name) => error.problems.some((problem) => problem.startsWith(name)),
        ),
    );
  });
});

/** A server (tiny model, its own engine) with these settings; its vLLM sampler; its API. */
async function serverWith(env: Record<string, string>) {
  const key = `sk-${'vllmtest'.repeat(4)}`;
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'vllm-'));
  const server = await startServer(
    loadConfig({
      ...TINY_MODEL_ENV,
      DATA_DIR: dataDir,
      PORT: '0',
      LOG_LEVEL: 'silent',
      BOOTSTRAP_API_KEY: key,
      ENGINE_PYTHON: await enginePython(),
      ...env,
    }),
  );
  return {
    server,
    vllm: server.engines!.all.find((engine) => engine.kind === 'vllm')!.supervisor,
    api: httpApi(server.url, key),
    async close() {
      await server.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

describe('a vLLM sampler URL that does not answer', () => {
  let t: Awaited<ReturnType<typeof serverWith>>;
  let url: string;

  before(async () => {
    url = `http://127.0.0.1:${await closedPort()}`;
    t = await serverWith({ SAMPLER_URLS: `vllm+${url}` });
  });
  after(async () => {
    await t?.close();
  });

  test('the system check reports the sampler down naming it; chat answers 503 naming it', async () => {
    const { api, server } = t;
    await assert.rejects(server.waitForEngines(), /not answering/);
    const check = await api('GET', '/v1/system-check');
    assert.equal(check.status, 503);
    assert.equal(check.body.engine.success, false);
    assert.match(check.body.engine.error, new RegExp(`sampler \\(vLLM at ${url}\\)`));
    const chat = await api('POST', '/v1/chat/completions', {
      model: TINY_MODEL_ENV.BASE_MODELS.split('=')[0],
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
    });
    assert.equal(chat.status, 503, JSON.stringify(chat.body));
    assert.match(JSON.stringify(chat.body), new RegExp(`vLLM sampler at ${url} is not answering`));
    const models = await api('GET', '/v1/models');
    assert.ok(models.body.data.every((card: { sampler_engine: string }) => card.sampler_engine === 'vllm'));
  });
});

describe('a vLLM that cannot start', () => {
  const base = TINY_MODEL_ENV.BASE_MODELS.split('=')[0];
  const failed = async (vllm: { health(): { state: string } }) => {
    while (vllm.health().state !== 'failed') await new Promise((resolve) => setTimeout(resolve, 100));
  };

  test('nothing starts until a model needs it; without a vLLM the start is refused once, and creation says why', async () => {
    const t = await serverWith({ SAMPLER_ENGINE: 'vllm', VLLM_PYTHON: '/nonexistent/python' });
    try {
      await t.server.waitForEngines();
      assert.equal(t.vllm.health().state, 'idle');
      assert.equal((await t.api('GET', '/v1/system-check')).status, 200, 'an idle vLLM fails no check');
      // The first model on the base starts its vLLM (creation does not wait for it); the second hears why it failed.
      assert.equal(
        (await t.api('POST', '/v1/preview/models', { project: 'p', name: 'm0', base_model: base })).status,
        200,
      );
      await failed(t.vllm);
      const created = await t.api('POST', '/v1/preview/models', { project: 'p', name: 'm', base_model: base });
      assert.equal(created.status, 400, JSON.stringify(created.body));
      assert.match(
        JSON.stringify(created.body),
        /vLLM cannot serve base model .*no vLLM Python at \/nonexistent\/python/,
      );
      const check = await t.api('GET', '/v1/system-check');
      assert.equal(check.status, 503);
      assert.match(
        check.body.engine.error,
        /vLLM at not started\) \(failed\): no vLLM Python at \/nonexistent\/python/,
      );
      assert.equal((t.vllm.health() as { restarts: number }).restarts, 0, 'refused once, never retried');
    } finally {
      await t.close();
    }
  });

  test('a KV cache larger than the free memory is refused before anything is spawned, with both figures', async () => {
    // Any existing file passes for the Python: nothing is spawned.
    const t = await serverWith({
      SAMPLER_ENGINE: 'vllm',
      VLLM_PYTHON: process.execPath,
      KV_CACHE_MEMORY_BYTES: String(2 ** 50),
    });
    try {
      const chat = await t.api('POST', '/v1/chat/completions', {
        model: base,
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 2,
      });
      assert.equal(chat.status, 503, JSON.stringify(chat.body));
      assert.match(
        JSON.stringify(chat.body),
        /not started: its KV cache \(1048576\.00 GiB: KV_CACHE_MEMORY_BYTES, or 4 sequences of MAX_MODEL_LEN\) and weights \([0-9.]+ GiB\) need more than the [0-9.]+ GiB this machine has free/,
      );
      assert.equal(t.vllm.health().state, 'failed');
      assert.equal((t.vllm.health() as { pid: number | null }).pid, null);
    } finally {
      await t.close();
    }
  });

  test('a vLLM that exits at every start is given up after three, the reason kept for the system check', async () => {
    const t = await serverWith({ SAMPLER_ENGINE: 'vllm', VLLM_PYTHON: '/bin/false' });
    try {
      assert.equal(
        (await t.api('POST', '/v1/preview/models', { project: 'p', name: 'm0', base_model: base })).status,
        200,
      );
      await failed(t.vllm);
      const health = t.vllm.health() as { restarts: number; error: string };
      assert.equal(health.restarts, 2, 'three starts in all');
      assert.match(health.error, /exited \(code 1\)/);
      await new Promise((resolve) => setTimeout(resolve, 2000));
      assert.equal((t.vllm.health() as { restarts: number }).restarts, 2, 'and no more');
      const check = await t.api('GET', '/v1/system-check');
      assert.equal(check.status, 503);
      assert.match(check.body.engine.error, /\(failed\): exited \(code 1\)/);
    } finally {
      await t.close();
    }
  });
});

/** A loopback port nothing listens on. */
function closedPort(): Promise<number> {
  return new Promise((resolve) => {
    const probe = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as net.AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}
