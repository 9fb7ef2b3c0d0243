/**
 * Real families end to end over HTTP, through the `openai` npm client as a real agent would use it:
 * random-weight Qwen3 and Llama 3.1 folders with their real tokenizers and templates. A three-turn
 * tool-using loop (our responses sent back verbatim) completes, forced tool calls (required, named,
 * streamed) come back parsed in each family's own format, a per-base parser override (Mistral) is honoured, and the
 * Responses and Messages doors force calls in the same formats and render a tool loop into the prompt chat renders.
 * Tool arguments are enums so that random weights finish a forced call in a few tokens.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { loadTokenizer } from '../src/conversation/tokenizer.ts';
import { baseModelsSetting, writeFamilyModel } from './helpers/families.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const WEATHER = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'The weather in a city.',
    parameters: {
      type: 'object',
      properties: { city: { enum: ['Paris', 'Oslo'] } },
      required: ['city'],
      additionalProperties: false,
    },
  },
};
const TIME = {
  type: 'function' as const,
  function: {
    name: 'get_time',
    description: 'The local time.',
    parameters: { type: 'object', properties: {}, additionalProperties: false },
  },
};
const TOOLS = [WEATHER, TIME];
/** What each family's template writes for a call in the history, so the next prompt shows the call went back in. */
const RENDERED_CALL: Record<string, RegExp> = {
  'test/qwen3': /<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "(Paris|Oslo)"\}\}\n<\/tool_call>/,
  'test/llama3.1': /\{"name": "get_weather", "parameters": \{"city": "(Paris|Oslo)"\}\}<\|eot_id\|>/,
};

