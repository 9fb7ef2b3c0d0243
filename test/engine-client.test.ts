/**
 * src/engine: the client against a scripted fake engine, and the supervisor and client against the real
 * `python3 -m engine` with the tiny model (framing at the byte level: test/unit/framing.test.ts).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { Template } from '@huggingface/jinja';
import { ensureTinyModel } from '../models/make-tiny.ts';
import { loadTokenizer } from '../src/conversation/tokenizer.ts';
import { EngineClient } from '../src/engine/client.ts';
import { EngineError } from '../src/engine/errors.ts';
import { encodeFrame, FrameDecoder, parseFrame } from '../src/engine/framing.ts';
import type { GenerateStream } from '../src/engine/generate-stream.ts';
import type { EngineLogger } from '../src/engine/logger.ts';
import type {
  AdapterInit,
  GenerateEvent,
  GenerateRequest,
  LossConfig,
  OptimizerConfig,
} from '../src/engine/protocol.ts';
import { EngineSupervisor } from '../src/engine/supervisor.ts';
import { loraInit, optimizerConfig } from '../src/training/defaults.ts';
import { engineLossConfig, parseRlConfig } from '../src/training/rl/config.ts';
import { enginePython, startTcpEngine } from './helpers/engine-process.ts';

/** A scripted engine on the other end of two pipes. */
function fakeEngine() {
  const toEngine = new PassThrough();
  const fromEngine = new PassThrough();
  const decoder = new FrameDecoder();
  const received: Record<string, unknown>[] = [];
  let onRequest: (message: Record<string, unknown>) => void = () => undefined;
  toEngine.on('data', (chunk: Buffer) => {
    for (const frame of decoder.push(chunk)) {
      const message = parseFrame(frame) as Record<string, unknown>;
      received.push(message);
      onRequest(message);
    }
  });
  return {
    client: new EngineClient(fromEngine, toEngine, { peer: 'the fake engine' }),
    received,
    reply: (message: object) => fromEngine.write(encodeFrame(message)),
    onRequest: (handler: (message: Record<string, unknown>) => void) => (onRequest = handler),
    die: () => fromEngine.end(),
  };
}

const generateRequest: GenerateRequest = { base: 'tiny', adapter: null, prompt: [1, 2, 3], max_tokens: 4 };

async function collect(stream: GenerateStream): Promise<GenerateEvent[]> {
  const events: GenerateEvent[] = [];
  for await (const event of stream) events.push(event);
  return events;
}

describe('client against a fake engine', () => {
  test('resolves ready, and matches replies to requests by id whatever their order', async () => {
    const engine = fakeEngine();
    engine.reply({ id: null, event: 'ready', device: 'cpu', dtype: 'float32', torch: 'x', matmul_gflops: 1 });
    assert.equal((await engine.client.ready).device, 'cpu');
    const first = engine.client.request('drop_adapter', { adapter: 'one' });
    const second = engine.client.request('drop_adapter', { adapter: 'two' });
    await new Promise((resolve) => setImmediate(resolve));
    const [a, b] = engine.received;
    assert.equal(a.op, 'drop_adapter');
    engine.reply({ id: b.id, done: true, dropped: false });
    engine.reply({ id: a.id, done: true, dropped: true });
    assert.deepEqual([(await first).dropped, (await second).dropped], [true, false]);
    assert.equal(engine.client.inFlight, 0);
  });

  test('error replies reject with the engine code', async () => {
    const engine = fakeEngine();
    engine.onRequest((m) =>
      engine.reply({ id: m.id, done: true, error: { code: 'not_found', message: "base 'x' is not loaded" } }),
    );
    await assert.rejects(
      engine.client.request('stats', {}),
      (error: unknown) => error instanceof EngineError && error.code === 'not_found',
    );
  });

  test('generate streams tagged events, ending with done', async () => {
    const engine = fakeEngine();
    engine.onRequest((m) => {
      engine.reply({ id: m.id, done: false, type: 'tokens', seq: 0, tokens: [5], logprobs: [-0.5] });
      engine.reply({ id: m.id, done: false, type: 'finish', seq: 0, finish_reason: 'length', stop_token_id: null });
      engine.reply({ id: m.id, done: true, prompt_tokens: 3, cached_tokens: 0 });
    });
    assert.deepEqual(
      (await collect(engine.client.generate(generateRequest))).map((e) => e.type),
      ['tokens', 'finish', 'done'],
    );
  });

  test('breaking out of a stream cancels its request', async () => {
    const engine = fakeEngine();
    engine.onRequest((m) => {
      if (m.op === 'generate') engine.reply({ id: m.id, done: false, type: 'tokens', seq: 0, tokens: [5] });
      if (m.op === 'cancel') engine.reply({ id: m.id, done: true, cancelled: true });
    });
    const stream = engine.client.generate(generateRequest);
    for await (const event of stream) {
      assert.equal(event.type, 'tokens');
      break;
    }
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(
      engine.received.map((m) => m.op),
      ['generate', 'cancel'],
    );
    assert.equal(engine.received[1].target, stream.id);
  });

  test('a closed connection fails everything in flight with engine_exited, and later requests too', async () => {
    const engine = fakeEngine();
    const stats = engine.client.request('stats', {});
    const stream = engine.client.generate(generateRequest);
    engine.die();
    const exited = (error: unknown) => error instanceof EngineError && error.code === 'engine_exited';
    await assert.rejects(stats, exited);
    await assert.rejects(collect(stream), exited);
    await assert.rejects(engine.client.request('stats', {}), exited);
    assert.equal(engine.client.closed, true);
  });
});

