/**
 * src/serving/output.ts: `ChoiceOutput` with the tiny model's real tokenizer gives the same message token by token
 * (the streaming path) as for the whole output at once: tool calls, held-back partial tags, reasoning, UTF-8 and
 * stop strings.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { before, describe, test } from 'node:test';
import { type ChatTokenizer, loadTokenizer } from '../../src/conversation/tokenizer.ts';
import { TOOL_CALL_FORMATS } from '../../src/conversation/tool-calls/index.ts';
import { ChoiceOutput, type OutputDelta, type OutputOptions } from '../../src/serving/output.ts';

const TINY_CHAT = path.join(import.meta.dirname, '..', '..', 'models', 'tiny-chat');
const EOS = 2041;
const CALL_PARIS = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const CALL_ROME = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "days": 2}}\n</tool_call>';

describe('ChoiceOutput with the real tokenizer: token by token gives what the whole output gives', () => {
  let tokenizer: ChatTokenizer;
  /** The id of the token that is exactly this one byte. */
  let byteToken: Map<number, number>;
  const options = (overrides: Partial<OutputOptions> = {}): OutputOptions => ({
    tokenizer,
    stop: [],
    includeStopStr: false,
    skipSpecialTokens: true,
    stopTokenIds: new Set([EOS]),
    parseTools: true,
    toolFormat: TOOL_CALL_FORMATS.hermes,
    parseReasoning: true,
    includeReasoning: true,
    logprobs: null,
    repetitionDetection: null,
    ...overrides,
  });
  const merge = (into: { content: string; reasoning: string; calls: any[] }, delta: OutputDelta) => {
    into.content += delta.content ?? '';
    into.reasoning += delta.reasoning ?? '';
    into.calls.push(...(delta.tool_calls ?? []));
  };
  /** Streams ids one by one (then EOS), collecting the deltas; also runs them all at once. */
  const run = (ids: number[], overrides: Partial<OutputOptions> = {}) => {
    const streaming = new ChoiceOutput(options(overrides));
    const streamed = { content: '', reasoning: '', calls: [] as any[], deltas: [] as OutputDelta[] };
    for (const id of [...ids, EOS]) {
      const { delta } = streaming.push([id]);
      streamed.deltas.push(delta);
      merge(streamed, delta);
      if (streaming.done) break;
    }
    const last = streaming.finish('stop', null);
    streamed.deltas.push(last);
    merge(streamed, last);
    const whole = new ChoiceOutput(options(overrides));
    whole.push([...ids, EOS]);
    whole.finish('stop', null);
    const strip = (calls: any[]) =>
      calls.map(({ index, type, function: fn }) => ({
        index,
        type,
        name: fn.name,
        arguments: JSON.parse(fn.arguments),
      }));
    assert.deepEqual(
      { ...streaming.message(), tool_calls: strip(streaming.message().tool_calls) },
      { ...whole.message(), tool_calls: strip(whole.message().tool_calls) },
    );
    assert.equal(streaming.finishReason, whole.finishReason);
    assert.deepEqual(streaming.tokenIds, whole.tokenIds);
    return {
      streaming,
      streamed,
      message: whole.message(),
      finishReason: whole.finishReason,
      stopReason: whole.stopReason,
    };
  };
  const bytes = (text: string) => [...new TextEncoder().encode(text)].map((byte) => byteToken.get(byte)!);

  before(async () => {
    tokenizer = await loadTokenizer(TINY_CHAT);
    byteToken = new Map();
    for (let id = 0; id < tokenizer.vocabSize; id += 1) {
      const piece = tokenizer.tokenBytes(id);
      if (
        piece?.length === 1 &&
        !tokenizer.addedTokenIds.has(new TextDecoder().decode(piece)) &&
        !byteToken.has(piece[0])
      )
        byteToken.set(piece[0], id);
    }
    assert.equal(byteToken.size, 256, 'a byte-level vocabulary has every byte');
  });

  test('a tool call from the tokenizer’s own ids and from single bytes: the same call, content before it', () => {
    for (const ids of [tokenizer.encode(`Sure.${CALL_PARIS}`), bytes(`Sure.${CALL_PARIS}`)]) {
      const { message, streamed, finishReason } = run(ids);
      assert.equal(message.content, 'Sure.');
      assert.equal(streamed.content, 'Sure.');
      assert.equal(finishReason, 'tool_calls');
      assert.equal(message.tool_calls.length, 1);
      assert.deepEqual(JSON.parse(message.tool_calls[0].function.arguments), { city: 'Paris' });
      assert.equal(streamed.calls.length, 1);
      assert.equal(streamed.calls[0].function.name, 'get_weather');
    }
  });

  test('a partial tag is held back while streaming, and released when it turns out not to be one', () => {
    const output = new ChoiceOutput(options());
    let content = '';
    for (const id of bytes('a <tool_ca')) content += output.push([id]).delta.content ?? '';
    assert.equal(content, 'a ', 'the possible start of <tool_call> waits');
    for (const id of bytes('t> b')) content += output.push([id]).delta.content ?? '';
    content += output.finish('stop', null).content ?? '';
    assert.equal(content, 'a <tool_cat> b');
    assert.deepEqual(output.message().tool_calls, []);
    // Spelled out byte by byte it is still a tag.
    const spelled = run(bytes(`${CALL_ROME} trailing`));
    assert.equal(spelled.message.tool_calls.length, 1);
    assert.equal(spelled.message.content, null, 'text after the calls is dropped, as Hermes does');
  });

  test('<think> spelled out byte by byte, or as its own token, is reasoning in both modes', () => {
    const text = '<think>\nPonder é 😀.\n</think>\n\nDone.';
    for (const ids of [tokenizer.encode(text), bytes(text)]) {
      const { message, streamed } = run(ids);
      assert.equal(message.reasoning, '\nPonder é 😀.\n');
      assert.equal(message.content, 'Done.');
      assert.equal(streamed.reasoning, message.reasoning);
      assert.equal(streamed.content, 'Done.');
    }
    const hidden = run(tokenizer.encode(text), { includeReasoning: false });
    assert.equal(hidden.message.reasoning, null);
    assert.equal(hidden.streamed.reasoning, '');
    assert.equal(hidden.message.content, 'Done.');
    const notParsed = run(tokenizer.encode(text), { parseReasoning: false });
    assert.equal(notParsed.message.content, text);
  });

  test('UTF-8 is never split: no delta holds half a character', () => {
    const text = 'é😀日本語 ok';
    const { streamed, message } = run(bytes(text));
    assert.equal(message.content, text);
    assert.equal(streamed.content, text);
    for (const delta of streamed.deltas) assert.ok(!(delta.content ?? '').includes('\uFFFD'));
  });

  test('stop strings across tokens: held back while they may match, cut before the match; include_stop_str_in_output', () => {
    const text = 'one two STOP three';
    const held = new ChoiceOutput(options({ stop: ['STOP'] }));
    let content = '';
    for (const id of bytes('one two ST')) content += held.push([id]).delta.content ?? '';
    assert.equal(content, 'one two ', 'the possible start of the stop string waits');
    for (const id of bytes('OP three')) content += held.push([id]).delta.content ?? '';
    content += held.finish('stop', null).content ?? '';
    assert.equal(content, 'one two ');
    assert.equal(held.finishReason, 'stop');
    assert.equal(held.stopReason, 'STOP');
    assert.equal(held.tokenIds.length, bytes('one two STOP').length, 'tokens after the match are not taken');

    for (const ids of [tokenizer.encode(text), bytes(text)]) {
      assert.equal(run(ids, { stop: ['STOP'] }).message.content, 'one two ');
      assert.equal(run(ids, { stop: ['STOP'], includeStopStr: true }).message.content, 'one two STOP');
      assert.equal(run(ids, { stop: ['nope', 'STOP', 'e t'] }).message.content, 'on', 'the earliest match wins');
    }
    const released = new ChoiceOutput(options({ stop: ['STOP'] }));
    let text2 = '';
    for (const id of bytes('a STX')) text2 += released.push([id]).delta.content ?? '';
    assert.equal(text2, 'a STX', 'a prefix that stops matching is released at once');
  });

  test('EOS ends the text and stop_token_ids name the reason; EOS itself is not text', () => {
    const output = new ChoiceOutput(options({ stopTokenIds: new Set([EOS, 300]) }));
    output.push([...tokenizer.encode('Hi'), 300]);
    output.finish('stop', 300);
    assert.equal(output.message().content, 'Hi');
    assert.equal(output.stopReason, 300);
    const eos = run(tokenizer.encode('Hi'));
    assert.equal(eos.message.content, 'Hi');
    assert.equal(eos.stopReason, null);
    assert.equal(eos.streaming.completionTokens, tokenizer.encode('Hi').length + 1, 'EOS counts as a completion token');
  });
});
