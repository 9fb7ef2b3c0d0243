/**
 * Prompts for real model families are exactly what the models were trained on: a corpus of conversations
 * (tools, null content, content parts, reasoning, enable_thinking false, multi-turn tool loops, system prompts,
 * continue_final_message) sent to our server for random-weight Qwen3, Qwen2.5 and Llama 3.1 folders with the
 * real tokenizers and templates gives the same prompt token ids as transformers' apply_chat_template after
 * vLLM's message preprocessing; where the reference refuses a conversation, the server answers 400 quoting why.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { baseModelsSetting, FAMILIES, type Family, writeFamilyModel } from './helpers/families.ts';
import { NO_REFERENCE, type RenderCase, referenceRender } from './helpers/reference.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city — "quoted", ünïcode 天气.',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', description: 'City name' }, days: { type: 'integer' } },
      required: ['city'],
    },
  },
};
const TIME = {
  type: 'function',
  function: {
    name: 'get_time',
    description: 'Local time.',
    parameters: { type: 'object', properties: { zone: { type: 'string' } } },
  },
};
const call = (id: string, name: string, args: unknown) => ({
  id,
  type: 'function',
  function: { name, arguments: args },
});
const USER = { role: 'user', content: 'What is the weather in Paris? 🌧 héllo' };
const SYSTEM = { role: 'system', content: 'You are terse.\nAnswer in French.' };
const CALLED = {
  role: 'assistant',
  content: null,
  tool_calls: [call('call_1', 'get_weather', '{"city": "Paris", "days": 2}')],
};
const RESULT = { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 21, "sky": "clear"}' };

const CORPUS: Record<string, RenderCase> = {
  'one user message': { messages: [USER] },
  'system prompt': { messages: [SYSTEM, USER] },
  'tools, system prompt': { messages: [SYSTEM, USER], tools: [WEATHER, TIME] },
  'tools without a system prompt': { messages: [USER], tools: [WEATHER] },
  'agent loop: null content + tool_calls, tool result, answer, next question': {
    messages: [
      SYSTEM,
      USER,
      CALLED,
      RESULT,
      { role: 'assistant', content: 'Il fait 21 °C.' },
      { role: 'user', content: 'And tomorrow?' },
    ],
    tools: [WEATHER, TIME],
  },
  'agent loop, second turn (our own response sent back)': { messages: [USER, CALLED, RESULT], tools: [WEATHER] },
  'arguments already an object, and an empty string': {
    messages: [
      USER,
      { role: 'assistant', content: '', tool_calls: [call('c', 'get_weather', { city: 'Oslo' })] },
      { role: 'tool', tool_call_id: 'c', content: 'cold' },
      { role: 'user', content: 'time?' },
      { role: 'assistant', content: null, tool_calls: [call('d', 'get_time', '')] },
      { role: 'tool', tool_call_id: 'd', content: '12:00' },
    ],
    tools: [WEATHER, TIME],
  },
  'two parallel calls': {
    messages: [
      USER,
      {
        role: 'assistant',
        content: null,
        tool_calls: [call('a', 'get_weather', '{"city": "Paris"}'), call('b', 'get_time', '{"zone": "CET"}')],
      },
      { role: 'tool', tool_call_id: 'a', content: 'sunny' },
      { role: 'tool', tool_call_id: 'b', content: '10:00' },
    ],
    tools: [WEATHER, TIME],
  },
  'empty tool_calls is no calls': {
    messages: [USER, { role: 'assistant', content: 'Sunny.', tool_calls: [] }, { role: 'user', content: 'Thanks' }],
    tools: [WEATHER],
  },
  'content-part arrays': {
    messages: [
      { role: 'system', content: [{ type: 'text', text: 'Be brief.' }] },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'First line' },
          { type: 'text', text: 'second line' },
        ],
      },
    ],
  },
  'reasoning in an earlier turn and in the last one': {
    messages: [
      USER,
      { role: 'assistant', content: 'Sunny.', reasoning: 'Paris is usually sunny in June.' },
      { role: 'user', content: 'Sure?' },
      { role: 'assistant', content: 'Yes.', reasoning_content: 'I checked.' },
    ],
    add_generation_prompt: false,
  },
  'enable_thinking false': { messages: [SYSTEM, USER], chat_template_kwargs: { enable_thinking: false } },
  'enable_thinking false with tools and history': {
    messages: [USER, CALLED, RESULT, { role: 'assistant', content: 'Clear, 21.' }, { role: 'user', content: 'ok' }],
    tools: [WEATHER],
    chat_template_kwargs: { enable_thinking: false },
  },
  continue_final_message: {
    messages: [USER, { role: 'assistant', content: 'The weather is' }],
    add_generation_prompt: false,
    continue_final_message: true,
  },
  'continue_final_message with a trailing space': {
    messages: [SYSTEM, USER, { role: 'assistant', content: 'The weather is ' }],
    add_generation_prompt: false,
    continue_final_message: true,
  },
  'whole conversation without generation prompt': {
    messages: [SYSTEM, USER, { role: 'assistant', content: 'Sunny.' }],
    add_generation_prompt: false,
  },
};

describe('prompt rendering matches transformers for real families (skipped without the reference Python)', {
  skip: NO_REFERENCE,
}, () => {
  let e2e: E2eServer;
  const folders: Partial<Record<Family, string>> = {};

  before(async () => {
    for (const family of FAMILIES) folders[family] = writeFamilyModel(family);
    e2e = await startE2eServer({ env: { BASE_MODELS: baseModelsSetting(folders) } });
  });
  after(async () => {
    await e2e?.close();
  });

  for (const family of FAMILIES) {
    test(`${family}: every corpus conversation gives the reference's prompt token ids`, async () => {
      const names = Object.keys(CORPUS);
      const reference = referenceRender(folders[family]!, Object.values(CORPUS));
      let compared = 0;
      for (const [index, name] of names.entries()) {
        const expected = reference[index];
        const body = { model: `test/${family}`, max_tokens: 1, return_token_ids: true, ...CORPUS[name] };
        const response = await e2e.api('POST', '/v1/chat/completions', body);
        if (expected.error !== undefined) {
          assert.equal(
            response.status,
            400,
            `${family} / ${name}: the reference refuses (${expected.error}), so must we`,
          );
          const quoted = /: (.*)$/.exec(expected.error)![1];
          assert.ok(
            response.body.error.message.includes(quoted),
            `${family} / ${name}: ${response.body.error.message} quotes ${quoted}`,
          );
          continue;
        }
        assert.equal(response.status, 200, `${family} / ${name}: ${JSON.stringify(response.body)}`);
        assert.deepEqual(
          response.body.prompt_token_ids,
          expected.ids,
          `${family} / ${name}\nreference text: ${JSON.stringify(expected.text)}`,
        );
        compared += 1;
      }
      assert.ok(
        compared >= names.length - 1,
        `${family}: only ${compared} of ${names.length} conversations were renderable`,
      );
    });
  }

  test('messages a template cannot take are 400s naming the message and the cause', async () => {
    const cases: [string, Record<string, unknown>, RegExp][] = [
      [
        'test/llama3.1',
        { messages: CORPUS['two parallel calls'].messages, tools: [WEATHER, TIME] },
        /chat template failed to render: This model only supports single tool-calls at once!/,
      ],
      [
        'test/qwen3',
        {
          messages: [
            USER,
            { role: 'assistant', content: null, tool_calls: [call('x', 'get_weather', '{"city": Paris}')] },
          ],
        },
        /messages\[1\]\.tool_calls\[0\]\.function\.arguments is not valid JSON/,
      ],
      [
        'test/qwen2.5',
        {
          messages: [
            {
              role: 'user',
              content: [
                { type: 'text', text: 'hi' },
                { type: 'input_audio', input_audio: {} },
              ],
            },
          ],
        },
        /messages\.0\.content\.1: content parts of type "input_audio" are not supported/,
      ],
    ];
    for (const [model, body, cause] of cases) {
      const response = await e2e.api('POST', '/v1/chat/completions', { model, max_tokens: 1, ...body });
      assert.equal(response.status, 400, `${model}: ${JSON.stringify(response.body)}`);
      assert.match(response.body.error.message, cause);
      // A part is named exactly; anything else about a message names the messages.
      assert.equal(
        response.body.error.param,
        body.messages === undefined || !JSON.stringify(body).includes('input_audio')
          ? 'messages'
          : 'messages.0.content.1',
      );
    }
  });
});
