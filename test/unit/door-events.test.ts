/**
 * The Messages and Responses doors' stream events (src/serving/messages/response.ts, responses/response.ts) from a
 * real output (the tiny model's tokenizer, Hermes calls, a `<think>` block) streamed token by token through the one
 * assembly's steps: reasoning, text and each call open and close their own block or item, in each API's order; every
 * event is what api/ declares; the stream ends with what the whole answer holds (block and item kinds, texts, calls,
 * stop reason, evidence).
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { before, describe, test } from 'node:test';
import type { TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { MessageStreamEvent } from '../../src/api/messages.ts';
import { ResponseObject } from '../../src/api/responses.ts';
import { type ChatTokenizer, loadTokenizer } from '../../src/conversation/tokenizer.ts';
import { TOOL_CALL_FORMATS } from '../../src/conversation/tool-calls/index.ts';
import type { GenerateEvent } from '../../src/engine/protocol.ts';
import { steps } from '../../src/serving/generation.ts';
import { message, messageEvents } from '../../src/serving/messages/response.ts';
import { ChoiceOutput } from '../../src/serving/output.ts';
import type { ChatPlan } from '../../src/serving/plan.ts';
import { type ResponseShape, response, responseEvents } from '../../src/serving/responses/response.ts';

const TINY_CHAT = path.join(import.meta.dirname, '..', '..', 'models', 'tiny-chat');
const EOS = 2041;
const TEXT =
  '<think>It is sunny there.</think>\n\nLet me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';

function conforms(schema: TSchema, value: unknown): void {
  assert.ok(Value.Check(schema, value), JSON.stringify([...Value.Errors(schema, value)].slice(0, 3)));
}

describe('Messages and Responses stream events from a streamed output', () => {
  let tokenizer: ChatTokenizer;
  let ids: number[];
  const plan = {
    id: 'msg_test',
    created: 1,
    modelName: 'builtin/tiny-chat',
    promptIds: [1, 2, 3],
    request: { returnTokenIds: true },
  } as unknown as ChatPlan;
  const output = () =>
    new ChoiceOutput({
      tokenizer,
      stop: [],
      includeStopStr: false,
      skipSpecialTokens: true,
      stopTokenIds: new Set([EOS]),
      parseTools: true,
      toolFormat: TOOL_CALL_FORMATS.hermes,
      parseReasoning: true,
      includeReasoning: true,
      logprobs: { top: 0, asTokenIds: true },
      repetitionDetection: null,
    });
  /** The engine's events for `ids`: one token per decode step, then EOS and the finish. */
  async function* engine(): AsyncGenerator<GenerateEvent> {
    for (const id of [...ids, EOS])
      yield { type: 'tokens', seq: 0, tokens: [id], logprobs: [-0.5], top_logprobs: [[]] };
    yield { type: 'finish', seq: 0, finish_reason: 'stop', stop_token_id: EOS };
    yield { type: 'done', prompt_tokens: 3, cached_tokens: 0 };
  }
  /** The same output read whole. */
  const whole = () => {
    const read = output();
    read.push([...ids, EOS], Array(ids.length + 1).fill(-0.5), Array(ids.length + 1).fill([]));
    read.finish('stop', EOS);
    return read;
  };

  before(async () => {
    tokenizer = await loadTokenizer(TINY_CHAT);
    ids = tokenizer.encode(TEXT);
  });

  test('Messages: a thinking block (signed), a text block, a tool_use block, then the stop reason with the evidence', async () => {
    const events: MessageStreamEvent[] = [];
    for await (const event of messageEvents(plan, steps(engine(), [output()]))) events.push(event);
    for (const event of events) conforms(MessageStreamEvent, event);
    const starts = events.filter((event) => event.type === 'content_block_start');
    assert.deepEqual(
      starts.map((event) => [event.index, event.content_block.type]),
      [
        [0, 'thinking'],
        [1, 'text'],
        [2, 'tool_use'],
      ],
    );
    const deltas = (index: number) =>
      events.flatMap((event) => (event.type === 'content_block_delta' && event.index === index ? [event.delta] : []));
    assert.equal(
      deltas(0)
        .map((delta) => ('thinking' in delta ? delta.thinking : ''))
        .join(''),
      'It is sunny there.',
    );
    assert.equal(deltas(0).at(-1)?.type, 'signature_delta', 'a thinking block is signed before it stops');
    assert.equal(
      deltas(1)
        .map((delta) => ('text' in delta ? delta.text : ''))
        .join(''),
      'Let me check.',
    );
    assert.deepEqual(deltas(2), [{ type: 'input_json_delta', partial_json: '{"city":"Paris"}' }]);
    const stops = events.filter((event) => event.type === 'content_block_stop').map((event) => event.index);
    assert.deepEqual(stops, [0, 1, 2]);
    const final = events.at(-2)!;
    assert.equal(final.type, 'message_delta');
    const read = whole();
    const answer = message(plan, read, { promptLogprobs: [], cachedTokens: 0 });
    assert.deepEqual(final.type === 'message_delta' && [final.delta.stop_reason, final.token_ids], [
      answer.stop_reason,
      answer.token_ids,
    ]);
    assert.equal(answer.stop_reason, 'tool_use');
    assert.deepEqual(
      answer.content.map((block) => block.type),
      ['thinking', 'text', 'tool_use'],
    );
    assert.equal(events.at(-1)!.type, 'message_stop');
  });

  test('Responses: a reasoning item, a message item, a function_call item, numbered events, the whole response last', async () => {
    const shape = {
      body: { input: 'x', tools: [{ type: 'function', name: 'get_weather' }] },
      request: { outputLogprobs: false, evidence: true, conversation: [] },
      plan: { ...plan, id: 'resp_test' },
    } as unknown as ResponseShape;
    const events: any[] = [];
    let kept: unknown = null;
    const done = async (answer: unknown) => {
      kept = answer;
    };
    for await (const event of responseEvents(shape, steps(engine(), [output()]), done)) events.push(event);
    assert.deepEqual(
      events.map((event) => event.sequence_number),
      events.map((_, index) => index),
    );
    const added = events.filter((event) => event.type === 'response.output_item.added') as any[];
    assert.deepEqual(
      added.map((event) => [event.output_index, event.item.type]),
      [
        [0, 'reasoning'],
        [1, 'message'],
        [2, 'function_call'],
      ],
    );
    const doneItems = events.filter((event) => event.type === 'response.output_item.done') as any[];
    assert.deepEqual(
      doneItems.map((event) => event.item.id),
      added.map((event) => event.item.id),
    );
    const text = (type: string) =>
      events
        .filter((event) => event.type === type)
        .map((event) => event.delta)
        .join('');
    assert.equal(text('response.reasoning_text.delta'), 'It is sunny there.');
    assert.equal(text('response.output_text.delta'), 'Let me check.');
    assert.equal(text('response.function_call_arguments.delta'), '{"city":"Paris"}');
    const last = events.at(-1) as any;
    assert.equal(last.type, 'response.completed');
    conforms(ResponseObject, last.response);
    assert.deepEqual(kept, last.response, 'the response is kept as the stream ends it');
    const answer = response(shape, whole(), { promptLogprobs: [], cachedTokens: 0 });
    // Ids are fresh per answer: items and calls compared without them.
    const strip = (items: any[]) => items.map(({ id: _id, call_id: _call, ...item }) => item);
    assert.deepEqual(strip(last.response.output), strip(answer.output), 'streamed and whole answers agree');
    assert.deepEqual(last.response.token_generations, answer.token_generations);
    assert.deepEqual(last.response.token_generations[0].output_indices, [0, 1, 2]);
  });
});
