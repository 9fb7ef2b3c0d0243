/**
 * Tool-call parsing per family with the real Llama 3.1 tokenizer: Llama 3 JSON (with and without
 * `<|python_tag|>`, a special token the parser must still see) and Mistral `[TOOL_CALLS]`, token by token
 * and whole giving the same message; the parser a template selects; and `TOOL_CALL_PARSERS` validation.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { type ChatTokenizer, loadTokenizer } from '../../src/conversation/tokenizer.ts';
import { detectToolParser, TOOL_CALL_FORMATS, type ToolParserName } from '../../src/conversation/tool-calls/index.ts';
import { ChoiceOutput, type OutputDelta } from '../../src/serving/output.ts';
import { templateFixture, writeTokenizerFolder } from '../helpers/families.ts';

describe('tool-call formats on the real Llama 3.1 tokenizer', () => {
  let tokenizer: ChatTokenizer;
  before(async () => {
    tokenizer = await loadTokenizer(writeTokenizerFolder('llama3.1'));
  });

  /** The message from feeding `ids` one at a time (collecting deltas) and all at once; asserts both agree. */
  function parse(format: ToolParserName, ids: number[]) {
    const make = () =>
      new ChoiceOutput({
        tokenizer,
        stop: [],
        includeStopStr: false,
        skipSpecialTokens: true,
        stopTokenIds: new Set([tokenizer.eosTokenId!]),
        parseTools: true,
        toolFormat: TOOL_CALL_FORMATS[format],
        parseReasoning: false,
        includeReasoning: true,
        logprobs: null,
        repetitionDetection: null,
      });
    const streaming = make();
    const deltas: OutputDelta[] = ids.map((id) => streaming.push([id]).delta);
    deltas.push(streaming.finish('stop', null));
    const whole = make();
    whole.push(ids);
    whole.finish('stop', null);
    const calls = (message: ReturnType<ChoiceOutput['message']>) =>
      message.tool_calls.map((call) => ({ name: call.function.name, arguments: JSON.parse(call.function.arguments) }));
    assert.deepEqual(calls(streaming.message()), calls(whole.message()));
    assert.equal(streaming.message().content, whole.message().content);
    const streamedContent = deltas.map((delta) => delta.content ?? '').join('');
    assert.equal(streamedContent, whole.message().content ?? '', 'streamed content adds up to the message');
    return {
      message: whole.message(),
      calls: calls(whole.message()),
      finishReason: whole.finishReason,
      streamedCalls: deltas.flatMap((delta) => delta.tool_calls ?? []),
    };
  }
  const encode = (text: string) => tokenizer.encode(text);

  test('Llama 3 JSON: a call, several calls, arguments or parameters, with and without <|python_tag|>', () => {
    const single = parse('llama3_json', encode('{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}'));
    assert.deepEqual(single.calls, [{ name: 'get_weather', arguments: { city: 'Paris', days: 2 } }]);
    assert.equal(single.message.content, null);
    assert.equal(single.finishReason, 'tool_calls');
    assert.equal(single.streamedCalls.length, 1);
    const tagged = parse(
      'llama3_json',
      encode('<|python_tag|>{"name": "a", "arguments": {"x": "}{"}}; {"name": "b", "parameters": {}}'),
    );
    assert.equal(
      tokenizer.specialTokenIds.has(tokenizer.tokenId('<|python_tag|>')!),
      true,
      'the tag is a special token, skipped from text',
    );
    assert.deepEqual(tagged.calls, [
      { name: 'a', arguments: { x: '}{' } },
      { name: 'b', arguments: {} },
    ]);
  });

  test('Llama 3 JSON: words, JSON that is not a call, and an unfinished call stay content', () => {
    assert.equal(parse('llama3_json', encode('The weather {is} fine.')).message.content, 'The weather {is} fine.');
    const notCall = parse('llama3_json', encode('{"city": "Paris"}'));
    assert.deepEqual(notCall.calls, []);
    assert.equal(notCall.message.content, '{"city": "Paris"}');
    assert.equal(
      parse('llama3_json', encode('{"name": "get_weather", "parameters": {"ci')).message.content,
      '{"name": "get_weather", "parameters": {"ci',
    );
  });

  test('Mistral: [TOOL_CALLS] with a JSON array or name[ARGS]{…}, content before it; ids are nine alphanumerics', () => {
    const array = parse(
      'mistral',
      encode(
        'Checking. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_time", "arguments": {}}]',
      ),
    );
    assert.equal(array.message.content, 'Checking. ');
    assert.deepEqual(array.calls, [
      { name: 'get_weather', arguments: { city: 'Oslo' } },
      { name: 'get_time', arguments: {} },
    ]);
    assert.ok(
      array.message.tool_calls.every((call) => /^[A-Za-z0-9]{9}$/.test(call.id)),
      'Mistral templates refuse other ids',
    );
    const named = parse(
      'mistral',
      encode('[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}[TOOL_CALLS]get_time{"zone": "CET"}'),
    );
    assert.deepEqual(named.calls, [
      { name: 'get_weather', arguments: { city: 'Rome' } },
      { name: 'get_time', arguments: { zone: 'CET' } },
    ]);
    assert.equal(parse('mistral', encode('[TOOL_CALLS] not json')).message.content, '[TOOL_CALLS] not json');
  });

  test('the parser follows the chat template', () => {
    assert.equal(detectToolParser(templateFixture('Qwen-Qwen3-0.6B.jinja')), 'hermes');
    assert.equal(detectToolParser(templateFixture('Qwen-Qwen2.5-7B-Instruct.jinja')), 'hermes');
    assert.equal(detectToolParser(templateFixture('meta-llama-Llama-3.1-8B-Instruct.jinja')), 'llama3_json');
    assert.equal(detectToolParser(templateFixture('meta-llama-Llama-3.2-3B-Instruct.jinja')), 'llama3_json');
    assert.equal(
      detectToolParser('{% for m in messages %}[INST]{{ m.content }}[/INST]{% endfor %}[TOOL_CALLS]'),
      'mistral',
    );
  });

  test('TOOL_CALL_PARSERS names a parser per base model; unknown parsers and bases are configuration errors', () => {
    const config = loadConfig({ BASE_MODELS: 'a=/m/a,b=/m/b', TOOL_CALL_PARSERS: 'b=mistral' });
    assert.deepEqual(
      config.baseModels.map((model) => model.toolCallParser),
      [undefined, 'mistral'],
    );
    assert.throws(
      () => loadConfig({ BASE_MODELS: 'a=/m/a', TOOL_CALL_PARSERS: 'a=pythonic,c=hermes' }),
      (error: unknown) => {
        assert.ok(error instanceof ConfigError);
        assert.match(error.problems[0], /parser one of hermes, llama3_json, mistral/);
        assert.match(error.problems[1], /"c" is not one of BASE_MODELS/);
        return true;
      },
    );
  });
});
