/**
 * Structured outputs end to end, through the `openai` npm client against the real server, engine and tiny
 * model: JSON schemas (nested objects, arrays, enums, numbers, patterns and formats, optional fields,
 * anyOf) over many seeds, every output parsed and checked with Ajv; json_object; regex and choice; the
 * SDK's parse() helper; streaming; forced tool calls (required and named) whose arguments validate; the
 * budget ending inside a constraint; constrained and free requests sharing a batch; constraints after an
 * engine restart; a Lark grammar, a recursive schema and a structural tag at temperature 1; and every refusal with
 * its status and `param`. The tiny model was never taught JSON, so only validity is asserted.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import OpenAI from 'openai';
import { layoutBreaks } from './helpers/json-layout.ts';
import { waitFor } from './helpers/poll.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const BASE = 'builtin/tiny-chat';
const HI = [{ role: 'user', content: 'Describe something as JSON.' }];
const ajv = new Ajv2020({ strict: false });
addFormatsModule.default(ajv);

/**
 * Strings and numbers are bounded: the tiny model was never taught JSON, seldom chooses a closing quote on its
 * own, and (pretrained on sums) readily fills a budget with digits, which llguidance, like vLLM, does not cap.
 */
const SCHEMAS: Record<string, Record<string, unknown>> = {
  nested: {
    type: 'object',
    properties: {
      user: {
        type: 'object',
        properties: { name: { type: 'string', maxLength: 8 }, age: { type: 'integer', minimum: 0, maximum: 120 } },
        required: ['name', 'age'],
        additionalProperties: false,
      },
      active: { type: 'boolean' },
    },
    required: ['user', 'active'],
    additionalProperties: false,
  },
  arrays: {
    type: 'object',
    properties: {
      scores: {
        type: 'array',
        items: { type: 'number', minimum: 0, maximum: 10, multipleOf: 0.25 },
        minItems: 1,
        maxItems: 4,
      },
      ids: { type: 'array', items: { type: 'integer', minimum: -999, maximum: 999 }, maxItems: 3 },
    },
    required: ['scores', 'ids'],
    additionalProperties: false,
  },
  enums: {
    type: 'object',
    properties: { color: { enum: ['red', 'green', 'blue'] }, size: { enum: [1, 2, 3, null] }, unit: { const: 'cm' } },
    required: ['color', 'size', 'unit'],
    additionalProperties: false,
  },
  patterns: {
    type: 'object',
    properties: {
      code: { type: 'string', pattern: '^[A-Z]{2}-\\d{3}$' },
      day: { type: 'string', format: 'date' },
      id: { type: 'string', format: 'uuid' },
    },
    required: ['code', 'day', 'id'],
    additionalProperties: false,
  },
  optional: {
    type: 'object',
    properties: {
      a: { type: 'integer', minimum: 0, maximum: 99999 },
      b: { type: 'string', maxLength: 5 },
      c: { type: 'boolean' },
      d: { type: 'null' },
      e: { type: 'number', exclusiveMinimum: 0, maximum: 1, multipleOf: 0.125 },
    },
    required: ['c'],
    additionalProperties: false,
  },
  shapes: {
    anyOf: [
      {
        type: 'object',
        properties: { kind: { const: 'circle' }, r: { type: 'number', minimum: 0, maximum: 100, multipleOf: 0.5 } },
        required: ['kind', 'r'],
        additionalProperties: false,
      },
      {
        type: 'object',
        properties: { kind: { const: 'square' }, side: { type: 'integer', minimum: 1, maximum: 9 } },
        required: ['kind', 'side'],
        additionalProperties: false,
      },
    ],
  },
};

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 10 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
      required: ['city'],
      additionalProperties: false,
    },
  },
};
const ALERT = {
  type: 'function',
  function: {
    name: 'set_alert',
    parameters: {
      type: 'object',
      properties: { level: { enum: ['low', 'high'] }, at: { type: 'string', format: 'date' } },
      required: ['level', 'at'],
      additionalProperties: false,
    },
  },
};
const TOOL_SCHEMAS: Record<string, unknown> = {
  get_weather: WEATHER.function.parameters,
  set_alert: ALERT.function.parameters,
};

