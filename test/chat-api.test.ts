/**
 * Chat completions without streaming, through the `openai` npm client against the real server, engine and
 * tiny model: response shape, logprobs by default, max_tokens, n, seeds, stop strings, logprobs and token ids,
 * the chat template (tools, tool results, prefill), every validation rule with its status and `param`, model
 * resolution across entities, and a checkpoint written by training served by the next request.
 * The assertions are on structure, determinism and counts, not on what the tiny model says.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Value } from '@sinclair/typebox/value';
import OpenAI from 'openai';
import { ChatCompletion } from '../src/api/chat.ts';
import { type ChatTokenizer, loadTokenizer } from '../src/conversation/tokenizer.ts';
import { sampleGroup, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const BASE = 'builtin/tiny-chat';
const CONTEXT = 2048;
const VOCAB = 2048;
const HI = [{ role: 'user', content: 'hi' }];
/** A request the tiny model was never trained on: its answers spread over many tokens. */
const OPEN = [{ role: 'user', content: 'Write a poem.' }];
const HI_PROMPT =
  '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n';
const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city.',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

/** A few characters from the middle of `text` that a stop string can match: no replacement characters, no edge spaces. */
function pickStop(text: string): string {
  for (let at = Math.floor(text.length / 3); at + 3 <= text.length; at += 1) {
    const piece = text.slice(at, at + 3);
    if (!piece.includes('\uFFFD') && piece.trim() === piece) return piece;
  }
  throw new Error(`no usable stop string in ${JSON.stringify(text)}`);
}

