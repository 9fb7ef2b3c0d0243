/**
 * Forced tool calls and structured outputs on real families' tokenizers (random-weight Qwen3, Qwen2.5 and Llama 3.1
 * folders with their real 151k and 128k vocabularies), over HTTP through the `openai` client, at temperature 1
 * over several seeds: with random weights the model picks almost uniformly among what the grammar allows, so
 * every output exercises the grammar's whole reach. Every forced call (required, parallel or not; named) is
 * written in the family's format, parses back, and validates against its tool (Ajv); a recursive JSON schema
 * validates too. Near-uniform choices are also the worst case for whitespace: thousands of whitespace tokens
 * against the one the grammar needs next, so a forced call within 80 tokens over ten seeds, and arguments laid
 * out by the documented rule, show that the default layout leaves the model no whitespace to wander into.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Ajv2020 } from 'ajv/dist/2020.js';
import OpenAI from 'openai';
import { baseModelsSetting, writeFamilyModel } from './helpers/families.ts';
import { layoutBreaks } from './helpers/json-layout.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const ajv = new Ajv2020({ strict: false });
/** Strings are short and numbers bounded, so that near-uniform choices finish within the budget. */
const BOOK = {
  type: 'function' as const,
  function: {
    name: 'book_table',
    parameters: {
      type: 'object',
      properties: {
        city: { enum: ['Paris', 'Oslo', 'Lima'] },
        seats: { type: 'integer', minimum: 1, maximum: 12 },
        terrace: { type: 'boolean' },
        note: { type: 'string', maxLength: 6 },
      },
      required: ['city', 'seats', 'terrace'],
      additionalProperties: false,
    },
  },
};
const CANCEL = {
  type: 'function' as const,
  function: {
    name: 'cancel',
    parameters: {
      type: 'object',
      properties: { code: { type: 'string', pattern: '^[A-Z]{3}[0-9]{2}$' } },
      required: ['code'],
      additionalProperties: false,
    },
  },
};
const SCHEMAS: Record<string, unknown> = { book_table: BOOK.function.parameters, cancel: CANCEL.function.parameters };
const SEEDS = [1, 2, 3];

describe('real families: forced tool calls and structured outputs at temperature 1', () => {
  let e2e: E2eServer;
  let client: OpenAI;
  const create = (body: Record<string, unknown>): Promise<any> =>
    client.chat.completions.create({
      messages: [{ role: 'user', content: 'Book a table, or cancel one.' }],
      temperature: 1,
      max_tokens: 120,
      ...body,
    } as never) as Promise<any>;

  before(async () => {
    const qwen3 = writeFamilyModel('qwen3', { seed: 5 });
    const qwen25 = writeFamilyModel('qwen2.5', { seed: 7 });
    const llama = writeFamilyModel('llama3.1', { seed: 6 });
    e2e = await startE2eServer({
      env: { BASE_MODELS: baseModelsSetting({ qwen3, 'qwen2.5': qwen25, 'llama3.1': llama }) },
    });
    client = new OpenAI({ baseURL: `${e2e.url}/v1`, apiKey: e2e.key, maxRetries: 0 });
  });
  after(async () => {
    await e2e?.close();
  });

  test('a forced call within 80 tokens parses in every one of 10 seeds on each family, its arguments compact', async () => {
    const models = ['test/qwen3', 'test/qwen2.5', 'test/llama3.1'];
    const seeds = Array.from({ length: 10 }, (_, i) => 100 + i);
    const runs = await Promise.all(
      models.flatMap((model) =>
        seeds.map(async (seed) => ({
          model,
          seed,
          run: await create({
            model,
            tools: [BOOK, CANCEL],
            tool_choice: 'required',
            parallel_tool_calls: false,
            max_tokens: 80,
            seed,
          }),
        })),
      ),
    );
    for (const { model, seed, run } of runs) {
      const [choice] = run.choices;
      const what = `${model} seed ${seed}: ${JSON.stringify(choice.message)} (${choice.finish_reason})`;
      assert.equal(choice.message.tool_calls?.length, 1, what);
      const [call] = choice.message.tool_calls;
      assert.ok(ajv.validate(SCHEMAS[call.function.name] as object, JSON.parse(call.function.arguments)), what);
      assert.deepEqual(layoutBreaks(call.function.arguments), [], what);
    }
  });

  for (const model of ['test/qwen3', 'test/llama3.1']) {
    test(`${model}: forced calls (required, parallel or not, and named) parse in the family's format and validate`, async () => {
      const runs = await Promise.all(
        SEEDS.flatMap((seed) => [
          create({ model, tools: [BOOK, CANCEL], tool_choice: 'required', parallel_tool_calls: false, n: 2, seed }),
          create({ model, tools: [BOOK, CANCEL], tool_choice: 'required', n: 2, seed: seed + 10, max_tokens: 240 }),
          create({
            model,
            tools: [BOOK, CANCEL],
            tool_choice: { type: 'function', function: { name: 'book_table' } },
            n: 2,
            seed: seed + 20,
          }),
        ]),
      );
      let calls = 0;
      runs.forEach((run, i) => {
        for (const choice of run.choices) {
          const what = `${model} run ${i} choice ${choice.index}: ${JSON.stringify(choice.message)}`;
          assert.equal(choice.message.content, null, what);
          assert.ok(choice.message.tool_calls.length >= 1, what);
          if (i % 3 !== 1) assert.equal(choice.message.tool_calls.length, 1, what);
          if (i % 3 === 2) assert.equal(choice.finish_reason, 'stop', what);
          for (const call of choice.message.tool_calls) {
            if (i % 3 === 2) assert.equal(call.function.name, 'book_table', what);
            const args = JSON.parse(call.function.arguments);
            assert.ok(ajv.validate(SCHEMAS[call.function.name] as object, args), `${what}: ${ajv.errorsText()}`);
            calls += 1;
          }
        }
      });
      assert.ok(calls >= SEEDS.length * 3 * 2);
    });

    test(`${model}: a recursive schema's outputs validate`, async () => {
      const list = {
        $defs: {
          item: {
            type: 'object',
            properties: { v: { enum: [1, 2] }, next: { anyOf: [{ type: 'null' }, { $ref: '#/$defs/item' }] } },
            required: ['v', 'next'],
            additionalProperties: false,
          },
        },
        $ref: '#/$defs/item',
      };
      const runs = await Promise.all(
        SEEDS.map((seed) =>
          create({
            model,
            response_format: { type: 'json_schema', json_schema: { name: 'list', schema: list } },
            structured_outputs: { disable_any_whitespace: true },
            n: 2,
            seed,
            max_tokens: 300,
          }),
        ),
      );
      let finished = 0;
      for (const choice of runs.flatMap((run) => run.choices)) {
        if (choice.finish_reason === 'length') continue; // a chain that random choices kept extending
        assert.ok(
          ajv.validate(list, JSON.parse(choice.message.content)),
          `${choice.message.content}: ${ajv.errorsText()}`,
        );
        finished += 1;
      }
      assert.ok(finished >= SEEDS.length, `${finished} chains closed`);
    });
  }
});