/** Arithmetic over 1-3 digit numbers with + - * / and parentheses, as a Lark grammar (true recursion through factor). */
const ARITHMETIC = [
  'start: expr',
  'expr: term (("+" | "-") term)*',
  'term: factor (("*" | "/") factor)*',
  'factor: NUMBER | "(" expr ")"',
  'NUMBER: /[0-9]{1,3}/',
  '',
].join('\n');

/** Parses `text` as the arithmetic grammar does (whole text); answers its value, or throws where it stops parsing. */
function evaluate(text: string): number {
  let at = 0;
  const fail = (): never => {
    throw new Error(`not arithmetic at ${at}: ${JSON.stringify(text)}`);
  };
  const factor = (): number => {
    if (text[at] === '(') {
      at += 1;
      const value = expr();
      if (text[at++] !== ')') fail();
      return value;
    }
    const digits = /^[0-9]{1,3}/.exec(text.slice(at))?.[0] ?? fail();
    at += digits.length;
    return Number(digits);
  };
  const chain = (operand: () => number, ops: string): number => {
    let value = operand();
    while (at < text.length && ops.includes(text[at])) {
      const op = text[at++];
      const right = operand();
      value = op === '+' ? value + right : op === '-' ? value - right : op === '*' ? value * right : value / right;
    }
    return value;
  };
  const expr = (): number => chain(() => chain(factor, '*/'), '+-');
  const value = expr();
  if (at !== text.length) fail();
  return value;
}

/** A tree of any depth through a recursive `$ref` (no unrolling): each node has a digit and up to two children. */
const TREE = {
  $defs: {
    node: {
      type: 'object',
      properties: {
        v: { type: 'integer', minimum: 0, maximum: 9 },
        kids: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 2 },
      },
      required: ['v', 'kids'],
      additionalProperties: false,
    },
  },
  $ref: '#/$defs/node',
};
const depth = (node: { kids: unknown[] }): number =>
  1 + Math.max(0, ...node.kids.map((kid) => depth(kid as { kids: unknown[] })));

/** The end (exclusive) of the JSON value at the start of `text`, by bracket balance outside strings; -1 when unclosed. */
function jsonEnd(text: string): number {
  let level = 0;
  let inString = false;
  for (let at = 0; at < text.length; at += 1) {
    const character = text[at];
    if (inString) {
      if (character === '\\') at += 1;
      else if (character === '"') inString = false;
    } else if (character === '"') inString = true;
    else if (character === '{' || character === '[') level += 1;
    else if ((character === '}' || character === ']') && --level === 0) return at + 1;
  }
  return -1;
}

function validate(schema: unknown, text: string, what: string): unknown {
  let value: unknown;
  assert.doesNotThrow(() => (value = JSON.parse(text)), `${what}: not JSON: ${JSON.stringify(text)}`);
  assert.ok(ajv.validate(schema as object, value), `${what}: ${ajv.errorsText()} in ${text}`);
  return value;
}

