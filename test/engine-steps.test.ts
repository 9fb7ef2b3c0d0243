/**
 * The token-level training ops (forward_backward, optim_step, save_state, load_state) through the engine
 * supervisor, as `runtime.trainer()` hands it out, against the real `python3 -m engine` and the tiny model.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ensureTinyModel } from '../models/make-tiny.ts';
import { loadTokenizer } from '../src/conversation/tokenizer.ts';
import { EngineError } from '../src/engine/errors.ts';
import type { EngineLogger } from '../src/engine/logger.ts';
import type { AdamParams, ForwardBackwardRequest, StepRow } from '../src/engine/protocol.ts';
import { findEnginePython } from '../src/engine/python.ts';
import { EngineSupervisor } from '../src/engine/supervisor.ts';

const python = process.env.ENGINE_PYTHON || (await findEnginePython());
const adam: AdamParams = {
  learning_rate: 5e-3,
  beta1: 0.9,
  beta2: 0.95,
  eps: 1e-12,
  weight_decay: 0,
  grad_clip_norm: 1,
};
const init = { rank: 8, alpha: 16, target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj'], seed: 0 };
// The engine's stderr and the supervisor's complaints, shown when something goes wrong.
const logger: EngineLogger = {
  info() {},
  warn: (fields, message) => console.error(message, fields),
  error: (fields, message) => console.error(message, fields),
};
const code = (expected: string, pattern: RegExp) => (error: unknown) =>
  error instanceof EngineError && error.code === expected && pattern.test(error.message);

/** A supervised datum as Tinker builds one: the sequence shifted by one, the prompt weighted 0. */
function datum(prompt: number[], completion: number[]): StepRow {
  const full = [...prompt, ...completion];
  return {
    tokens: full.slice(0, -1),
    target_tokens: full.slice(1),
    weights: full.slice(1).map((_, i) => (i + 1 < prompt.length ? 0 : 1)),
  };
}

