/**
 * The serving knobs named after vLLM's (MAX_MODEL_LEN, MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS, KV_CACHE_MEMORY_BYTES,
 * DTYPE): read from the environment, passed to the engine, shown in /v1/system-check, and enforced: a request
 * that can never fit is a 400 naming the cause, one that fits later waits for its turn.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { loadConfig, repoRoot, withServeFlags } from '../src/config.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

/** The tiny model's KV bytes per position in float32: k and v × 4 layers × 2 KV heads × 32 dims × 4 bytes. */
const KV_BYTES_PER_POSITION = 2 * 4 * 2 * 32 * 4;
const MAX_MODEL_LEN = 128;

describe('serving limits', () => {
  let e2e: E2eServer;
  before(async () => {
    e2e = await startE2eServer({
      env: {
        ENGINES: 'single',
        MAX_MODEL_LEN: String(MAX_MODEL_LEN),
        MAX_NUM_SEQS: '4',
        MAX_NUM_BATCHED_TOKENS: '64',
        // Room for three full-length sequences: the budget, not MAX_NUM_SEQS, bounds the batch.
        KV_CACHE_MEMORY_BYTES: String(3 * MAX_MODEL_LEN * KV_BYTES_PER_POSITION),
        DTYPE: 'float32',
      },
    });
  });
  after(async () => {
    await e2e.close();
  });

  const chat = (body: Record<string, unknown>) =>
    e2e.api('POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], ...body });

  test('the system check shows the limits the engine runs with', async () => {
    const check = await e2e.api('GET', '/v1/system-check');
    assert.equal(check.status, 200);
    const [engine] = check.body.engine.engines;
    assert.equal(engine.role, 'sampler+trainer');
    assert.equal(engine.dtype, 'float32');
    assert.deepEqual(
      { ...engine.limits, threads: undefined },
      {
        max_model_len: 128,
        max_num_seqs: 4,
        max_num_batched_tokens: 64,
        kv_cache_memory_bytes: 3 * MAX_MODEL_LEN * KV_BYTES_PER_POSITION,
        threads: undefined,
      },
    );
  });

  test('a request longer than max_model_len, or with more choices than the KV budget holds, is a 400 naming the cause', async () => {
    const long = await chat({ max_tokens: 200 });
    assert.equal(long.status, 400);
    assert.match(long.body.error.message, /max_model_len=128/);
    const many = await chat({ n: 4, max_tokens: 4 });
    assert.equal(many.status, 400);
    assert.equal(many.body.error.param, 'n');
    assert.match(many.body.error.message, /max_num_seqs=3/);
  });

  test('requests beyond the batch wait for a free slot and all complete', async () => {
    const replies = await Promise.all(
      Array.from({ length: 4 }, (_, seed) => chat({ n: 3, max_tokens: 16, seed, ignore_eos: true })),
    );
    for (const reply of replies) {
      assert.equal(reply.status, 200, JSON.stringify(reply.body));
      assert.equal(reply.body.choices.length, 3);
      assert.equal(reply.body.usage.completion_tokens, 48);
    }
  });
});

describe('engine configuration', () => {
  test('serve flags override their variables; a bad one stops serve naming it', async () => {
    const config = loadConfig(
      withServeFlags({ MAX_NUM_SEQS: '8', DTYPE: 'float16' }, { 'max-num-seqs': '2', engines: 'single' }),
    );
    assert.deepEqual([config.serving.maxNumSeqs, config.serving.dtype, config.engines.mode], [2, 'float16', 'single']);
    const outcome = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = execFile(
        process.execPath,
        ['--import', 'tsx', 'src/main.ts', 'serve', '--max-num-seqs', '0', '--dtype', 'fp8'],
        { cwd: repoRoot, env: { ...process.env, DATA_DIR: '/nonexistent' } },
        (_error, _stdout, stderr) => resolve({ code: child.exitCode, stderr }),
      );
    });
    assert.equal(outcome.code, 1);
    assert.match(outcome.stderr, /MAX_NUM_SEQS="0"/);
    assert.match(outcome.stderr, /DTYPE="fp8"/);
  });
});