// ---------------------------------------------------------------------------------------------
// The real engine, run by the Python every other end-to-end test runs it with: these never skip.

function recordingLogger(): EngineLogger & { lines: string[]; fields: Map<string, Record<string, unknown>> } {
  const lines: string[] = [];
  const fields = new Map<string, Record<string, unknown>>(); // the last fields logged with each message
  const record = (logged: Record<string, unknown>, message: string) => {
    lines.push(message);
    fields.set(message, logged);
  };
  return { lines, fields, info: record, warn: record, error: record };
}

describe('supervisor and client against the real engine', () => {
  const logger = recordingLogger();
  let supervisor: EngineSupervisor;
  let modelDir: string;
  let prompt: number[];
  const scratch = mkdtempSync(join(tmpdir(), 'engine-client-'));

  before(async () => {
    modelDir = (await ensureTinyModel()).dir;
    const tokenizer = await loadTokenizer(modelDir);
    const template = new Template(tokenizer.chatTemplate ?? '');
    prompt = tokenizer.encode(
      template.render({ messages: [{ role: 'user', content: 'What is 2 + 2?' }], add_generation_prompt: true }),
    );
    supervisor = new EngineSupervisor({
      logger,
      python: await enginePython(),
      args: ['--threads', '2'],
      readyTimeoutMs: 60_000,
      restartBackoff: { initialMs: 100, maxMs: 1000, stableAfterMs: 30_000 },
    });
    supervisor.start();
    await supervisor.waitUntilReady();
  });

  after(async () => {
    await supervisor.stop();
    rmSync(scratch, { recursive: true, force: true });
  });

  const long: Omit<GenerateRequest, 'prompt'> = {
    base: 'tiny',
    adapter: null,
    max_tokens: 1500,
    ignore_eos: true,
    temperature: 1,
    seed: 1,
  };

  test('starts, reports health and logs the engine stderr', async () => {
    const health = supervisor.health();
    assert.equal(health.state, 'ready');
    assert.equal(health.engine?.device === 'cpu' || health.engine?.device === 'cuda', true);
    assert.ok(health.pid);
    await supervisor.probe();
    assert.ok(
      logger.lines.some((line) => line.includes('engine: torch')),
      logger.lines.join('\n'),
    );
    // The ready line `npm start` prints stays a line: transformers' table of every causal LM it loads is logged as
    // its size (about 10 kB otherwise), the rest of the announcement as it came.
    const ready = logger.fields.get('engine ready');
    assert.ok(ready && JSON.stringify(ready).length < 2_000, JSON.stringify(ready).slice(0, 300));
    assert.deepEqual((ready.supports as Record<string, unknown>).model_types, health.engine?.supports.model_types);
    const transformers = health.engine?.supports.transformers;
    if (transformers)
      assert.equal(
        (ready.supports as { transformers: { causal_lm: unknown } }).transformers.causal_lm,
        `${Object.keys(transformers.causal_lm).length} model types`,
      );
  });

  test('loads the tiny model', async () => {
    const loaded = await supervisor.request('load_base', { base: 'tiny', path: modelDir });
    assert.equal(loaded.vocab_size, 2048);
    assert.equal(loaded.context_length, 2048);
    assert.ok(loaded.eos_token_ids.includes(2041), `eos ${loaded.eos_token_ids}`);
    assert.deepEqual((await supervisor.request('stats', {})).bases, ['tiny']);
  });

  test('generates tokens with logprobs, a finish reason and usage', async () => {
    const events = await collect(
      supervisor.generate({ base: 'tiny', adapter: null, prompt, max_tokens: 8, temperature: 0, logprobs: 2 }),
    );
    const tokens = events.flatMap((e) => (e.type === 'tokens' ? e.tokens : []));
    const logprobs = events.flatMap((e) => (e.type === 'tokens' ? (e.logprobs ?? []) : []));
    assert.ok(tokens.length >= 1 && tokens.length <= 8);
    assert.equal(logprobs.length, tokens.length);
    assert.ok(logprobs.every((lp) => lp !== null && lp <= 0));
    const finish = events.find((e) => e.type === 'finish');
    assert.ok(finish && (finish.finish_reason === 'length' || finish.finish_reason === 'stop'));
    const done = events.at(-1);
    assert.ok(done?.type === 'done');
    assert.equal(done.prompt_tokens, prompt.length);
  });

  test('cancel ends the stream with cancelled and frees the slot', async () => {
    const stream = supervisor.generate({ ...long, prompt });
    await assert.rejects(
      (async () => {
        for await (const event of stream) if (event.type === 'tokens') await stream.cancel();
      })(),
      (error: unknown) => error instanceof EngineError && error.code === 'cancelled',
    );
    const stats = await supervisor.request('stats', {});
    assert.equal(stats.running + stats.waiting, 0);
  });

  test('bad requests get error replies with their code, and the engine carries on', async () => {
    const code = (expected: string) => (error: unknown) => error instanceof EngineError && error.code === expected;
    await assert.rejects(
      supervisor.request('load_base', { base: 'nowhere', path: '/no/such/folder' }),
      code('not_found'),
    );
    await assert.rejects(collect(supervisor.generate({ ...long, base: 'unknown', prompt })), code('not_found'));
    const badPrompt = { ...long, prompt: ['not', 'ids'] } as unknown as GenerateRequest;
    await assert.rejects(collect(supervisor.generate(badPrompt)), code('bad_request'));
    await supervisor.request('stats', {});
  });

  test('killing the engine mid-generation fails that request cleanly and the next request succeeds', async () => {
    await supervisor.request('ensure_adapter', {
      adapter: 'fresh',
      base: 'tiny',
      init: { rank: 4, alpha: 8, target_modules: ['q_proj', 'v_proj'], seed: 1 },
    });
    await supervisor.request('ensure_adapter', {
      adapter: 'saved',
      base: 'tiny',
      init: { rank: 4, alpha: 8, target_modules: ['q_proj'], seed: 2 },
    });
    await supervisor.request('save_adapter', { adapter: 'saved', path: join(scratch, 'saved') });
    const pid = supervisor.health().pid ?? assert.fail('no pid');
    const stream = supervisor.generate({ ...long, prompt });
    await assert.rejects(
      (async () => {
        let killed = false;
        for await (const event of stream) {
          if (event.type === 'tokens' && !killed) killed = process.kill(pid, 'SIGKILL');
        }
      })(),
      (error: unknown) =>
        error instanceof EngineError && error.code === 'engine_exited' && error.message.includes(String(pid)),
    );
    // Waits for the restart and the reload of the base it knew about.
    const events = await collect(
      supervisor.generate({ base: 'tiny', adapter: null, prompt, max_tokens: 4, temperature: 0 }),
    );
    assert.equal(events.at(-1)?.type, 'done');
    const health = supervisor.health();
    assert.equal(health.restarts, 1);
    assert.notEqual(health.pid, pid);
    assert.equal(health.lastExit?.signal, 'SIGKILL');
    assert.ok(logger.lines.includes('base reloaded after restart'));
    assert.deepEqual((await supervisor.request('stats', {})).adapters.sort(), ['fresh', 'saved']);
    assert.equal(logger.lines.filter((line) => line === 'adapter reloaded after restart').length, 2);
  });

  test('a request missing a field gets a bad_request naming it; the complete request trains', async () => {
    const named = (message: string) => (error: unknown) =>
      error instanceof EngineError && error.code === 'bad_request' && error.message === message;
    const { seed: _seed, ...seedless } = loraInit(1);
    await assert.rejects(
      supervisor.request('ensure_adapter', { adapter: 'learner', base: 'tiny', init: seedless as AdapterInit }),
      named('ensure_adapter: missing field init.seed'),
    );
    await supervisor.request('ensure_adapter', { adapter: 'learner', base: 'tiny', init: loraInit(1) });
    const mask = prompt.map((_, t) => (t === 0 ? 0 : 1));
    const row = {
      tokens: prompt,
      segment_ids: prompt.map(() => 0),
      mask,
      weights: mask,
      advantages: mask,
      logprobs: prompt.map(() => null),
    };
    const rl = {
      base: 'tiny',
      adapter: 'learner',
      loss: 'rl' as const,
      rows: [row],
      loss_config: engineLossConfig(parseRlConfig({}, () => 1e-3).config),
      optimizer: optimizerConfig('rl', 1e-3),
    };
    const { epsilon_high: _high, ...noHigh } = rl.loss_config;
    await assert.rejects(
      supervisor.request('train_step', { ...rl, loss_config: noHigh as LossConfig }),
      named('train_step: missing field loss_config.epsilon_high'),
    );
    const { max_grad_norm: _norm, ...noNorm } = optimizerConfig('sft', 1e-3);
    await assert.rejects(
      supervisor.request('train_step', { ...rl, loss: 'sft', optimizer: noNorm as OptimizerConfig }),
      named('train_step: missing field optimizer.max_grad_norm'),
    );
    const { advantages: _advantages, ...noAdvantages } = row;
    await assert.rejects(
      supervisor.request('train_step', { ...rl, rows: [row, noAdvantages] }),
      named('train_step: missing field rows[1].advantages'),
    );
    const baseless = { ...long, prompt, base: undefined } as unknown as GenerateRequest;
    await assert.rejects(collect(supervisor.generate(baseless)), named('generate: missing field base'));
    const { metrics } = await supervisor.request('train_step', rl);
    assert.equal(metrics.learning_rate, 1e-3);
    assert.ok(metrics.grad_norm > 0, JSON.stringify(metrics));
    assert.equal((await supervisor.request('drop_adapter', { adapter: 'learner' })).dropped, true);
  });

  test('stops politely: closing stdin lets the engine exit by itself', async () => {
    await supervisor.stop();
    assert.equal(supervisor.health().state, 'stopped');
    // Not `code 0`: the engine's own teardown sometimes aborts (torch threads at interpreter exit).
    // What the supervisor owns is that it asked, by closing stdin, rather than killing.
    assert.notEqual(supervisor.health().lastExit?.signal, 'SIGKILL', logger.lines.slice(-20).join('\n'));
    await assert.rejects(
      supervisor.request('stats', {}),
      (error: unknown) => error instanceof EngineError && error.code === 'engine_unavailable',
    );
  });
});

describe('client over TCP against the real engine', () => {
  test('answers stats on a socket', async () => {
    const engine = await startTcpEngine();
    try {
      const client = await EngineClient.connect('127.0.0.1', engine.port);
      assert.equal(typeof (await client.ready).matmul_gflops, 'number');
      assert.deepEqual((await client.request('stats', {})).bases, []);
      client.close();
    } finally {
      await engine.kill();
    }
  });
});