describe('token-level training ops against the real engine', { timeout: 300_000 }, () => {
  let engine: EngineSupervisor;
  let rows: StepRow[];
  let vocab: number;
  const scratch = mkdtempSync(join(tmpdir(), 'engine-steps-'));

  before(async () => {
    const modelDir = (await ensureTinyModel()).dir;
    const tokenizer = await loadTokenizer(modelDir);
    rows = [
      ['The capital of France is', ' Paris.'],
      ['Two plus two equals', ' four.'],
      ['The sky is', ' blue.'],
    ].map(([prompt, answer]) => datum(tokenizer.encode(prompt), tokenizer.encode(answer)));
    engine = new EngineSupervisor({ logger, python, args: ['--threads', '1'], readyTimeoutMs: 60_000 });
    engine.start();
    await engine.waitUntilReady();
    vocab = (await engine.request('load_base', { base: 'tiny', path: modelDir })).vocab_size;
  });

  after(async () => {
    await engine.stop();
    rmSync(scratch, { recursive: true, force: true });
  });

  const fb = (adapter: string, backward: boolean, over: Partial<ForwardBackwardRequest> = {}) =>
    engine.request('forward_backward', {
      base: 'tiny',
      adapter,
      loss: 'cross_entropy',
      loss_config: {},
      backward,
      rows,
      ...over,
    });

  test('cross_entropy steps lower the summed loss; forward-only changes nothing', async () => {
    await engine.request('ensure_adapter', { base: 'tiny', adapter: 'sft', init });
    const first = await fb('sft', false);
    assert.equal(first.outputs.length, rows.length);
    for (const [i, row] of rows.entries()) assert.equal(first.outputs[i].logprobs.length, row.tokens.length);
    const weighted = first.outputs.flatMap((o, i) => o.logprobs.map((lp, t) => -lp * rows[i].weights[t]));
    assert.ok(Math.abs(first.loss - weighted.reduce((a, b) => a + b, 0)) < 1e-3, 'the loss is the weighted sum');
    assert.equal(first.metrics['loss:sum'], first.loss);
    assert.deepEqual((await fb('sft', false)).outputs, first.outputs);
    let last = first.loss;
    for (let step = 1; step <= 4; step++) {
      last = (await fb('sft', true)).loss;
      assert.equal((await engine.request('optim_step', { base: 'tiny', adapter: 'sft', adam })).step, step);
    }
    const after = (await fb('sft', false)).loss;
    assert.ok(after < first.loss * 0.9, `loss ${first.loss} -> ${after}`);
    assert.ok(after < last);
  });

  test('save_state and load_state round-trip weights, moments and step', async () => {
    await engine.request('ensure_adapter', { base: 'tiny', adapter: 'a', init: { ...init, seed: 5 } });
    await fb('a', true);
    await engine.request('optim_step', { base: 'tiny', adapter: 'a', adam });
    const folder = join(scratch, 'state-a');
    const saved = await engine.request('save_state', { adapter: 'a', path: folder });
    assert.deepEqual([...saved.files].sort(), [
      'adapter_config.json',
      'adapter_model.safetensors',
      'optimizer.pt',
      'training_state.json',
    ]);
    const atSave = await fb('a', false);
    await fb('a', true);
    const continued = await engine.request('optim_step', { base: 'tiny', adapter: 'a', adam });
    const afterContinued = await fb('a', false);

    assert.equal((await engine.request('load_state', { base: 'tiny', adapter: 'b', path: folder })).step, 1);
    assert.deepEqual((await fb('b', false)).outputs, atSave.outputs);
    await fb('b', true);
    const replayed = await engine.request('optim_step', { base: 'tiny', adapter: 'b', adam });
    assert.deepEqual([replayed.step, replayed.metrics], [continued.step, continued.metrics]);
    assert.deepEqual((await fb('b', false)).outputs, afterContinued.outputs);

    assert.equal((await engine.request('load_state', { base: 'tiny', adapter: 'a', path: folder })).step, 1);
    assert.deepEqual((await fb('a', false)).outputs, atSave.outputs, 'loading replaces a resident adapter');
  });

  test('the trainer scores sampled tokens as the sampler did', async () => {
    await engine.request('ensure_adapter', { base: 'tiny', adapter: 'rl', init });
    const prompt = rows[0].tokens.slice(0, 5);
    const sampled: number[] = [];
    const logprobs: number[] = [];
    for await (const event of engine.generate({
      base: 'tiny',
      adapter: 'rl',
      prompt,
      max_tokens: 12,
      temperature: 1,
      seed: 3,
      logprobs: 0,
    })) {
      if (event.type === 'tokens') {
        sampled.push(...event.tokens);
        logprobs.push(...(event.logprobs ?? []).map(Number));
      }
    }
    const full = [...prompt, ...sampled];
    const T = full.length - 1;
    const row: StepRow = {
      tokens: full.slice(0, -1),
      target_tokens: full.slice(1),
      weights: Array(T).fill(1),
      logprobs: [...Array(prompt.length - 1).fill(0), ...logprobs],
      advantages: Array(T).fill(1),
    };
    const out = await engine.request('forward_backward', {
      base: 'tiny',
      adapter: 'rl',
      loss: 'importance_sampling',
      loss_config: {},
      backward: true,
      rows: [row],
    });
    const trainer = out.outputs[0].logprobs.slice(prompt.length - 1);
    const gap = Math.max(...trainer.map((lp, i) => Math.abs(lp - logprobs[i])));
    assert.ok(gap < 1e-4, `trainer vs sampler logprobs differ by ${gap}`);
    assert.equal((await engine.request('optim_step', { base: 'tiny', adapter: 'rl', adam })).step, 1);
  });

  test('bad input is an error reply', async () => {
    const row = rows[0];
    const cases: [Partial<ForwardBackwardRequest>, string, RegExp][] = [
      [{ loss: 'hinge' as 'ppo' }, 'bad_request', /unknown loss 'hinge'/],
      [
        { rows: [row, { ...row, weights: row.weights.slice(1) }] },
        'bad_request',
        /rows\[1\]\.weights must be a list with one entry per token/,
      ],
      [
        { rows: [{ ...row, target_tokens: [...row.target_tokens.slice(1), vocab] }] },
        'bad_request',
        /rows\[0\]\.target_tokens .*vocabulary/,
      ],
      [
        { loss: 'ppo', loss_config: { clip_low_threshold: 0.8 } },
        'bad_request',
        /missing field loss_config\.clip_high_threshold/,
      ],
      [{ loss: 'importance_sampling' }, 'bad_request', /missing field rows\[0\]\.logprobs/],
      [{ adapter: 'nobody' }, 'not_found', /nobody/],
    ];
    for (const [over, expected, pattern] of cases)
      await assert.rejects(fb('sft', false, over), code(expected, pattern));
    const { eps: _eps, ...noEps } = adam;
    await assert.rejects(
      engine.request('optim_step', { base: 'tiny', adapter: 'sft', adam: noEps as AdamParams }),
      code('bad_request', /missing field adam\.eps/),
    );
    await assert.rejects(
      engine.request('load_state', { base: 'tiny', adapter: 'x', path: join(scratch, 'missing') }),
      code('not_found', /missing/),
    );
    assert.deepEqual((await engine.request('stats', {})).bases, ['tiny']);
  });
});
