/**
 * Structured outputs: decode throughput of a batch of free requests vs the same batch with half, then all,
 * of its requests under a JSON-schema constraint (through the API, real engine, tiny model; goal ≥ 0.8),
 * with the engine's masks cold (first visit of each automaton state) and warm; and the compile time of a
 * 50-property schema, first vs cached, with its automaton's size and wire size. Prints figures; asserts nothing.
 * Usage: npx tsx bench/structured-outputs.ts
 */
import { clearConstraintCache, compileConstraint, type ConstraintSpec } from '../src/chat/constraints/compile.ts';
import { startE2eServer } from '../test/helpers/server.ts';

const BATCH = 16;
const TOKENS = 128;
const ROUNDS = 5;
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

/**
 * Every answer needs far more than TOKENS tokens, so constrained rows decode exactly as many as free ones.
 * minItems 40 unrolls 40 copies of the item, so a row keeps reaching states it has never visited: a hard case for the mask cache.
 */
const LONG_SCHEMA = {
  type: 'array',
  items: {
    type: 'object',
    properties: { id: { type: 'integer', minimum: 0, maximum: 999 }, name: { type: 'string', minLength: 3, maxLength: 10 }, ok: { type: 'boolean' } },
    required: ['id', 'name', 'ok'],
    additionalProperties: false,
  },
  minItems: 40,
};

function fiftyProperties(salt: number): ConstraintSpec {
  const properties: Record<string, unknown> = {};
  for (let i = 0; i < 50; i += 1) {
    properties[`field_${salt}_${i}`] = [{ type: 'string', maxLength: 16 }, { type: 'integer', minimum: 0, maximum: 100000 }, { type: 'boolean' }, { enum: ['low', 'mid', 'high'] }, { type: 'number' }][i % 5];
  }
  return { kind: 'json_schema', schema: { type: 'object', properties, required: Object.keys(properties).filter((_, i) => i % 3 !== 0), additionalProperties: false }, whitespace: { kind: 'flexible' }, noAdditionalProperties: false };
}

function compileTimes(): void {
  const time = (work: () => unknown) => {
    const started = performance.now();
    work();
    return performance.now() - started;
  };
  const veryFirst = time(() => compileConstraint(fiftyProperties(0)));
  const firsts: number[] = [];
  const cached: number[] = [];
  for (let salt = 1; salt <= 5; salt += 1) {
    clearConstraintCache();
    firsts.push(time(() => compileConstraint(fiftyProperties(salt))));
    for (let i = 0; i < 20; i += 1) cached.push(time(() => compileConstraint(fiftyProperties(salt))));
  }
  const { dfa, wire } = compileConstraint(fiftyProperties(5));
  console.log(
    `50-property schema compile: first ${median(firsts).toFixed(0)} ms (median of 5; the process's very first ${veryFirst.toFixed(0)} ms), ` +
      `cached ${(median(cached) * 1000).toFixed(0)} µs; automaton ${dfa.states} states × ${dfa.classCount} byte classes, ${(Buffer.byteLength(JSON.stringify(wire)) / 1024).toFixed(0)} kB on the wire`,
  );
}

compileTimes();
const e2e = await startE2eServer();
try {
  await e2e.server.services.runtime.load('builtin/tiny-chat');
  const messages = [{ role: 'user', content: 'List the items as JSON.' }];
  const request = async (constrained: boolean, seed: number, maxTokens = TOKENS) => {
    const body = {
      model: 'builtin/tiny-chat',
      messages,
      max_tokens: maxTokens,
      seed,
      logprobs: false,
      ...(constrained ? { response_format: { type: 'json_schema', json_schema: { name: 'items', schema: LONG_SCHEMA } } } : { ignore_eos: true }),
    };
    const response = await fetch(`${e2e.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const answer = (await response.json()) as { usage: { completion_tokens: number }; choices: { finish_reason: string }[] };
    if (answer.choices[0].finish_reason !== 'length') throw new Error('a row stopped early: the comparison needs equal lengths');
    return answer.usage.completion_tokens;
  };
  /** Tokens per second of one batch with `constrained` of its BATCH rows under the schema. */
  const batch = async (constrained: number, seedBase: number) => {
    const started = performance.now();
    const tokens = await Promise.all(Array.from({ length: BATCH }, (_, i) => request(i < constrained, seedBase + i)));
    return tokens.reduce((a, b) => a + b, 0) / ((performance.now() - started) / 1000);
  };

  await batch(0, 0); // warm the engine's batch shapes
  // Compiled by the server and built by the engine once, before any timing; then the first batch visits
  // the automaton's states for the first time and builds their masks.
  await request(true, 0, 1);
  const cold = await batch(BATCH, 1000);
  const free: number[] = [];
  const half: number[] = [];
  const all: number[] = [];
  for (let round = 0; round < ROUNDS; round += 1) {
    // Interleaved, so that load from other processes hits every configuration alike.
    free.push(await batch(0, round * 100));
    half.push(await batch(BATCH / 2, round * 100 + 1000));
    all.push(await batch(BATCH, round * 100 + 1000));
  }
  const base = median(free);
  console.log(`decode throughput, batch of ${BATCH} × ${TOKENS} tokens (median of ${ROUNDS}): free ${base.toFixed(0)} tokens/s`);
  console.log(`  half under a JSON schema ${median(half).toFixed(0)} tokens/s, ratio ${(median(half) / base).toFixed(2)} (goal ≥ 0.8)`);
  console.log(`  all under a JSON schema  ${median(all).toFixed(0)} tokens/s, ratio ${(median(all) / base).toFixed(2)} (masks warm); ${cold.toFixed(0)} tokens/s with cold masks, ratio ${(cold / base).toFixed(2)}`);
} finally {
  await e2e.close();
}