describe('chat completions (non-streaming) through the openai client', () => {
  let e2e: E2eServer;
  let client: OpenAI;
  let tokenizer: ChatTokenizer;
  /** Untyped create: most tests send vLLM extensions the SDK's types do not know. */
  const create = (body: Record<string, unknown>, options: OpenAI.RequestOptions = {}): Promise<any> =>
    client.chat.completions.create(
      { model: BASE, messages: HI, max_tokens: 4, ...body } as never,
      options,
    ) as Promise<any>;

  before(async () => {
    e2e = await startE2eServer();
    client = new OpenAI({ baseURL: `${e2e.url}/v1`, apiKey: e2e.key, maxRetries: 0 });
    tokenizer = await loadTokenizer(path.join(import.meta.dirname, '..', 'models', 'tiny-chat'));
  });
  after(async () => {
    await e2e?.close();
  });

  test('plain completion: OpenAI shape, usage with cached tokens, logprobs by default as token_id:<id>', async () => {
    const response = await create({ max_tokens: 6, seed: 1 });
    assert.match(response.id, /^chatcmpl-[0-9a-f]{16}$/);
    assert.equal(response.object, 'chat.completion');
    assert.ok(Number.isInteger(response.created) && Math.abs(response.created - Date.now() / 1000) < 60);
    assert.equal(response.model, BASE);
    assert.equal(response.choices.length, 1);
    const [choice] = response.choices;
    assert.equal(choice.index, 0);
    assert.equal(choice.message.role, 'assistant');
    assert.equal(typeof choice.message.content, 'string');
    assert.equal(choice.message.refusal, null);
    assert.deepEqual(choice.message.tool_calls, []);
    assert.ok(['stop', 'length'].includes(choice.finish_reason));
    const { usage } = response;
    assert.ok(usage.prompt_tokens > 0);
    assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
    assert.ok(
      Number.isInteger(usage.prompt_tokens_details.cached_tokens) && usage.prompt_tokens_details.cached_tokens >= 0,
    );
    // No `logprobs` in the request: logprobs anyway (ART trains only on choices that carry them), as token ids.
    const entries = choice.logprobs.content;
    assert.equal(entries.length, usage.completion_tokens);
    for (const entry of entries) {
      assert.match(entry.token, /^token_id:\d+$/);
      assert.ok(Number(entry.token.slice('token_id:'.length)) < VOCAB);
      assert.ok(entry.logprob <= 0 && entry.logprob >= -9999);
      assert.ok(
        Array.isArray(entry.bytes) &&
          entry.bytes.every((byte: number) => Number.isInteger(byte) && byte >= 0 && byte < 256),
      );
      assert.deepEqual(entry.top_logprobs, []);
    }
  });

  test('model absent means the default base model; the trailing-slash route; request_id names the response; extra fields are tolerated', async () => {
    const response = await fetch(`${e2e.url}/v1/chat/completions/`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        messages: [{ role: 'user', content: 'hi', some_extra: 1 }],
        max_tokens: 2,
        request_id: 'my-request-1',
        not_a_field: { x: 1 },
      }),
    });
    assert.equal(response.status, 200);
    const body = await response.json();
    assert.equal(body.id, 'chatcmpl-my-request-1');
    assert.equal(body.model, BASE);
    assert.equal(body.usage.completion_tokens, 2);
  });

  test('explicit logprobs:false is honoured; explicit logprobs:true gives token text, not ids', async () => {
    const off = await create({ logprobs: false });
    assert.equal(off.choices[0].logprobs, null);
    const on = await create({ logprobs: true, seed: 3 });
    const ids = (await create({ logprobs: true, seed: 3, return_token_ids: true })).choices[0].token_ids;
    const entries = on.choices[0].logprobs.content;
    assert.equal(entries.length, ids.length);
    entries.forEach((entry: any, i: number) => {
      assert.doesNotMatch(entry.token, /^token_id:/);
      assert.deepEqual(entry.bytes, [
        ...new TextEncoder().encode(new TextDecoder().decode(tokenizer.tokenBytes(ids[i]))),
      ]);
    });
  });

  test('max_tokens and max_completion_tokens: finish_reason length with exactly that many tokens', async () => {
    for (const body of [
      { max_tokens: 5 },
      { max_tokens: null, max_completion_tokens: 7 },
      { max_tokens: 50, max_completion_tokens: 3 },
    ]) {
      const response = await create({ ...body, ignore_eos: true, seed: 11, return_token_ids: true });
      const expected = body.max_completion_tokens ?? body.max_tokens;
      const [choice] = response.choices;
      assert.equal(choice.finish_reason, 'length', JSON.stringify(body));
      assert.equal(choice.stop_reason, null);
      assert.equal(response.usage.completion_tokens, expected);
      assert.equal(choice.token_ids.length, expected);
      assert.equal(choice.logprobs.content.length, expected);
    }
  });

  test('seed: the same seed gives the same tokens, another seed other tokens', async () => {
    const run = async (seed: number) => (await create({ seed, max_tokens: 8, return_token_ids: true })).choices[0];
    const [first, again, other] = [await run(42), await run(42), await run(43)];
    assert.deepEqual(again.token_ids, first.token_ids);
    assert.equal(again.message.content, first.message.content);
    assert.deepEqual(
      again.logprobs.content.map((entry: any) => entry.token),
      first.logprobs.content.map((entry: any) => entry.token),
    );
    assert.notDeepEqual(other.token_ids, first.token_ids);
  });

  test('n=3: three choices with indices 0..2, usage summing them; seeded n is reproducible', async () => {
    const response = await create({ messages: OPEN, n: 3, seed: 7, max_tokens: 6, return_token_ids: true });
    assert.deepEqual(
      response.choices.map((choice: any) => choice.index),
      [0, 1, 2],
    );
    let sum = 0;
    for (const choice of response.choices) {
      assert.equal(choice.message.role, 'assistant');
      assert.ok(['stop', 'length'].includes(choice.finish_reason));
      assert.equal(choice.logprobs.content.length, choice.token_ids.length);
      sum += choice.token_ids.length;
    }
    assert.equal(response.usage.completion_tokens, sum);
    assert.equal(
      new Set(response.choices.map((choice: any) => JSON.stringify(choice.token_ids))).size,
      3,
      'the choices are sampled independently',
    );
    const again = await create({ messages: OPEN, n: 3, seed: 7, max_tokens: 6, return_token_ids: true });
    assert.deepEqual(
      again.choices.map((choice: any) => choice.token_ids),
      response.choices.map((choice: any) => choice.token_ids),
    );
  });

  test("ART 0.5.20+'s default extra body with n=3 and logprobs: accepted, each choice's counts add up to usage as ART checks, with its policy span", async () => {
    // Model._default_chat_completion_extra_body of a trainable model (nvext since 0.5.21); vllm_tokens.py then requires
    // the per-choice counts (token_ids, or else the logprobs) to sum to usage.completion_tokens.
    const art = {
      return_token_ids: true,
      return_tokens_as_token_ids: true,
      chat_template_kwargs: { preserve_thinking: true },
      nvext: { extra_fields: ['engine_data'] },
    };
    for (const extra of [art, { ...art, return_token_ids: false }]) {
      const response = await create({
        messages: OPEN,
        n: 3,
        seed: 5,
        max_tokens: 6,
        logprobs: true,
        temperature: 1,
        ...extra,
      });
      const counts = response.choices.map((choice: any) =>
        extra.return_token_ids ? choice.token_ids.length : choice.logprobs.content.length,
      );
      assert.equal(
        counts.reduce((a: number, b: number) => a + b, 0),
        response.usage.completion_tokens,
        JSON.stringify(counts),
      );
      for (const choice of response.choices) {
        assert.ok(choice.logprobs.content.every((entry: { token: string }) => /^token_id:\d+$/.test(entry.token)));
        if (extra.return_token_ids) assert.equal(choice.logprobs.content.length, choice.token_ids.length);
        else assert.equal(choice.token_ids ?? null, null);
      }
      assert.equal(Array.isArray(response.prompt_token_ids), extra.return_token_ids);
      // The policy provenance ART's PipelineTrainer requires of eval answers: one span of the base model's weights.
      response.choices.forEach((choice: any, index: number) => {
        assert.deepEqual(choice.policy_token_spans, [
          {
            start_token: 0,
            end_token: counts[index],
            generation_id: `${response.id}-${index}`,
            policy_version: 0,
            lora_slot: 'base',
            update_seq: 0,
          },
        ]);
      });
    }
  });

  test('stop strings: the text is cut before the first match, stop_reason names it, include_stop_str_in_output keeps it', async () => {
    const seed = 5;
    const free = (await create({ seed, max_tokens: 16, ignore_eos: true, return_token_ids: true })).choices[0];
    const text: string = free.message.content;
    const stop = pickStop(text);
    const at = text.indexOf(stop);

    const cut = (
      await create({
        seed,
        max_tokens: 16,
        ignore_eos: true,
        return_token_ids: true,
        stop: ['never-in-gibberish-42', stop],
      })
    ).choices[0];
    assert.equal(cut.message.content, text.slice(0, at));
    assert.equal(cut.finish_reason, 'stop');
    assert.equal(cut.stop_reason, stop);
    // Generation ended at the token that completed the match: a prefix of the free run's tokens.
    assert.deepEqual(cut.token_ids, free.token_ids.slice(0, cut.token_ids.length));
    assert.ok(tokenizer.decode(cut.token_ids).includes(stop));
    assert.ok(!tokenizer.decode(cut.token_ids.slice(0, -1)).includes(stop));
    assert.equal(cut.logprobs.content.length, cut.token_ids.length);

    const kept = (await create({ seed, max_tokens: 16, ignore_eos: true, stop, include_stop_str_in_output: true }))
      .choices[0];
    assert.equal(kept.message.content, text.slice(0, at + stop.length));
    assert.equal(kept.finish_reason, 'stop');
    assert.equal(kept.stop_reason, stop);
  });

  test('stop_token_ids end with stop_reason = the id (the token counts); min_tokens holds them off', async () => {
    const forced = { logit_bias: { '300': 100 }, max_tokens: 8, return_token_ids: true };
    const stopped = (await create({ ...forced, stop_token_ids: [300] })).choices[0];
    assert.equal(stopped.finish_reason, 'stop');
    assert.equal(stopped.stop_reason, 300);
    assert.deepEqual(stopped.token_ids, [300]);
    assert.equal(stopped.message.content, '');
    const later = (await create({ ...forced, stop_token_ids: [300], min_tokens: 3 })).choices[0];
    assert.equal(later.finish_reason, 'stop');
    assert.equal(later.stop_reason, 300);
    assert.equal(later.token_ids.length, 4);
    assert.ok(!later.token_ids.slice(0, 3).includes(300), 'the stop id is not sampled before min_tokens');
  });

  test('bad_words are never generated, even against a +100 bias; repetition_detection stops a loop', async () => {
    const word = tokenizer.decode([300]);
    const banned = (
      await create({
        logit_bias: { '300': 100 },
        bad_words: [word],
        max_tokens: 6,
        ignore_eos: true,
        return_token_ids: true,
      })
    ).choices[0];
    assert.equal(banned.token_ids.length, 6);
    assert.ok(!banned.token_ids.includes(300), JSON.stringify(banned.token_ids));
    const looping = await create({
      logit_bias: { '300': 100 },
      max_tokens: 16,
      ignore_eos: true,
      return_token_ids: true,
      repetition_detection: { max_pattern_size: 2, min_count: 4 },
    });
    const [choice] = looping.choices;
    assert.equal(choice.finish_reason, 'repetition');
    assert.equal(choice.stop_reason, 'repetition_detected');
    assert.deepEqual(choice.token_ids, [300, 300, 300, 300]);
    assert.equal(looping.usage.completion_tokens, 4);
  });

  test('truncate_prompt_tokens keeps the last k prompt tokens; X-Request-Id names the response', async () => {
    const full = await create({ max_tokens: 1, return_token_ids: true });
    const truncated = await create(
      { max_tokens: 1, return_token_ids: true, truncate_prompt_tokens: 5 },
      { headers: { 'x-request-id': 'from-header-7' } },
    );
    assert.equal(truncated.usage.prompt_tokens, 5);
    assert.deepEqual(truncated.prompt_token_ids, full.prompt_token_ids.slice(-5));
    assert.equal(truncated.id, 'chatcmpl-from-header-7');
  });

  test('logprobs and top_logprobs: shapes and bounds (0, 5, 20 alternatives; token text or ids)', async () => {
    for (const top of [0, 5, 20]) {
      const response = await create({ logprobs: true, top_logprobs: top, max_tokens: 4, seed: 9 });
      const entries = response.choices[0].logprobs.content;
      assert.equal(entries.length, response.usage.completion_tokens);
      for (const entry of entries) {
        assert.deepEqual(Object.keys(entry).sort(), ['bytes', 'logprob', 'token', 'top_logprobs']);
        assert.equal(typeof entry.token, 'string');
        assert.ok(entry.logprob <= 0);
        assert.equal(entry.top_logprobs.length, top);
        for (const alternative of entry.top_logprobs) {
          assert.deepEqual(Object.keys(alternative).sort(), ['bytes', 'logprob', 'token']);
          assert.ok(alternative.logprob <= 0 && alternative.logprob >= -9999);
          assert.ok(alternative.bytes === null || Array.isArray(alternative.bytes));
        }
      }
    }
    // As ids: the sampled token, when it is among the alternatives, has the same logprob there.
    const response = await create({
      logprobs: true,
      top_logprobs: 20,
      return_tokens_as_token_ids: true,
      max_tokens: 4,
      seed: 9,
    });
    for (const entry of response.choices[0].logprobs.content) {
      assert.match(entry.token, /^token_id:\d+$/);
      assert.equal(entry.top_logprobs.length, 20);
      assert.equal(
        new Set(entry.top_logprobs.map((alternative: any) => alternative.token)).size,
        20,
        'distinct alternatives',
      );
      for (const alternative of entry.top_logprobs) assert.match(alternative.token, /^token_id:\d+$/);
      const same = entry.top_logprobs.find((alternative: any) => alternative.token === entry.token);
      if (same) assert.ok(Math.abs(same.logprob - entry.logprob) < 1e-4);
    }
  });

  test('prompt_logprobs: one entry per prompt token, the first null', async () => {
    const response = await create({ prompt_logprobs: 2, return_token_ids: true, max_tokens: 2 });
    const entries = response.prompt_logprobs;
    assert.equal(entries.length, response.usage.prompt_tokens);
    assert.equal(entries[0], null);
    entries.slice(1).forEach((entry: Record<string, any>, i: number) => {
      const actual = String(response.prompt_token_ids[i + 1]);
      assert.ok(actual in entry, 'the actual prompt token is always there');
      const values = Object.values(entry);
      assert.ok(values.length >= 2 && values.length <= 3, `top 2 plus the actual token: ${values.length}`);
      for (const value of values) {
        assert.ok(value.logprob <= 0 && Number.isInteger(value.rank) && value.rank >= 1);
        assert.equal(typeof value.decoded_token, 'string');
      }
    });
    assert.equal((await create({ max_tokens: 2 })).prompt_logprobs, null);
  });

  test('return_token_ids: the completion ids and the prompt ids, which decode to the rendered chat template', async () => {
    const response = await create({ return_token_ids: true, max_tokens: 5, seed: 2 });
    const [choice] = response.choices;
    assert.equal(choice.token_ids.length, response.usage.completion_tokens);
    assert.ok(choice.token_ids.every((id: number) => Number.isInteger(id) && id >= 0 && id < VOCAB));
    assert.equal(response.prompt_token_ids.length, response.usage.prompt_tokens);
    assert.equal(tokenizer.decode(response.prompt_token_ids), HI_PROMPT);
    assert.equal(
      choice.logprobs.content.map((entry: any) => entry.token).join(','),
      choice.token_ids.map((id: number) => `token_id:${id}`).join(','),
    );
    const without = await create({ max_tokens: 1 });
    assert.equal(without.prompt_token_ids, null);
    assert.equal(without.choices[0].token_ids, null);
  });

  test('the answer is exactly what api/chat.ts declares, with every optional part present or absent', async () => {
    const full = {
      n: 2,
      seed: 4,
      logprobs: true,
      top_logprobs: 3,
      prompt_logprobs: 2,
      return_token_ids: true,
      return_tokens_as_token_ids: false,
    };
    for (const body of [full, { logprobs: false }]) {
      const response = JSON.parse(JSON.stringify(await create(body)));
      assert.deepEqual(
        [...Value.Errors(ChatCompletion, response)].map((e) => `${e.path}: ${e.message}`),
        [],
        JSON.stringify(response),
      );
    }
  });

  test('tool conversation: tools, an assistant tool call and its tool result are accepted and rendered by the template', async () => {
    const messages = [
      { role: 'system', content: 'You check the weather.' },
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21}' },
    ];
    const response = await create({ messages, tools: [WEATHER_TOOL], max_tokens: 6, seed: 4, return_token_ids: true });
    const prompt = tokenizer.decode(response.prompt_token_ids);
    assert.ok(prompt.startsWith('<|im_start|>system\nYou check the weather.\n\n# Tools\n'), prompt);
    assert.ok(prompt.includes('<tools>\n{"type": "function", "function": {"name": "get_weather"'), prompt);
    assert.ok(
      prompt.endsWith(
        '<|im_start|>user\nWeather in Paris?<|im_end|>\n' +
          '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n' +
          '<|im_start|>user\n<tool_response>\n{"temp_c": 21}\n</tool_response><|im_end|>\n' +
          '<|im_start|>assistant\n',
      ),
      prompt,
    );
    const [choice] = response.choices;
    assert.equal(choice.message.role, 'assistant');
    assert.ok(['stop', 'length'].includes(choice.finish_reason), 'after the tool result it answers in words');
    assert.deepEqual(choice.message.tool_calls, []);

    // The SDK's own assistant message (refusal, annotations, reasoning, empty tool_calls…) goes back as it came.
    const next = await create({
      messages: [...HI, choice.message, { role: 'user', content: 'and?' }],
      tools: [WEATHER_TOOL],
      tool_choice: 'auto',
      max_tokens: 2,
    });
    assert.equal(next.choices[0].message.role, 'assistant');
    // Custom roles and content parts, as vLLM accepts them: text parts joined with a newline.
    const parts = await create({
      messages: [
        {
          role: 'narrator',
          content: [
            { type: 'text', text: 'Once' },
            { type: 'text', text: ' upon' },
          ],
        },
      ],
      max_tokens: 2,
      return_token_ids: true,
    });
    assert.ok(tokenizer.decode(parts.prompt_token_ids).includes('<|im_start|>narrator\nOnce\n upon<|im_end|>\n'));
  });

  test('tool-call tags the model writes that hold no valid call stay content (auto) or are left alone (none)', async () => {
    const toolCallTag = tokenizer.tokenId('<tool_call>')!;
    for (const toolChoice of ['auto', 'none']) {
      const response = await create({
        tools: [WEATHER_TOOL],
        tool_choice: toolChoice,
        allowed_token_ids: [toolCallTag],
        max_tokens: 3,
      });
      const [choice] = response.choices;
      assert.equal(choice.message.content, '<tool_call><tool_call><tool_call>', toolChoice);
      assert.deepEqual(choice.message.tool_calls, []);
      assert.equal(choice.finish_reason, 'length');
    }
  });

  test('prefill: continue_final_message leaves the last assistant message open; echo prepends it', async () => {
    const prefix = 'The answer is';
    const messages = [...HI, { role: 'assistant', content: prefix }];
    const body = {
      messages,
      continue_final_message: true,
      add_generation_prompt: false,
      max_tokens: 5,
      seed: 8,
      return_token_ids: true,
    };
    const plain = await create(body);
    assert.equal(
      tokenizer.decode(plain.prompt_token_ids),
      `${HI_PROMPT}${prefix}`,
      'the prompt ends inside the message, with no end of turn',
    );
    assert.equal(plain.choices[0].message.role, 'assistant');
    const echoed = await create({ ...body, echo: true });
    assert.deepEqual(echoed.choices[0].token_ids, plain.choices[0].token_ids);
    assert.equal(echoed.choices[0].message.content, prefix + plain.choices[0].message.content);
    assert.equal(echoed.usage.completion_tokens, plain.usage.completion_tokens);
    // Without prefill the same conversation is closed and a new assistant turn opens.
    const closed = await create({ messages, max_tokens: 1, return_token_ids: true });
    assert.equal(tokenizer.decode(closed.prompt_token_ids), `${HI_PROMPT}${prefix}<|im_end|>\n<|im_start|>assistant\n`);
  });

  describe('validation: 400 with the OpenAI error body and the offending param', () => {
    const cases: [string, Record<string, unknown>, string, string | RegExp][] = [
      [
        'continue_final_message with add_generation_prompt',
        {
          messages: [...HI, { role: 'assistant', content: 'x' }],
          continue_final_message: true,
          add_generation_prompt: true,
        },
        'continue_final_message',
        'Cannot set both `continue_final_message` and `add_generation_prompt` to True.',
      ],
      [
        'continue_final_message without add_generation_prompt:false',
        { messages: [...HI, { role: 'assistant', content: 'x' }], continue_final_message: true },
        'continue_final_message',
        /Cannot set both/,
      ],
      [
        'top_logprobs without logprobs',
        { top_logprobs: 2 },
        'top_logprobs',
        'when using `top_logprobs`, `logprobs` must be set to true.',
      ],
      ['top_logprobs with logprobs:false', { logprobs: false, top_logprobs: 2 }, 'top_logprobs', /must be set to true/],
      [
        'top_logprobs 21',
        { logprobs: true, top_logprobs: 21 },
        'top_logprobs',
        'Requested sample logprobs of 21, which is greater than max allowed: 20',
      ],
      [
        'top_logprobs -2',
        { logprobs: true, top_logprobs: -2 },
        'top_logprobs',
        '`top_logprobs` must be a positive value or -1.',
      ],
      [
        'stream_options without stream',
        { stream_options: { include_usage: true } },
        'stream_options',
        'Stream options can only be defined when `stream=True`.',
      ],
      [
        'stream_options {include_usage: null} without stream',
        { stream_options: { include_usage: null } },
        'stream_options',
        /stream=True/,
      ],
      [
        'prompt_logprobs with stream',
        { stream: true, prompt_logprobs: 1 },
        'prompt_logprobs',
        '`prompt_logprobs` are not available when `stream=True`.',
      ],
      ['prompt_logprobs 21', { prompt_logprobs: 21 }, 'prompt_logprobs', /greater than max allowed: 20/],
      ['n > 1 at temperature 0', { n: 2, temperature: 0 }, 'n', 'n must be 1 when using greedy sampling, got 2.'],
      ['n 0', { n: 0 }, 'n', 'n must be in [1, 128], got 0.'],
      ['n 129', { n: 129 }, 'n', 'n must be in [1, 128], got 129.'],
      ['negative temperature', { temperature: -0.5 }, 'temperature', 'temperature must be in [0, 1000000], got -0.5.'],
      [
        'temperature beyond the engine',
        { temperature: 1e7 },
        'temperature',
        'temperature must be in [0, 1000000], got 10000000.',
      ],
      [
        'presence_penalty above 2',
        { presence_penalty: 2.5 },
        'presence_penalty',
        /presence_penalty must be in \[-2, 2\]/,
      ],
      [
        'frequency_penalty below -2',
        { frequency_penalty: -3 },
        'frequency_penalty',
        /frequency_penalty must be in \[-2, 2\]/,
      ],
      [
        'repetition_penalty 0',
        { repetition_penalty: 0 },
        'repetition_penalty',
        'repetition_penalty must be in (0, 1000000], got 0.',
      ],
      [
        'repetition_penalty beyond the engine',
        { repetition_penalty: 9007199254740993 },
        'repetition_penalty',
        /^repetition_penalty must be in \(0, 1000000\], got 9007199254740992\.$/,
      ],
      [
        'streamed repetition_penalty beyond the engine',
        { stream: true, repetition_penalty: 9007199254740993 },
        'repetition_penalty',
        /repetition_penalty must be in \(0, 1000000\]/,
      ],
      ['top_p 0', { top_p: 0 }, 'top_p', /top_p must be in \(0, 1\]/],
      ['top_p above 1', { top_p: 1.5 }, 'top_p', /top_p must be in \(0, 1\]/],
      ['min_p above 1', { min_p: 1.5 }, 'min_p', /min_p must be in \[0, 1\]/],
      ['min_p below 0', { min_p: -0.1 }, 'min_p', /min_p must be in \[0, 1\]/],
      ['top_k -2', { top_k: -2 }, 'top_k', 'top_k must be 0 or -1 (disable), or in [1, 2147483647], got -2.'],
      [
        'top_k beyond the engine',
        { top_k: 2 ** 31 },
        'top_k',
        'top_k must be 0 or -1 (disable), or in [1, 2147483647], got 2147483648.',
      ],
      ['top_k that JSON writes with an exponent', { top_k: 1e21 }, 'top_k', /top_k must be 0 or -1/],
      [
        'a tool without a name',
        { tools: [{ type: 'function', function: { description: 'x' } }] },
        'tools.0.function.name',
        /tools\.0\.function\.name: Field required/,
      ],
      [
        'a tool call without a name',
        {
          messages: [
            ...HI,
            {
              role: 'assistant',
              content: null,
              tool_calls: [{ id: 'c', type: 'function', function: { arguments: '{}' } }],
            },
            { role: 'tool', tool_call_id: 'c', content: 'x' },
          ],
        },
        'messages',
        'messages[1].tool_calls[0].function.name must be a non-empty string: the function the call names',
      ],
      ['max_tokens 0', { max_tokens: 0 }, 'max_tokens', 'max_tokens must be at least 1, got 0.'],
      [
        'max_tokens above the context',
        { max_tokens: CONTEXT + 1 },
        'max_tokens',
        `max_tokens=${CONTEXT + 1} cannot be greater than max_model_len=${CONTEXT}. Please request fewer output tokens.`,
      ],
      [
        'max_completion_tokens above the context',
        { max_completion_tokens: 5000 },
        'max_completion_tokens',
        /max_completion_tokens=5000 cannot be greater than max_model_len=2048/,
      ],
      [
        'prompt + max_tokens above the context',
        { max_tokens: CONTEXT },
        'input_tokens',
        new RegExp(
          `^This model's maximum context length is ${CONTEXT} tokens\\. However, you requested ${CONTEXT} output tokens and your prompt contains \\d+ input tokens, for a total of \\d+ tokens\\. Please reduce the length of the input prompt or the number of requested output tokens\\.$`,
        ),
      ],
      [
        'min_tokens above max_tokens',
        { max_tokens: 2, min_tokens: 3 },
        'min_tokens',
        /min_tokens must be less than or equal to max_tokens=2/,
      ],
      ['empty stop string', { stop: '' }, 'stop', 'stop cannot contain an empty string.'],
      ['empty stop string in a list', { stop: ['ok', ''] }, 'stop', 'stop cannot contain an empty string.'],
      ['empty bad word', { bad_words: [''] }, 'bad_words', /bad_words cannot contain an empty string/],
      [
        'out-of-vocab logit_bias',
        { logit_bias: { [String(VOCAB)]: 5 } },
        'logit_bias',
        `token_id(s) [${VOCAB}] in logit_bias contain out-of-vocab token ids. Vocabulary size: ${VOCAB}`,
      ],
      [
        'out-of-vocab allowed_token_ids',
        { allowed_token_ids: [1, VOCAB + 5] },
        'allowed_token_ids',
        'allowed_token_ids contains out-of-vocab token id!',
      ],
      [
        'empty allowed_token_ids',
        { allowed_token_ids: [] },
        'allowed_token_ids',
        'allowed_token_ids is not None and empty!',
      ],
      ['out-of-vocab stop_token_ids', { stop_token_ids: [VOCAB] }, 'stop_token_ids', /out-of-vocab/],
      ['priority other than 0', { priority: 1 }, 'priority', /priority/],
      ['use_beam_search', { use_beam_search: true }, 'use_beam_search', /use_beam_search/],
      [
        'truncate_prompt_tokens above the input budget',
        { max_tokens: 16, truncate_prompt_tokens: CONTEXT - 8 },
        'truncate_prompt_tokens',
        `truncate_prompt_tokens=${CONTEXT - 8} cannot be greater than max_model_len - max_tokens = ${CONTEXT - 16}. Please request a smaller truncation size.`,
      ],
      [
        'empty cache_salt',
        { cache_salt: '' },
        'cache_salt',
        "Parameter 'cache_salt' must be a non-empty string if provided.",
      ],
      [
        'tools: []',
        { tools: [] },
        'tools',
        '`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.',
      ],
      [
        'tool_choice without tools',
        { tool_choice: 'auto' },
        'tool_choice',
        'When using `tool_choice`, `tools` must be set.',
      ],
      [
        'unknown tool_choice string',
        { tools: [WEATHER_TOOL], tool_choice: 'sometimes' },
        'tool_choice',
        'Invalid value for `tool_choice`: sometimes! Only named tools, "none", "auto" or "required" are supported.',
      ],
      ['tool_choice {}', { tools: [WEATHER_TOOL], tool_choice: {} }, 'tool_choice', /Invalid value for `function`/],
      [
        'tool_choice without a name',
        { tools: [WEATHER_TOOL], tool_choice: { type: 'function', function: {} } },
        'tool_choice',
        /Expected field `name` in `function` in `tool_choice`/,
      ],
      [
        'tool_choice naming no tool',
        { tools: [WEATHER_TOOL], tool_choice: { type: 'function', function: { name: 'get_time' } } },
        'tool_choice',
        'The tool specified in `tool_choice` does not match any of the specified `tools`',
      ],
      [
        'response_format json_schema without its schema',
        { response_format: { type: 'json_schema' } },
        'response_format',
        "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
      ],
      ['seed outside int64', { seed: 1e20 }, 'seed', /less than or equal/],
      ['a wrongly typed field', { n: 'three' }, 'n', /integer/],
    ];
    for (const [name, body, param, message] of cases) {
      test(name, async () => {
        const response = await e2e.api('POST', '/v1/chat/completions', {
          model: BASE,
          messages: HI,
          max_tokens: 4,
          ...body,
        });
        assert.equal(response.status, 400, JSON.stringify(response.body));
        assert.deepEqual(Object.keys(response.body), ['error']);
        const { error } = response.body;
        assert.deepEqual(Object.keys(error).sort(), ['code', 'message', 'param', 'type']);
        assert.equal(error.type, 'BadRequestError');
        assert.equal(error.code, 400);
        assert.equal(error.param, param, error.message);
        if (typeof message === 'string') assert.equal(error.message, message);
        else assert.match(error.message, message);
      });
    }

    test('the SDK surfaces them as BadRequestError with param and message; the server keeps serving', async () => {
      await assert.rejects(create({ top_logprobs: 3 }), (error: unknown) => {
        assert.ok(error instanceof OpenAI.BadRequestError);
        assert.equal(error.status, 400);
        assert.equal(error.param, 'top_logprobs');
        assert.equal(error.type, 'BadRequestError');
        assert.match(error.message, /`logprobs` must be set to true/);
        return true;
      });
      assert.equal((await create({ max_tokens: 1 })).usage.completion_tokens, 1);
    });

    test('edge values that are valid: logit_bias on the last id, top_k -1 and 0, top_logprobs 20, an empty stream_options object', async () => {
      for (const body of [
        { logit_bias: { [String(VOCAB - 1)]: 100 } },
        { top_k: -1 },
        { top_k: 0 },
        { logprobs: true, top_logprobs: 20 },
        { stream_options: {} },
        { temperature: 0 },
        { seed: -1 },
      ]) {
        const response = await e2e.api('POST', '/v1/chat/completions', {
          model: BASE,
          messages: HI,
          max_tokens: 2,
          ...body,
        });
        assert.equal(response.status, 200, `${JSON.stringify(body)}: ${JSON.stringify(response.body)}`);
      }
      // A +100 bias on one id makes it (nearly) the only choice.
      const biased = await create({
        logit_bias: { '300': 100 },
        max_tokens: 3,
        return_token_ids: true,
        ignore_eos: true,
      });
      assert.deepEqual(biased.choices[0].token_ids, [300, 300, 300]);
    });
  });

  describe('models: unknown, another entity’s, checkpoints', () => {
    let modelId: string;
    const mine = 'local/chat/policy';
    let otherKey: string;

    before(async () => {
      const created = await e2e.api('POST', '/v1/preview/models', {
        project: 'chat',
        name: 'policy',
        base_model: BASE,
      });
      assert.equal(created.status, 200, JSON.stringify(created.body));
      modelId = created.body.id;
      otherKey = (await e2e.server.services.auth.createKey('other')).key;
    });

    test('an unknown model is a 404 NotFoundError with param "model"', async () => {
      for (const model of ['no-such-model', 'local/chat/missing', `${mine}:step9`, 'builtin/tiny-chat:step0']) {
        const response = await e2e.api('POST', '/v1/chat/completions', { model, messages: HI, max_tokens: 2 });
        assert.equal(response.status, 404, model);
        assert.deepEqual(response.body, {
          error: {
            message: `The model \`${model}\` does not exist.`,
            type: 'NotFoundError',
            param: 'model',
            code: 404,
          },
        });
      }
      await assert.rejects(
        create({ model: 'no-such-model' }),
        (error: unknown) => error instanceof OpenAI.NotFoundError && error.param === 'model',
      );
    });

    test('another entity’s model is as unknown as a missing one', async () => {
      for (const model of [mine, `${mine}:step0`, `wandb-artifact:///${mine}:latest`]) {
        const mineResponse = await e2e.api('POST', '/v1/chat/completions', { model, messages: HI, max_tokens: 2 });
        assert.equal(mineResponse.status, 200, `${model}: ${JSON.stringify(mineResponse.body)}`);
        assert.equal(mineResponse.body.model, model);
        const theirs = await e2e.api('POST', '/v1/chat/completions', { model, messages: HI, max_tokens: 2 }, otherKey);
        assert.equal(theirs.status, 404, model);
        assert.equal(theirs.body.error.param, 'model');
        assert.equal(theirs.body.error.type, 'NotFoundError');
      }
      // The other key still reaches the base model.
      assert.equal(
        (await e2e.api('POST', '/v1/chat/completions', { model: BASE, messages: HI, max_tokens: 1 }, otherKey)).status,
        200,
      );
    });

    test('a checkpoint written by training after start is served by the next request, under every name form', async () => {
      const group = await sampleGroup(e2e, mine, 'Say hi.', 2, (_, i) => (i === 0 ? 1 : 0));
      const submitted = await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: modelId,
        trajectory_groups: [group],
      });
      assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
      const job = await waitForJob(e2e, submitted.body.id);
      assert.equal(job.status, 'COMPLETED', JSON.stringify(job.error));
      assert.equal(job.checkpoint_step, 1);

      // One small step may leave the sampled tokens as they were, but never their logprobs.
      const tokens = async (model: string) => {
        const response = await create({ model, seed: 21, max_tokens: 8, ignore_eos: true, return_token_ids: true });
        assert.equal(response.model, model);
        const [choice] = response.choices;
        return {
          ids: choice.token_ids as number[],
          logprobs: choice.logprobs.content.map((entry: any) => entry.logprob) as number[],
        };
      };
      const step0 = await tokens(`${mine}:step0`);
      const step1 = await tokens(`${mine}:step1`);
      assert.notDeepEqual(step1, step0, 'the trained adapter changes the output for the same seed');
      assert.deepEqual(await tokens(`${mine}:step0`), step0, 'older steps stay servable');
      for (const latest of [mine, `${mine}:latest`, `wandb-artifact:///${mine}`, `wandb-artifact:///${mine}:step1`])
        assert.deepEqual(await tokens(latest), step1, latest);
    });
  });
});
