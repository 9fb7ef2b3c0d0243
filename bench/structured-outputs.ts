/**
 * Structured outputs at real vocabulary sizes, through the API with the real engine: on a Qwen3-shaped model
 * (random weights, the real 151,936-entry vocabulary) or SmolLM2 (49,152), decode throughput of a batch of free
 * requests vs the same batch with half, then all, of its rows under a JSON schema (ratio; goal ≥ 0.8); the
 * extra time each constrained token costs (its mask: the step-time difference per row); the compile time of
 * a new 50-property schema (a first request minus a repeated one, max_tokens 1); and the engine's resident
 * memory before and after. Everything goes over HTTP, so the same script measures any version of the server.
 * Prints figures; asserts nothing.
 * Usage: npx tsx bench/structured-outputs.ts [qwen3|smollm2] [batch] [tokens]
 */

import { SMOLLM2_BASE_MODEL } from '../src/config.ts';
import { writeFamilyModel } from '../test/helpers/families.ts';
import { startE2eServer } from '../test/helpers/server.ts';
import { median } from './measure.ts';

const which = process.argv[2] ?? 'qwen3';
const BATCH = Number(process.argv[3] ?? 16);
const TOKENS = Number(process.argv[4] ?? (which === 'smollm2' ? 48 : 128));
const ROUNDS = 3;

/** Every answer needs far more than TOKENS tokens, so constrained rows decode exactly as many as free ones. */
const LONG_SCHEMA = {
  type: 'array',
  items: {
    type: 'object',
    properties: {
      id: { type: 'integer', minimum: 0, maximum: 999 },
      name: { type: 'string', minLength: 3, maxLength: 10 },
      ok: { type: 'boolean' },
    },
    required: ['id', 'name', 'ok'],
    additionalProperties: false,
  },
  minItems: 40,
};

function fiftyProperties(salt: number): Record<string, unknown> {
  const properties: Record<string, unknown> = {};
  for (let i = 0; i < 50; i += 1) {
    properties[`field_${salt}_${i}`] = [
      { type: 'string', maxLength: 16 },
      { type: 'integer', minimum: 0, maximum: 100000 },
      { type: 'boolean' },
      { enum: ['low', 'mid', 'high'] },
      { type: 'number' },
    ][i % 5];
  }
  return {
    type: 'object',
    properties,
    required: Object.keys(properties).filter((_, i) => i % 3 !== 0),
    additionalProperties: false,
  };
}

const model = which === 'smollm2' ? SMOLLM2_BASE_MODEL.id : 'test/qwen3';
const folder = which === 'smollm2' ? SMOLLM2_BASE_MODEL.path : writeFamilyModel('qwen3', { seed: 1 });
const e2e = await startE2eServer({ env: { BASE_MODELS: `${model}=${folder}` } });
const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)} MiB`;
try {
  const engine = e2e.server.services.runtime.sampler();
  await e2e.server.services.runtime.load(model);
  const messages = [{ role: 'user', content: 'List the items as JSON.' }];
  const call = async (body: Record<string, unknown>) => {
    const response = await fetch(`${e2e.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages, logprobs: false, ...body }),
    });
    const answer = (await response.json()) as {
      usage: { completion_tokens: number };
      choices: { finish_reason: string }[];
      error?: unknown;
    };
    if (!response.ok) throw new Error(JSON.stringify(answer));
    return answer;
  };
  const request = async (constrained: boolean, seed: number) => {
    const answer = await call({
      max_tokens: TOKENS,
      seed,
      ...(constrained
        ? { response_format: { type: 'json_schema', json_schema: { name: 'items', schema: LONG_SCHEMA } } }
        : { ignore_eos: true }),
    });
    if (answer.choices[0].finish_reason !== 'length')
      throw new Error('a row stopped early: the comparison needs equal lengths');
    return answer.usage.completion_tokens;
  };
  /** Tokens per second of one batch with `constrained` of its BATCH rows under the schema. */
  const batch = async (constrained: number, seedBase: number) => {
    const started = performance.now();
    const tokens = await Promise.all(Array.from({ length: BATCH }, (_, i) => request(i < constrained, seedBase + i)));
    return tokens.reduce((a, b) => a + b, 0) / ((performance.now() - started) / 1000);
  };
  const timed = async (body: Record<string, unknown>) => {
    const started = performance.now();
    await call({ max_tokens: 1, ...body });
    return performance.now() - started;
  };

  await batch(0, 0); // warm the engine's batch shapes
  const rssFree = (await engine.request('stats', {})).rss_bytes;
  // Compile time: a first request with a new schema minus the same request again (compiled, cached).
  const first: number[] = [];
  const again: number[] = [];
  for (let salt = 1; salt <= 5; salt += 1) {
    const format = {
      response_format: { type: 'json_schema', json_schema: { name: 'f', schema: fiftyProperties(salt) } },
    };
    first.push(await timed(format));
    again.push(await timed(format));
  }
  console.log(
    `${model}: 50-property schema, first request ${median(first).toFixed(1)} ms, repeated ${median(again).toFixed(1)} ms: compile ≈ ${(median(first) - median(again)).toFixed(1)} ms (medians of 5)`,
  );

  await request(true, 0); // the long schema compiled before any timing
  const cold = await batch(BATCH, 1000);
  const free: number[] = [];
  const half: number[] = [];
  const all: number[] = [];
  for (let round = 0; round < ROUNDS; round += 1) {
    // Interleaved, so that load from other processes hits every configuration alike.
    free.push(await batch(0, round * 100));
    half.push(await batch(BATCH / 2, round * 100 + 1000));
    all.push(await batch(BATCH, round * 100 + 2000));
  }
  const rssAfter = (await engine.request('stats', {})).rss_bytes;
  const base = median(free);
  const perToken = (1 / median(all) - 1 / base) * 1000;
  console.log(
    `decode throughput, batch of ${BATCH} × ${TOKENS} tokens (median of ${ROUNDS}): free ${base.toFixed(0)} tokens/s`,
  );
  console.log(
    `  half under a JSON schema ${median(half).toFixed(0)} tokens/s, ratio ${(median(half) / base).toFixed(2)} (goal ≥ 0.8)`,
  );
  console.log(
    `  all under a JSON schema  ${median(all).toFixed(0)} tokens/s, ratio ${(median(all) / base).toFixed(2)}; first constrained batch ${cold.toFixed(0)} tokens/s, ratio ${(cold / base).toFixed(2)}`,
  );
  console.log(`  mask cost per constrained token ≈ ${perToken.toFixed(2)} ms (step time over free, per row)`);
  console.log(
    `engine memory: ${mib(rssFree)} after free decoding, ${mib(rssAfter)} after the constrained runs (+${mib(rssAfter - rssFree)})`,
  );
} finally {
  await e2e.close();
}
