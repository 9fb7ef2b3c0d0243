/**
 * The Responses and Anthropic Messages conversations as chat messages (src/conversation/responses-items.ts and
 * anthropic-messages.ts): instructions and system prompts, text parts joined, reasoning carried to the assistant
 * turn, function calls joining the turn they follow, tool results as tool messages, tools and tool choices; and
 * every refusal naming the field of the source request.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  anthropicContentMessage,
  anthropicMessages,
  anthropicToolChoice,
  anthropicTools,
} from '../../src/conversation/anthropic-messages.ts';
import { ConversionError } from '../../src/conversation/chat-shapes.ts';
import {
  itemMessages,
  responsesMessages,
  responsesToolChoice,
  responsesTools,
} from '../../src/conversation/responses-items.ts';

const refusedAt = (param: string) => (error: unknown) => error instanceof ConversionError && error.param === param;
const WEATHER = { type: 'object', properties: { city: { type: 'string' } } };

describe('Responses conversations as chat messages', () => {
  test('instructions and text input: a system and a user message', () => {
    assert.deepEqual(responsesMessages('hi', 'Be brief.'), [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'hi' },
    ]);
    assert.deepEqual(responsesMessages('hi', ''), [{ role: 'user', content: 'hi' }]);
  });

  test('a tool loop: reasoning and calls on one assistant turn, outputs as tool messages, parts joined', () => {
    const input = [
      {
        role: 'user',
        content: [
          { type: 'input_text', text: 'Weather in ' },
          { type: 'input_text', text: 'Paris?' },
        ],
      },
      { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 'look it up' }] },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Checking.' }] },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call', call_id: 'call_2', name: 'get_weather', arguments: '{"city":"Rome"}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
      { type: 'function_call_output', call_id: 'call_2', output: [{ type: 'input_text', text: 'rain' }] },
      { type: 'reasoning', content: [{ type: 'reasoning_text', text: 'done' }] },
      { type: 'function_call', call_id: 'call_3', name: 'log', arguments: '' },
    ];
    const call = (id: string, name: string, args: string) => ({
      id,
      type: 'function',
      function: { name, arguments: args },
    });
    assert.deepEqual(responsesMessages(input), [
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: 'Checking.',
        reasoning: 'look it up',
        tool_calls: [
          call('call_1', 'get_weather', '{"city":"Paris"}'),
          call('call_2', 'get_weather', '{"city":"Rome"}'),
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
      { role: 'tool', tool_call_id: 'call_2', content: 'rain' },
      { role: 'assistant', content: '', reasoning: 'done', tool_calls: [call('call_3', 'log', '')] },
    ]);
  });

  test('reasoning that no assistant turn follows is a turn of its own', () => {
    assert.deepEqual(itemMessages([{ type: 'reasoning', summary: [{ type: 'summary_text', text: 'hm' }] }], 'output'), [
      { role: 'assistant', content: '', reasoning: 'hm' },
    ]);
  });

  test('tools and tool choices: function tools only', () => {
    assert.deepEqual(responsesTools([{ type: 'function', name: 'get_weather', parameters: WEATHER, strict: true }]), [
      { type: 'function', function: { name: 'get_weather', parameters: WEATHER } },
    ]);
    assert.equal(responsesTools(undefined), null);
    assert.equal(responsesToolChoice('required'), 'required');
    assert.deepEqual(responsesToolChoice({ type: 'function', name: 'f' }), {
      type: 'function',
      function: { name: 'f' },
    });
    assert.throws(() => responsesTools([{ type: 'web_search_preview' }]), refusedAt('tools.0.type'));
    assert.throws(() => responsesToolChoice({ type: 'file_search' }), refusedAt('tool_choice'));
  });

  test('refusals name the field', () => {
    assert.throws(() => responsesMessages(42), refusedAt('input'));
    assert.throws(
      () => responsesMessages([{ role: 'user', content: [{ type: 'input_image' }] }]),
      refusedAt('input.0.content.0.type'),
    );
    assert.throws(() => responsesMessages([{ type: 'function_call', name: 'f' }]), refusedAt('input.0.call_id'));
    assert.throws(
      () => responsesMessages([{ type: 'function_call_output', call_id: 'c' }]),
      refusedAt('input.0.output'),
    );
    assert.throws(() => responsesMessages([{ role: 'tool', content: 'x' }]), refusedAt('input.0.role'));
    assert.throws(() => responsesMessages([{ type: 'item_reference', id: 'x' }]), refusedAt('input.0.type'));
    assert.throws(() => responsesMessages('hi', 3), refusedAt('instructions'));
  });
});

describe('Anthropic conversations as chat messages', () => {
  test('system blocks, text blocks joined, thinking and tool use on the assistant turn, results as tool messages', () => {
    const messages = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Weather in ' },
          { type: 'text', text: 'Paris?' },
        ],
      },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: 'look it up', signature: 'x' },
          { type: 'redacted_thinking', data: 'opaque' },
          { type: 'text', text: 'Checking.' },
          { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'sunny' }] },
          { type: 'text', text: 'Thanks' },
        ],
      },
    ];
    assert.deepEqual(
      anthropicMessages(
        [
          { type: 'text', text: 'Be ' },
          { type: 'text', text: 'brief.' },
        ],
        messages,
      ),
      [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Weather in Paris?' },
        {
          role: 'assistant',
          content: 'Checking.',
          reasoning: 'look it up',
          tool_calls: [
            { id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'toolu_1', content: 'sunny' },
        { role: 'user', content: 'Thanks' },
      ],
    );
  });

  test("a response's content is one assistant message", () => {
    assert.deepEqual(anthropicContentMessage([{ type: 'tool_use', id: 't', name: 'f', input: {} }]), {
      role: 'assistant',
      content: '',
      tool_calls: [{ id: 't', type: 'function', function: { name: 'f', arguments: '{}' } }],
    });
    assert.deepEqual(anthropicContentMessage([]), { role: 'assistant', content: '' });
  });

  test('tools and tool choices', () => {
    assert.deepEqual(anthropicTools([{ name: 'get_weather', description: 'Weather.', input_schema: WEATHER }]), [
      { type: 'function', function: { name: 'get_weather', description: 'Weather.', parameters: WEATHER } },
    ]);
    assert.deepEqual(anthropicToolChoice({ type: 'any', disable_parallel_tool_use: true }), {
      toolChoice: 'required',
      parallel: false,
    });
    assert.deepEqual(anthropicToolChoice({ type: 'tool', name: 'f' }).toolChoice, {
      type: 'function',
      function: { name: 'f' },
    });
    assert.throws(() => anthropicTools([{ type: 'bash_20250124', name: 'bash' }]), refusedAt('tools.0.type'));
    assert.throws(() => anthropicToolChoice({ type: 'maybe' }), refusedAt('tool_choice.type'));
  });

  test('refusals name the field', () => {
    assert.throws(() => anthropicMessages(undefined, 'hi'), refusedAt('messages'));
    assert.throws(() => anthropicMessages(undefined, [{ role: 'system', content: 'x' }]), refusedAt('messages.0.role'));
    assert.throws(() => anthropicMessages(undefined, [{ role: 'user' }]), refusedAt('messages.0.content'));
    assert.throws(
      () => anthropicMessages(undefined, [{ role: 'user', content: [{ type: 'image', source: {} }] }]),
      refusedAt('messages.0.content.0.type'),
    );
    assert.throws(
      () => anthropicMessages(undefined, [{ role: 'assistant', content: [{ type: 'tool_use', id: 't', input: {} }] }]),
      refusedAt('messages.0.content.0.name'),
    );
    assert.throws(() => anthropicMessages(7, []), refusedAt('system'));
  });
});