describe('structured outputs through the openai client', () => {
  let e2e: E2eServer;
  let client: OpenAI;
  /** Untyped create: vLLM's structured_outputs and other extensions are not in the SDK's types. */
  const create = (body: Record<string, unknown>): Promise<any> =>
    client.chat.completions.create({ model: BASE, messages: HI, ...body } as never) as Promise<any>;

  before(async () => {
    e2e = await startE2eServer();
    client = new OpenAI({ baseURL: `${e2e.url}/v1`, apiKey: e2e.key, maxRetries: 0 });
  });
  after(async () => {
    await e2e?.close();
  });

  test('json_schema: every output of every schema, seed and whitespace mode parses and validates (Ajv)', async () => {
    const runs = Object.entries(SCHEMAS).flatMap(([name, schema]) =>
      [1, 2].map(async (seed) => {
        // Odd seeds: response_format with strict; even: structured_outputs.json without any whitespace.
        const body =
          seed % 2 === 1
            ? { response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } } }
            : { structured_outputs: { json: JSON.stringify(schema), disable_any_whitespace: true } };
        // Room for every digit run at its bound, which the tiny model (pretrained on sums) readily fills.
        const response = await create({ ...body, n: 4, seed, max_tokens: 600 });
        return { name, seed, schema, response };
      }),
    );
    let outputs = 0;
    for (const { name, seed, schema, response } of await Promise.all(runs)) {
      for (const choice of response.choices) {
        const what = `${name} seed ${seed} choice ${choice.index}`;
        assert.equal(choice.finish_reason, 'stop', `${what} ran out of budget: ${choice.message.content}`);
        validate(schema, choice.message.content, what);
        // The documented layout on both paths (the default, and disable_any_whitespace): json.dumps' separators.
        assert.deepEqual(layoutBreaks(choice.message.content), [], `${what}: json.dumps layout`);
        assert.ok(
          choice.logprobs.content.every((entry: any) => entry.logprob <= 0),
          `${what}: the model's own logprobs`,
        );
        outputs += 1;
      }
    }
    assert.equal(outputs, Object.keys(SCHEMAS).length * 2 * 4);
  });

  test('json_object: outputs that finish are JSON objects; regex and choice outputs match', async () => {
    const [object, regex, choice] = await Promise.all([
      // Keys are free strings here, which the tiny model seldom closes: some answers run out of budget.
      create({ response_format: { type: 'json_object' }, n: 6, seed: 3, max_tokens: 300 }),
      create({
        structured_outputs: { regex: '(?:[a-z]{2,6}\\.){1,2}(?:com|org)|\\d{3}-\\d{4}' },
        n: 4,
        seed: 4,
        max_tokens: 40,
      }),
      create({ structured_outputs: { choice: ['yes', 'no', 'maybe not', 'né 中'] }, n: 6, seed: 5, max_tokens: 20 }),
    ]);
    // llguidance, like vLLM, bounds neither free keys nor digit runs: the tiny model may fill the budget inside one.
    for (const c of object.choices) {
      assert.ok(c.message.content.startsWith('{'), c.message.content);
      if (c.finish_reason === 'stop') {
        const value = JSON.parse(c.message.content);
        assert.ok(value !== null && typeof value === 'object' && !Array.isArray(value), c.message.content);
      } else {
        assert.equal(c.finish_reason, 'length');
      }
    }
    for (const c of regex.choices) {
      assert.equal(c.finish_reason, 'stop');
      assert.match(c.message.content, /^(?:(?:[a-z]{2,6}\.){1,2}(?:com|org)|\d{3}-\d{4})$/);
    }
    for (const c of choice.choices) {
      assert.equal(c.finish_reason, 'stop');
      assert.ok(['yes', 'no', 'maybe not', 'né 中'].includes(c.message.content), c.message.content);
    }
  });

  test("the SDK's parse() helper returns the parsed object of a json_schema response_format", async () => {
    const schema = SCHEMAS.nested;
    const completion = await client.chat.completions.parse({
      model: BASE,
      messages: HI as OpenAI.ChatCompletionMessageParam[],
      max_tokens: 200,
      seed: 11,
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } },
    });
    const message = completion.choices[0].message;
    assert.equal(completion.choices[0].finish_reason, 'stop');
    assert.deepEqual(message.parsed, JSON.parse(message.content!));
    assert.ok(ajv.validate(schema, message.parsed), ajv.errorsText());
  });

  test('streaming: the deltas of a constrained answer join into a valid document', async () => {
    const schema = SCHEMAS.enums;
    const stream = await client.chat.completions.create({
      model: BASE,
      messages: HI as OpenAI.ChatCompletionMessageParam[],
      max_tokens: 120,
      seed: 6,
      stream: true,
      response_format: { type: 'json_schema', json_schema: { name: 'e', schema } },
    });
    let text = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(finish, 'stop');
    validate(schema, text, 'streamed');
  });

  test('tool_choice "required" forces Hermes tool calls whose arguments validate against their tool', async () => {
    const [single, several] = await Promise.all([
      create({
        tools: [WEATHER, ALERT],
        tool_choice: 'required',
        parallel_tool_calls: false,
        n: 4,
        seed: 7,
        max_tokens: 160,
      }),
      create({ tools: [WEATHER, ALERT], tool_choice: 'required', n: 2, seed: 8, max_tokens: 300 }),
    ]);
    for (const choice of [...single.choices, ...several.choices]) {
      assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice.message));
      assert.equal(choice.message.content, null);
      assert.ok(choice.message.tool_calls.length >= 1);
      for (const call of choice.message.tool_calls) {
        assert.match(call.id, /^chatcmpl-tool-[0-9a-f]{16}$/);
        assert.ok(call.function.name in TOOL_SCHEMAS, call.function.name);
        validate(TOOL_SCHEMAS[call.function.name], call.function.arguments, call.function.name);
      }
    }
    for (const choice of single.choices) assert.equal(choice.message.tool_calls.length, 1);
  });

  test('a named function is always the one called; finish_reason stays "stop", streamed or not', async () => {
    const named = { type: 'function', function: { name: 'set_alert' } };
    const whole = await create({ tools: [WEATHER, ALERT], tool_choice: named, n: 4, seed: 9, max_tokens: 120 });
    for (const choice of whole.choices) {
      assert.equal(choice.finish_reason, 'stop');
      assert.equal(choice.message.tool_calls.length, 1);
      assert.equal(choice.message.tool_calls[0].function.name, 'set_alert');
      validate(ALERT.function.parameters, choice.message.tool_calls[0].function.arguments, 'named');
    }
    const stream = await client.chat.completions.create({
      model: BASE,
      messages: HI as never,
      tools: [WEATHER, ALERT] as never,
      tool_choice: named as never,
      seed: 9,
      max_tokens: 120,
      stream: true,
    });
    const calls: { name?: string; arguments: string }[] = [];
    let finish: string | null = null;
    for await (const chunk of stream) {
      for (const delta of chunk.choices[0]?.delta?.tool_calls ?? []) {
        calls[delta.index] ??= { arguments: '' };
        if (delta.function?.name) calls[delta.index].name = delta.function.name;
        calls[delta.index].arguments += delta.function?.arguments ?? '';
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(finish, 'stop');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].name, 'set_alert');
    assert.deepEqual(
      JSON.parse(calls[0].arguments),
      JSON.parse(whole.choices[0].message.tool_calls[0].function.arguments),
    );
  });

  test('a budget that ends inside the constraint finishes with "length"', async () => {
    const response = await create({
      response_format: { type: 'json_schema', json_schema: { name: 'n', schema: SCHEMAS.nested } },
      max_tokens: 3,
      seed: 1,
    });
    const [choice] = response.choices;
    assert.equal(choice.finish_reason, 'length');
    assert.equal(response.usage.completion_tokens, 3);
    assert.throws(() => JSON.parse(choice.message.content));
    assert.ok(choice.message.content.startsWith('{'));
  });

  test('constrained and free requests share the batch; the free one samples exactly as it does alone', async () => {
    const free = { seed: 21, max_tokens: 24, ignore_eos: true, logprobs: true };
    const alone = await create(free);
    const [together] = await Promise.all([
      create(free),
      create({
        response_format: { type: 'json_schema', json_schema: { name: 'a', schema: SCHEMAS.arrays } },
        n: 3,
        seed: 22,
        max_tokens: 200,
      }),
      create({ structured_outputs: { regex: '[0-9]{20}' }, seed: 23, max_tokens: 40 }),
    ]);
    assert.equal(together.choices[0].message.content, alone.choices[0].message.content);
    assert.deepEqual(
      together.choices[0].logprobs.content.map((entry: any) => entry.token),
      alone.choices[0].logprobs.content.map((entry: any) => entry.token),
    );
  });

  test('after an engine restart constraints still work: the replayed load_base carries the token bytes', async () => {
    const supervisor = e2e.server.supervisor ?? assert.fail('no supervisor');
    const pid = supervisor.health().pid ?? assert.fail('no engine pid');
    process.kill(pid, 'SIGKILL');
    await waitFor('the engine to restart', () => supervisor.health().pid !== pid, {
      timeoutMs: 60_000,
      intervalMs: 20,
    });
    await supervisor.waitUntilReady();
    const response = await create({ structured_outputs: { choice: ['alpha', 'beta'] }, n: 2, seed: 2, max_tokens: 10 });
    for (const choice of response.choices)
      assert.ok(['alpha', 'beta'].includes(choice.message.content), choice.message.content);
  });

  test('a Lark grammar (arithmetic expressions): every output at temperature 1 parses, over several seeds', async () => {
    const runs = await Promise.all(
      [1, 2, 3].map((seed) =>
        create({ structured_outputs: { grammar: ARITHMETIC }, n: 4, seed, temperature: 1, max_tokens: 200 }),
      ),
    );
    const outputs = runs.flatMap((run) => run.choices);
    for (const choice of outputs) {
      assert.equal(choice.finish_reason, 'stop', choice.message.content);
      assert.ok(
        Number.isFinite(evaluate(choice.message.content)) || /\/0/.test(choice.message.content),
        choice.message.content,
      );
    }
    assert.equal(outputs.length, 12);
  });

  test('a recursive schema ($ref, no unrolling): trees validate at temperature 1 and reach 6 levels deep', async () => {
    // The tiny model would nest forever: a bias against opening braces makes it close most trees within the budget.
    const tokenizer = (await e2e.server.services.runtime.load(BASE)).tokenizer;
    const opening = Array.from({ length: tokenizer.vocabSize }, (_, id) => id).filter((id) =>
      new TextDecoder().decode(tokenizer.tokenBytes(id) ?? new Uint8Array()).includes('{'),
    );
    const logit_bias = Object.fromEntries(opening.map((id) => [id, -10]));
    const runs = await Promise.all(
      [1, 2, 3].map((seed) =>
        create({
          structured_outputs: { json: TREE, disable_any_whitespace: true },
          logit_bias,
          n: 4,
          seed,
          temperature: 1,
          max_tokens: 1000,
        }),
      ),
    );
    const depths = runs.flatMap((run) =>
      run.choices.map((choice: any) => {
        assert.equal(choice.finish_reason, 'stop', choice.message.content);
        return depth(validate(TREE, choice.message.content, 'tree') as { kids: unknown[] });
      }),
    );
    assert.ok(Math.max(...depths) >= 6, `depths ${depths}`);
  });

  test('a structural tag: free text, and after each trigger JSON of its schema, over several seeds', async () => {
    const begin = '<tool_call>\n{"name": "get_weather", "arguments": ';
    const tag = {
      type: 'structural_tag',
      triggers: ['<tool_call>'],
      structures: [{ begin, schema: WEATHER.function.parameters, end: '}\n' }],
    };
    const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const runs = await Promise.all(
      [1, 2, 3].map((seed) =>
        create({
          messages,
          tools: [WEATHER],
          tool_choice: 'none',
          response_format: tag,
          n: 4,
          seed,
          temperature: 1,
          max_tokens: 60,
        }),
      ),
    );
    let tagged = 0;
    for (const choice of runs.flatMap((run) => run.choices)) {
      const pieces = choice.message.content.split(begin).slice(1);
      pieces.forEach((piece: string, i: number) => {
        const end = jsonEnd(piece);
        if (end === -1 && i === pieces.length - 1 && choice.finish_reason === 'length') return; // cut by the budget
        validate(WEATHER.function.parameters, piece.slice(0, end), 'tagged arguments');
        if (end < piece.length || choice.finish_reason === 'stop') assert.ok(piece.slice(end).startsWith('}\n'), piece);
        tagged += 1;
      });
    }
    assert.ok(tagged > 0, 'the model opened at least one tag');
  });

  test("refusals: 400 naming the field, the feature, or vLLM's rule", async () => {
    const cases: [string, Record<string, unknown>, string, RegExp][] = [
      [
        'invalid regex',
        { structured_outputs: { regex: '(ab' } },
        'structured_outputs',
        /invalid regex[\s\S]*unclosed group/,
      ],
      [
        'lookahead',
        { structured_outputs: { regex: 'a(?=b)' } },
        'structured_outputs',
        /look-around.* is not supported/,
      ],
      [
        'invalid schema',
        { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'strange' } } } },
        'response_format',
        /Invalid type: strange/,
      ],
      [
        'unsupported keyword',
        {
          response_format: {
            type: 'json_schema',
            json_schema: { name: 'x', schema: { type: 'string', not: { const: 'a' } } },
          },
        },
        'response_format',
        /Unimplemented keys: \["not"\]/,
      ],
      [
        'grammar with an undefined rule',
        { structured_outputs: { grammar: 'start: item\nitems: "a"' } },
        'structured_outputs',
        /unknown name: "item"/,
      ],
      ['empty grammar', { structured_outputs: { grammar: ' ' } }, 'structured_outputs', /non-empty grammar/],
      [
        'two kinds',
        { structured_outputs: { regex: 'a', choice: ['a'] } },
        'structured_outputs',
        /only use one kind of constraints/,
      ],
      [
        'response_format and structured_outputs',
        { response_format: { type: 'json_object' }, structured_outputs: { choice: ['a'] } },
        'structured_outputs',
        /multiple are specified/,
      ],
      [
        'json_schema without schema',
        { response_format: { type: 'json_schema' } },
        'response_format',
        /'json_schema' field must be provided/,
      ],
      [
        'named tool with structured outputs',
        {
          tools: [WEATHER],
          tool_choice: { type: 'function', function: { name: 'get_weather' } },
          response_format: { type: 'json_object' },
        },
        'response_format',
        /either use constraints for structured outputs or tools/,
      ],
      [
        'tool parameters unsupported',
        {
          tools: [
            {
              type: 'function',
              function: {
                name: 'f',
                parameters: { type: 'object', properties: { x: { type: 'string', not: { const: 'a' } } } },
              },
            },
          ],
          tool_choice: 'required',
        },
        'tools',
        /the tool parameters: .*Unimplemented keys: \["not"\]/,
      ],
      [
        'structural tag begin without its trigger',
        {
          response_format: {
            type: 'structural_tag',
            triggers: ['<f='],
            structures: [{ begin: '<g>', schema: {}, end: '</g>' }],
          },
        },
        'response_format',
        /starts with none of the triggers/,
      ],
      [
        "structural tag in xgrammar's format shape",
        { response_format: { type: 'structural_tag', format: { type: 'const_string', value: 'a' } } },
        'response_format',
        /`format`.* not supported/,
      ],
    ];
    for (const [name, body, param, message] of cases) {
      const response = await e2e.api('POST', '/v1/chat/completions', {
        model: BASE,
        messages: HI,
        max_tokens: 4,
        ...body,
      });
      assert.equal(response.status, 400, `${name}: ${JSON.stringify(response.body)}`);
      assert.equal(response.body.error.param, param, name);
      assert.match(response.body.error.message, message, name);
    }
  });
});