describe('real families over HTTP: agent loops and forced tool calls', () => {
  let e2e: E2eServer;
  let client: OpenAI;
  const folders: Record<string, string> = {};
  const create = (body: Record<string, unknown>): Promise<any> =>
    client.chat.completions.create({ max_tokens: 64, seed: 3, ...body } as never) as Promise<any>;

  before(async () => {
    const qwen3 = writeFamilyModel('qwen3', { seed: 1 });
    const llama = writeFamilyModel('llama3.1', { seed: 2 });
    Object.assign(folders, { 'test/qwen3': qwen3, 'test/llama3.1': llama });
    const bases = `${baseModelsSetting({ qwen3, 'llama3.1': llama })},test/llama3.1-mistral=${llama}`;
    e2e = await startE2eServer({ env: { BASE_MODELS: bases, TOOL_CALL_PARSERS: 'test/llama3.1-mistral=mistral' } });
    client = new OpenAI({ baseURL: `${e2e.url}/v1`, apiKey: e2e.key, maxRetries: 0 });
  });
  after(async () => {
    await e2e?.close();
  });

  for (const model of ['test/qwen3', 'test/llama3.1']) {
    test(`${model}: a three-turn tool-using loop with our responses sent back verbatim`, async () => {
      const messages: any[] = [
        { role: 'system', content: 'You are a weather assistant.' },
        { role: 'user', content: 'What is the weather, and what time is it?' },
      ];
      const first = await create({
        model,
        messages,
        tools: TOOLS,
        tool_choice: 'required',
        parallel_tool_calls: false,
      });
      const called = first.choices[0].message;
      assert.equal(first.choices[0].finish_reason, 'tool_calls');
      assert.equal(called.content, null);
      assert.equal(called.tool_calls.length, 1);
      assert.equal(
        called.tool_calls[0].function.name === 'get_weather' || called.tool_calls[0].function.name === 'get_time',
        true,
      );
      messages.push(called, { role: 'tool', tool_call_id: called.tool_calls[0].id, content: 'Sunny, 21 C' });

      const second = await create({
        model,
        messages,
        tools: TOOLS,
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
      });
      const weather = second.choices[0].message;
      assert.equal(second.choices[0].finish_reason, 'stop', 'a named call finishes with stop, as vLLM does');
      assert.equal(weather.tool_calls[0].function.name, 'get_weather');
      assert.match(JSON.parse(weather.tool_calls[0].function.arguments).city, /^(Paris|Oslo)$/);
      messages.push(weather, { role: 'tool', tool_call_id: weather.tool_calls[0].id, content: 'Rain later' });

      const third = await create({ model, messages, tools: TOOLS, max_tokens: 6, return_token_ids: true });
      assert.equal(third.choices[0].message.role, 'assistant');
      assert.ok(['stop', 'length', 'tool_calls'].includes(third.choices[0].finish_reason));
      const prompt = (await loadTokenizer(folders[model])).decode(third.prompt_token_ids);
      assert.match(prompt, RENDERED_CALL[model], 'the second call went back into the prompt in the family format');
      assert.ok(prompt.includes('Sunny, 21 C') && prompt.includes('Rain later'), 'both tool results are in the prompt');
      if (model === 'test/llama3.1')
        assert.ok(
          prompt.startsWith('<|begin_of_text|>') && !prompt.startsWith('<|begin_of_text|><|begin_of_text|>'),
          'one BOS',
        );
    });
  }

  for (const model of ['test/qwen3', 'test/llama3.1', 'test/llama3.1-mistral']) {
    test(`${model}: forced calls (required, named, streamed) parse in the family's format`, async () => {
      const messages = [{ role: 'user', content: 'Weather in Oslo?' }];
      const required = await create({
        model,
        messages,
        tools: TOOLS,
        tool_choice: 'required',
        parallel_tool_calls: false,
        seed: 11,
      });
      assert.equal(required.choices[0].message.tool_calls.length, 1, JSON.stringify(required.choices[0].message));
      const named = await create({
        model,
        messages,
        tools: TOOLS,
        tool_choice: { type: 'function', function: { name: 'get_time' } },
      });
      assert.deepEqual(
        named.choices[0].message.tool_calls.map((call: any) => [
          call.function.name,
          JSON.parse(call.function.arguments),
        ]),
        [['get_time', {}]],
      );
      if (model.endsWith('mistral')) assert.match(named.choices[0].message.tool_calls[0].id, /^[A-Za-z0-9]{9}$/);
      const stream = await client.chat.completions.create({
        model,
        messages,
        tools: TOOLS,
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
        max_tokens: 64,
        stream: true,
      } as never);
      const calls: { name: string; arguments: string }[] = [];
      let content = '';
      for await (const chunk of stream as unknown as AsyncIterable<any>) {
        const delta = chunk.choices[0]?.delta ?? {};
        content += delta.content ?? '';
        for (const call of delta.tool_calls ?? []) {
          calls[call.index] ??= { name: '', arguments: '' };
          calls[call.index].name += call.function?.name ?? '';
          calls[call.index].arguments += call.function?.arguments ?? '';
        }
      }
      assert.equal(content, '', 'a forced call is no content');
      assert.equal(calls.length, 1);
      assert.equal(calls[0].name, 'get_weather');
      assert.match(JSON.parse(calls[0].arguments).city, /^(Paris|Oslo)$/);
    });
  }

  for (const model of ['test/qwen3', 'test/llama3.1', 'test/llama3.1-mistral']) {
    test(`${model}: Responses and Messages force calls in the family's format and render a tool loop as chat does`, async () => {
      const post = async (route: string, body: Record<string, unknown>) => {
        const answer = await e2e.api('POST', route, { model, temperature: 0, ...body });
        assert.equal(answer.status, 200, `${route}: ${JSON.stringify(answer.body)}`);
        return answer.body;
      };
      const question = 'Weather in Oslo?';
      const chatPrompt = async (id: string, args: string) =>
        (
          await post('/v1/chat/completions', {
            messages: [
              { role: 'user', content: question },
              {
                role: 'assistant',
                content: null,
                tool_calls: [{ id, type: 'function', function: { name: 'get_weather', arguments: args } }],
              },
              { role: 'tool', tool_call_id: id, content: 'Sunny' },
            ],
            tools: [WEATHER],
            max_tokens: 1,
            return_token_ids: true,
          })
        ).prompt_token_ids;

      const { description, parameters } = WEATHER.function;
      const tool = { type: 'function', name: 'get_weather', description, parameters };
      const called = await post('/v1/responses', {
        input: question,
        tools: [tool],
        tool_choice: { type: 'function', name: 'get_weather' },
        max_output_tokens: 64,
      });
      const call = called.output.find((item: { type: string }) => item.type === 'function_call');
      assert.match(JSON.parse(call.arguments).city, /^(Paris|Oslo)$/, JSON.stringify(called.output));
      if (model.endsWith('mistral'))
        assert.match(call.call_id, /^[A-Za-z0-9]{9}$/, 'Mistral templates need 9-character ids');
      const answered = await post('/v1/responses', {
        previous_response_id: called.id,
        input: [{ type: 'function_call_output', call_id: call.call_id, output: 'Sunny' }],
        tools: [tool],
        max_output_tokens: 1,
      });
      assert.deepEqual(answered.token_generations[0].prompt_token_ids, await chatPrompt(call.call_id, call.arguments));

      const tools = [{ name: 'get_weather', description, input_schema: parameters }];
      const used = await post('/v1/messages', {
        messages: [{ role: 'user', content: question }],
        tools,
        tool_choice: { type: 'tool', name: 'get_weather' },
        max_tokens: 64,
      });
      const block = used.content.find((item: { type: string }) => item.type === 'tool_use');
      assert.match(block.input.city, /^(Paris|Oslo)$/, JSON.stringify(used.content));
      const resulted = await post('/v1/messages', {
        messages: [
          { role: 'user', content: question },
          { role: 'assistant', content: [block] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: block.id, content: 'Sunny' }] },
        ],
        tools,
        max_tokens: 1,
      });
      assert.deepEqual(resulted.prompt_token_ids, await chatPrompt(block.id, JSON.stringify(block.input)));
    });
  }
});
