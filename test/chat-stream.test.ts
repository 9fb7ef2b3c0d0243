/**
 * Chat completions as streams, through the `openai` npm client and raw SSE bytes:
 * - against the real server, engine and tiny model: the `stream()` helper, chunk order (role chunk per choice,
 *   one choice per chunk, finish chunk, usage chunk, `[DONE]`), n=3 interleaving, streamed = non-streamed for a
 *   seed, stop strings held back, token ids, echo, and a client that disconnects freeing its engine slot;
 * - over the real HTTP stack with a scripted engine (exact model output on demand): Hermes tool
 *   calls and `<think>` reasoning in both modes, UTF-8 that is never split, an engine fault mid-stream.
 * `ChoiceOutput` alone, token by token against the whole output: test/unit/choice-output.test.ts.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Value } from '@sinclair/typebox/value';
import OpenAI from 'openai';
import { ChatCompletion, ChatCompletionChunk } from '../src/api/chat.ts';
import { type ChatTokenizer, loadTokenizer } from '../src/conversation/tokenizer.ts';
import { EngineError } from '../src/engine/errors.ts';
import { type GenerateStream, ReplyStream } from '../src/engine/generate-stream.ts';
import type { Engine } from '../src/engine/ops.ts';
import type { GenerateRequest } from '../src/engine/protocol.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { backends } from './helpers/database.ts';
import { waitFor } from './helpers/poll.ts';
import { type E2eServer, startE2eServer, TINY_MODEL_ENV } from './helpers/server.ts';

const BASE = 'builtin/tiny-chat';
const TINY_CHAT = path.join(import.meta.dirname, '..', 'models', 'tiny-chat');
const HI = [{ role: 'user', content: 'hi' }];
const EOS = 2041;
/** How soon a cancelled request must leave the engine: 1500 tokens of the tiny model take several seconds on a CPU. */
const CANCEL_MS = 1500;
const WEATHER_TOOL = {
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
};
const CALL_PARIS = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const CALL_ROME = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "days": 2}}\n</tool_call>';

type Chunk = Record<string, any>;

/** POSTs a chat completion and reads the answer as raw SSE: the text, the `data:` payloads, the parsed chunks. */
async function sse(url: string, key: string, body: Record<string, unknown>, signal?: AbortSignal) {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    signal,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ stream: true, ...body }),
  });
  const text = await response.text();
  assert.equal(response.status, 200, text);
  const events = text.split('\n\n');
  assert.equal(events.pop(), '', 'every event ends with a blank line');
  for (const event of events)
    assert.ok(event.startsWith('data: ') && !event.includes('\n'), `one data line per event: ${JSON.stringify(event)}`);
  const payloads = events.map((event) => event.slice('data: '.length));
  assert.equal(payloads.at(-1), '[DONE]');
  const chunks = payloads.slice(0, -1).map((payload) => JSON.parse(payload) as Chunk);
  // Every chunk is what api/chat.ts declares (an error event, which ends a failing stream, is the error body instead).
  for (const chunk of chunks.filter((chunk) => !('error' in chunk)))
    assert.deepEqual(
      [...Value.Errors(ChatCompletionChunk, chunk)].map((e) => `${e.path}: ${e.message}`),
      [],
      JSON.stringify(chunk),
    );
  return { response, text, payloads, chunks };
}

/** Per choice index: its chunks in order, and the concatenated delta fields. */
function byChoice(chunks: Chunk[]) {
  const choices = new Map<number, { chunks: Chunk[]; content: string; reasoning: string; toolCalls: any[] }>();
  for (const chunk of chunks) {
    for (const choice of chunk.choices) {
      let entry = choices.get(choice.index);
      if (!entry) {
        entry = { chunks: [], content: '', reasoning: '', toolCalls: [] };
        choices.set(choice.index, entry);
      }
      entry.chunks.push(choice);
      entry.content += choice.delta.content ?? '';
      entry.reasoning += choice.delta.reasoning ?? '';
      entry.toolCalls.push(...(choice.delta.tool_calls ?? []));
    }
  }
  return choices;
}

/** The stream invariants every well-formed answer keeps (vLLM's order, the SDK's needs). */
function checkStreamShape(chunks: Chunk[], n: number, options: { usage: boolean }) {
  const id = chunks[0].id;
  assert.match(id, /^chatcmpl-/);
  const body = options.usage ? chunks.slice(0, -1) : chunks;
  for (const chunk of chunks) {
    assert.equal(chunk.id, id);
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.equal(chunk.model, chunks[0].model);
    assert.equal(chunk.created, chunks[0].created);
  }
  for (const chunk of body) {
    assert.equal(chunk.choices.length, 1, 'one choice per chunk');
    assert.ok(chunk.usage === undefined || chunk.usage === null, 'usage only on the final chunk');
  }
  // The role chunks come first, one per choice, in index order.
  for (let index = 0; index < n; index += 1) {
    assert.deepEqual(body[index].choices[0], {
      index,
      delta: { role: 'assistant', content: '' },
      logprobs: null,
      finish_reason: null,
    });
  }
  const choices = byChoice(body);
  assert.deepEqual(
    [...choices.keys()].sort(),
    Array.from({ length: n }, (_, i) => i),
  );
  for (const [index, choice] of choices) {
    const finishes = choice.chunks.filter((c) => c.finish_reason !== null);
    assert.equal(finishes.length, 1, `choice ${index}: exactly one finish chunk`);
    assert.equal(choice.chunks.at(-1), finishes[0], `choice ${index}: the finish chunk is its last`);
    assert.ok('stop_reason' in finishes[0]);
    assert.equal(choice.chunks.filter((c) => c.delta.role !== undefined).length, 1, `choice ${index}: one role`);
  }
  if (options.usage) {
    const last = chunks.at(-1)!;
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + last.usage.completion_tokens);
    assert.ok(Number.isInteger(last.usage.prompt_tokens_details.cached_tokens));
  }
  return choices;
}

describe('streaming with the real engine', () => {
  let e2e: E2eServer;
  let client: OpenAI;
  let tokenizer: ChatTokenizer;
  const create = (body: Record<string, unknown>): Promise<any> =>
    client.chat.completions.create({ model: BASE, messages: HI, max_tokens: 6, ...body } as never) as Promise<any>;
  const stream = (body: Record<string, unknown>, signal?: AbortSignal) =>
    sse(e2e.url, e2e.key, { model: BASE, messages: HI, max_tokens: 6, ...body }, signal);
  const engineLoad = async () => {
    const stats = await e2e.server.services.runtime.sampler().request('stats', {});
    return stats.running + stats.waiting;
  };
  const waitForIdleEngine = (timeoutMs: number, what: string) =>
    waitFor(what, async () => (await engineLoad()) === 0, { timeoutMs, intervalMs: 50 });

  before(async () => {
    e2e = await startE2eServer();
    client = new OpenAI({ baseURL: `${e2e.url}/v1`, apiKey: e2e.key, maxRetries: 0 });
    tokenizer = await loadTokenizer(TINY_CHAT);
  });
  after(async () => {
    await e2e?.close();
  });

  test('the SDK stream() helper finishes without error; its final completion holds the deltas, logprobs by default', async () => {
    const runner = client.chat.completions.stream({
      model: BASE,
      messages: HI as never,
      max_tokens: 8,
      ignore_eos: true,
      seed: 3,
    } as never);
    let deltas = '';
    let logprobCount = 0;
    runner.on('content.delta', ({ delta }) => (deltas += delta));
    runner.on('logprobs.content.delta', ({ content }) => (logprobCount += content.length));
    const final: any = await runner.finalChatCompletion();
    assert.equal(final.choices.length, 1);
    const [choice] = final.choices;
    assert.equal(choice.message.role, 'assistant');
    assert.equal(choice.message.content, deltas);
    assert.equal(choice.finish_reason, 'length');
    assert.equal(choice.logprobs.content.length, 8);
    assert.equal(logprobCount, 8);
    for (const entry of choice.logprobs.content) assert.match(entry.token, /^token_id:\d+$/);
    // The same seed without streaming gives the same answer.
    const whole = await create({ max_tokens: 8, ignore_eos: true, seed: 3 });
    assert.equal(whole.choices[0].message.content, deltas);
    assert.deepEqual(
      whole.choices[0].logprobs.content.map((entry: any) => entry.token),
      choice.logprobs.content.map((entry: any) => entry.token),
    );
  });

  test('create({stream: true}) with include_usage: role chunk, content chunks, finish chunk, usage chunk with choices []', async () => {
    const chunks: Chunk[] = [];
    for await (const chunk of await create({
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 5,
      ignore_eos: true,
      seed: 4,
    }))
      chunks.push(chunk);
    const choices = checkStreamShape(chunks, 1, { usage: true });
    const choice = choices.get(0)!;
    assert.equal(choice.chunks.at(-1)!.finish_reason, 'length');
    assert.equal(choice.chunks.at(-1)!.stop_reason, null);
    const usage = chunks.at(-1)!.usage;
    assert.equal(usage.completion_tokens, 5);
    const logprobs = choice.chunks.flatMap((c) => c.logprobs?.content ?? []);
    assert.equal(logprobs.length, 5, 'one logprob entry per generated token across the chunks');
    const whole = await create({ max_tokens: 5, ignore_eos: true, seed: 4 });
    assert.equal(choice.content, whole.choices[0].message.content);
    assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);

    // Without include_usage there is no usage chunk.
    const plain = await stream({ max_tokens: 2 });
    checkStreamShape(plain.chunks, 1, { usage: false });
    assert.ok(plain.chunks.every((chunk) => chunk.choices.length === 1));
  });

  test('raw SSE bytes: event-stream headers, `data: <json>` events, and `data: [DONE]` at the end', async () => {
    const { response, text, chunks } = await stream({
      max_tokens: 3,
      seed: 6,
      stream_options: { include_usage: true },
    });
    assert.match(response.headers.get('content-type')!, /^text\/event-stream/);
    assert.equal(response.headers.get('cache-control'), 'no-cache');
    assert.ok(text.startsWith('data: {"id":"chatcmpl-'));
    assert.ok(text.endsWith('\n\ndata: [DONE]\n\n'));
    assert.equal(text.match(/\[DONE\]/g)!.length, 1);
    assert.equal(chunks.at(-1)!.usage.completion_tokens, 3);
  });

  test('n=3 streamed: three role chunks first, interleaved content chunks, one finish each, usage summing all; equal to non-streaming', async () => {
    const body = { n: 3, max_tokens: 6, seed: 12, ignore_eos: true, return_token_ids: true };
    const { chunks } = await stream({ ...body, stream_options: { include_usage: true } });
    const choices = checkStreamShape(chunks, 3, { usage: true });
    const order = chunks.slice(3, -1).map((chunk) => chunk.choices[0].index);
    const lastOfFirst = order.lastIndexOf(0);
    assert.ok(
      order.slice(0, lastOfFirst).some((index) => index !== 0),
      `choices interleave: ${order.join(',')}`,
    );
    assert.equal(chunks.at(-1)!.usage.completion_tokens, 18);
    const whole = await create(body);
    for (const [index, choice] of choices) {
      assert.equal(choice.content, whole.choices[index].message.content, `choice ${index}`);
      assert.deepEqual(
        choice.chunks.flatMap((c) => c.token_ids ?? []),
        whole.choices[index].token_ids,
      );
      assert.equal(choice.chunks.at(-1)!.finish_reason, 'length');
    }
    // The SDK's helper assembles the same three choices.
    const final: any = await client.chat.completions
      .stream({ model: BASE, messages: HI, ...body } as never)
      .finalChatCompletion();
    assert.deepEqual(
      final.choices.map((choice: any) => [choice.index, choice.message.content, choice.finish_reason]),
      whole.choices.map((choice: any) => [choice.index, choice.message.content, choice.finish_reason]),
    );
  });

  test('continuous_usage_stats: every chunk carries its choice’s running usage', async () => {
    const { chunks } = await stream({
      max_tokens: 4,
      ignore_eos: true,
      stream_options: { include_usage: true, continuous_usage_stats: true },
    });
    let previous = -1;
    for (const chunk of chunks) {
      assert.ok(chunk.usage, 'usage on every chunk');
      assert.equal(chunk.usage.total_tokens, chunk.usage.prompt_tokens + chunk.usage.completion_tokens);
      assert.ok(chunk.usage.completion_tokens >= previous);
      previous = chunk.usage.completion_tokens;
    }
    assert.equal(chunks.at(-1)!.usage.completion_tokens, 4);
  });

  test('max_tokens while streaming: finish_reason length after exactly that many tokens', async () => {
    const { chunks } = await stream({
      max_completion_tokens: 7,
      ignore_eos: true,
      return_token_ids: true,
      stream_options: { include_usage: true },
    });
    const choice = byChoice(chunks.slice(0, -1)).get(0)!;
    assert.equal(choice.chunks.at(-1)!.finish_reason, 'length');
    assert.equal(choice.chunks.flatMap((c) => c.token_ids ?? []).length, 7);
    assert.equal(chunks.at(-1)!.usage.completion_tokens, 7);
  });

  test('stop strings while streaming: nothing of the stop string is ever sent, stop_reason names it, include_stop_str_in_output keeps it', async () => {
    const seed = 15;
    const free = (await create({ seed, max_tokens: 16, ignore_eos: true })).choices[0].message.content as string;
    let stop = '';
    for (let at = Math.floor(free.length / 3); at + 3 <= free.length && !stop; at += 1) {
      const piece = free.slice(at, at + 3);
      if (!piece.includes('\uFFFD') && piece.trim() === piece) stop = piece;
    }
    assert.ok(stop, `a stop string from ${JSON.stringify(free)}`);
    const at = free.indexOf(stop);

    const cut = byChoice((await stream({ seed, max_tokens: 16, ignore_eos: true, stop })).chunks).get(0)!;
    assert.equal(cut.content, free.slice(0, at));
    assert.equal(cut.chunks.at(-1)!.finish_reason, 'stop');
    assert.equal(cut.chunks.at(-1)!.stop_reason, stop);
    // The SDK agrees.
    const final: any = await client.chat.completions
      .stream({ model: BASE, messages: HI, seed, max_tokens: 16, ignore_eos: true, stop } as never)
      .finalChatCompletion();
    assert.equal(final.choices[0].message.content, free.slice(0, at));
    assert.equal(final.choices[0].finish_reason, 'stop');

    const kept = byChoice(
      (await stream({ seed, max_tokens: 16, ignore_eos: true, stop, include_stop_str_in_output: true })).chunks,
    ).get(0)!;
    assert.equal(kept.content, free.slice(0, at + stop.length));
    assert.equal(kept.chunks.at(-1)!.stop_reason, stop);
  });

  test('a stop string ends the generation in the engine too, streamed or not', async () => {
    const seed = 16;
    const free = (await create({ seed, max_tokens: 12, ignore_eos: true })).choices[0].message.content as string;
    const stop = free.slice(-4).includes('\uFFFD') ? free.slice(2, 5) : free.slice(-4);
    const body = { seed, max_tokens: 1500, ignore_eos: true, stop };
    const whole = await create(body);
    assert.equal(whole.choices[0].finish_reason, 'stop');
    assert.ok(whole.usage.completion_tokens <= 12);
    await waitForIdleEngine(CANCEL_MS, 'no 1500-token generation left behind');
    const { chunks } = await stream(body);
    assert.equal(byChoice(chunks).get(0)!.chunks.at(-1)!.stop_reason, stop);
    await waitForIdleEngine(CANCEL_MS, 'no 1500-token generation left behind');
  });

  test('return_token_ids: prompt_token_ids on the role chunks only; token ids per chunk add up to the answer', async () => {
    const { chunks } = await stream({ return_token_ids: true, max_tokens: 5, seed: 2 });
    assert.ok(Array.isArray(chunks[0].prompt_token_ids));
    assert.equal(
      tokenizer.decode(chunks[0].prompt_token_ids),
      '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n',
    );
    for (const chunk of chunks.slice(1))
      assert.ok(!('prompt_token_ids' in chunk), 'only the first chunk names the prompt');
    const ids = chunks.flatMap((chunk) => chunk.choices[0].token_ids ?? []);
    const whole = await create({ return_token_ids: true, max_tokens: 5, seed: 2 });
    assert.deepEqual(ids, whole.choices[0].token_ids);
  });

  test('prefill with echo while streaming: the prefilled text follows the role chunk, then the continuation', async () => {
    const prefix = 'Sure, here';
    const body = {
      messages: [...HI, { role: 'assistant', content: prefix }],
      continue_final_message: true,
      add_generation_prompt: false,
      max_tokens: 4,
      seed: 30,
    };
    const { chunks } = await stream({ ...body, echo: true });
    assert.deepEqual(chunks[1].choices[0].delta, { content: prefix });
    const whole = await create(body);
    assert.equal(byChoice(chunks).get(0)!.content, prefix + whole.choices[0].message.content);
  });

  test('errors before the stream starts are plain JSON errors; the stream() helper rejects with BadRequestError', async () => {
    const response = await e2e.api('POST', '/v1/chat/completions', {
      model: BASE,
      messages: HI,
      stream: true,
      logprobs: true,
      top_logprobs: 21,
    });
    assert.equal(response.status, 400);
    assert.equal(response.body.error.param, 'top_logprobs');
    const unknown = await e2e.api('POST', '/v1/chat/completions', {
      model: 'local/nope/nope',
      messages: HI,
      stream: true,
    });
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.error.param, 'model');
    await assert.rejects(
      client.chat.completions.stream({ model: BASE, messages: HI, top_logprobs: 2 } as never).finalChatCompletion(),
      (error: unknown) => {
        assert.ok(error instanceof OpenAI.BadRequestError);
        assert.equal(error.param, 'top_logprobs');
        return true;
      },
    );
  });

  test('a stream the client cancels frees its engine slot at once', async () => {
    await waitForIdleEngine(5000, 'idle before');
    const controller = new AbortController();
    const response = await fetch(`${e2e.url}/v1/chat/completions`, {
      method: 'POST',
      signal: controller.signal,
      headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: BASE, messages: HI, stream: true, max_tokens: 1500, ignore_eos: true }),
    });
    const reader = response.body!.getReader();
    let received = '';
    while ((received.match(/\n\n/g) ?? []).length < 3)
      received += new TextDecoder().decode((await reader.read()).value);
    assert.equal(await engineLoad(), 1, 'the request is generating');
    controller.abort();
    await waitForIdleEngine(CANCEL_MS, 'the engine slot is freed long before 1500 tokens are generated');
    // The server goes on serving.
    assert.equal((await create({ max_tokens: 2 })).usage.completion_tokens, 2);
  });

  test('an SDK stream aborted mid-way frees its engine slot too', async () => {
    await waitForIdleEngine(5000, 'idle before');
    const controller = new AbortController();
    const chat = await client.chat.completions.create(
      { model: BASE, messages: HI, stream: true, max_tokens: 1500, ignore_eos: true } as never,
      { signal: controller.signal },
    );
    let seen = 0;
    try {
      // The SDK ends the iteration quietly on its own abort (older versions threw APIUserAbortError).
      for await (const _chunk of chat as never as AsyncIterable<Chunk>) {
        seen += 1;
        if (seen === 3) {
          assert.equal(await engineLoad(), 1, 'the request is generating');
          controller.abort();
        }
      }
    } catch (error) {
      assert.ok(error instanceof OpenAI.APIUserAbortError, String(error));
    }
    assert.ok(seen >= 3 && seen < 100, `the iteration ends soon after the abort: ${seen} chunks`);
    await waitForIdleEngine(CANCEL_MS, 'the engine slot is freed long before 1500 tokens are generated');
  });

  test('a non-streaming client that disconnects frees its engine slot too', async () => {
    await waitForIdleEngine(5000, 'idle before');
    const controller = new AbortController();
    const pending = fetch(`${e2e.url}/v1/chat/completions`, {
      method: 'POST',
      signal: controller.signal,
      headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: BASE, messages: HI, max_tokens: 1500, ignore_eos: true }),
    });
    pending.catch(() => undefined);
    await waitFor('the request to reach the engine', async () => (await engineLoad()) > 0, {
      timeoutMs: 5000,
      intervalMs: 20,
    });
    assert.equal(await engineLoad(), 1, 'the request is generating');
    controller.abort();
    await waitForIdleEngine(CANCEL_MS, 'the engine slot is freed long before 1500 tokens are generated');
    assert.equal((await create({ max_tokens: 2 })).usage.completion_tokens, 2);
  });
});

/**
 * An engine that writes given texts (one per sequence, cycling) token by token, then EOS; or stops at
 * max_tokens; or fails after its tokens when told to. Logprobs are made up but well-formed.
 */
class ScriptedEngine {
  texts: string[] = ['Hello.'];
  failAfterTokens = false;
  constructor(private readonly tokenizer: ChatTokenizer) {}

  /** The unary ops the chat path sends: load_base once per base, stats to see the engine idle. */
  async request(op: string) {
    if (op === 'load_base') return { vocab_size: 2048, context_length: 2048, eos_token_ids: [EOS], num_parameters: 0 };
    if (op === 'stats') return { running: 0, waiting: 0 };
    throw new EngineError('bad_request', `the scripted engine does not serve ${op}`);
  }

  generate(request: GenerateRequest): GenerateStream {
    let cancelled = false;
    const stream = new ReplyStream('scripted', async () => {
      cancelled = true;
    });
    const n = request.n ?? 1;
    const sequences = Array.from({ length: n }, (_, seq) => {
      const ids = [...this.tokenizer.encode(this.texts[seq % this.texts.length]), EOS];
      return ids.length > request.max_tokens!
        ? { ids: ids.slice(0, request.max_tokens!), reason: 'length' as const }
        : { ids, reason: 'stop' as const };
    });
    const failAfterTokens = this.failAfterTokens;
    const top = request.logprobs ?? null;
    void (async () => {
      const longest = Math.max(...sequences.map((sequence) => sequence.ids.length));
      for (let step = 0; step < longest; step += 1) {
        await new Promise((resolve) => setImmediate(resolve));
        if (cancelled) return stream.fail(new EngineError('cancelled', 'cancelled'));
        sequences.forEach(({ ids, reason }, seq) => {
          if (step >= ids.length) return;
          const id = ids[step];
          stream.push({
            type: 'tokens',
            seq,
            tokens: [id],
            ...(top === null
              ? {}
              : {
                  logprobs: [-0.25],
                  top_logprobs: [
                    Array.from(
                      { length: top },
                      (_, rank) => [rank === 0 ? id : (id + rank) % 2039, -0.25 - rank] as [number, number],
                    ),
                  ],
                }),
          });
          if (step === ids.length - 1 && !failAfterTokens)
            stream.push({ type: 'finish', seq, finish_reason: reason, stop_token_id: null });
        });
      }
      if (failAfterTokens) return stream.fail(new EngineError('internal', 'scripted engine fault'));
      stream.push({ type: 'done', prompt_tokens: request.prompt.length, cached_tokens: 0 });
      stream.end();
    })();
    return stream;
  }
}

describe('tool calls, reasoning and faults over HTTP, with a scripted engine', () => {
  let t: TestApp | undefined;
  let url: string;
  let key: string;
  let engine: ScriptedEngine;
  let tokenizer: ChatTokenizer;
  let client: OpenAI;
  const create = (body: Record<string, unknown>): Promise<any> =>
    client.chat.completions.create({ messages: HI, ...body } as never) as Promise<any>;
  /** Both modes for the same script: the whole answer, the raw chunks, and what the SDK's stream() helper assembles. */
  const bothModes = async (texts: string[], body: Record<string, unknown>) => {
    engine.texts = texts;
    const whole = await create(body);
    assert.deepEqual(
      [...Value.Errors(ChatCompletion, JSON.parse(JSON.stringify(whole)))].map((e) => `${e.path}: ${e.message}`),
      [],
      'the answer is what api/chat.ts declares',
    );
    const streamed = await sse(url, key, { messages: HI, ...body, stream_options: { include_usage: true } });
    const helper: any = await client.chat.completions.stream({ messages: HI, ...body } as never).finalChatCompletion();
    return {
      whole,
      chunks: streamed.chunks,
      choices: checkStreamShape(streamed.chunks, body.n === undefined ? 1 : (body.n as number), { usage: true }),
      helper,
    };
  };

  before(async () => {
    tokenizer = await loadTokenizer(TINY_CHAT);
    engine = new ScriptedEngine(tokenizer);
    const engines = { sampler: engine as unknown as Engine, trainer: engine as unknown as Engine };
    t = await startTestApp(backends()[0], {
      env: { LOG_LEVEL: process.env.E2E_LOG_LEVEL ?? 'silent', ENGINE: 'off', ...TINY_MODEL_ENV },
      engines,
    });
    key = t.key;
    url = await t.listen();
    client = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
  });
  after(async () => {
    await t?.close();
  });

  test('a Hermes tool call after some content: tool_calls with an id, type and JSON arguments, finish_reason tool_calls, in both modes', async () => {
    const { whole, choices, chunks, helper } = await bothModes([`Let me check.${CALL_PARIS}`], {
      tools: [WEATHER_TOOL],
    });
    const [choice] = whole.choices;
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.stop_reason, null);
    assert.equal(choice.message.content, 'Let me check.');
    assert.equal(choice.message.tool_calls.length, 1);
    const [call] = choice.message.tool_calls;
    assert.match(call.id, /^chatcmpl-tool-[0-9a-f]{16}$/);
    assert.equal(call.type, 'function');
    assert.equal(call.function.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
    assert.equal(
      whole.usage.completion_tokens,
      tokenizer.encode(`Let me check.${CALL_PARIS}`).length + 1,
      'the tokens and EOS',
    );

    const streamed = choices.get(0)!;
    assert.equal(streamed.content, 'Let me check.');
    assert.ok(!streamed.content.includes('<'), 'no piece of the tag leaked into content');
    assert.equal(streamed.toolCalls.length, 1, 'the call is streamed once, whole');
    const [delta] = streamed.toolCalls;
    assert.equal(delta.index, 0);
    assert.match(delta.id, /^chatcmpl-tool-/);
    assert.equal(delta.type, 'function');
    assert.equal(delta.function.name, 'get_weather');
    assert.deepEqual(JSON.parse(delta.function.arguments), { city: 'Paris' });
    assert.equal(streamed.chunks.at(-1)!.finish_reason, 'tool_calls');
    assert.equal(chunks.at(-1)!.usage.completion_tokens, whole.usage.completion_tokens);

    assert.equal(helper.choices[0].finish_reason, 'tool_calls');
    assert.equal(helper.choices[0].message.content, 'Let me check.');
    assert.equal(helper.choices[0].message.tool_calls[0].function.name, 'get_weather');
    assert.deepEqual(JSON.parse(helper.choices[0].message.tool_calls[0].function.arguments), { city: 'Paris' });
  });

  test('two parallel calls and no content: content null, calls at indices 0 and 1 with distinct ids', async () => {
    const { whole, choices, helper } = await bothModes([`${CALL_PARIS}\n${CALL_ROME}`], {
      tools: [WEATHER_TOOL],
      tool_choice: 'auto',
    });
    const { message } = whole.choices[0];
    assert.equal(message.content, null);
    assert.deepEqual(
      message.tool_calls.map((call: any) => JSON.parse(call.function.arguments)),
      [{ city: 'Paris' }, { city: 'Rome', days: 2 }],
    );
    assert.notEqual(message.tool_calls[0].id, message.tool_calls[1].id);
    const streamed = choices.get(0)!;
    assert.deepEqual(
      streamed.toolCalls.map((call) => call.index),
      [0, 1],
    );
    assert.equal(streamed.content.trim(), '');
    assert.equal(helper.choices[0].message.tool_calls.length, 2);
    assert.equal(helper.choices[0].finish_reason, 'tool_calls');
  });

  test('n=2 choices parse their tool calls independently', async () => {
    const { whole, choices } = await bothModes([CALL_PARIS, 'No call here.'], {
      tools: [WEATHER_TOOL],
      n: 2,
      temperature: 1,
    });
    assert.equal(whole.choices[0].finish_reason, 'tool_calls');
    assert.equal(whole.choices[1].finish_reason, 'stop');
    assert.equal(whole.choices[1].message.content, 'No call here.');
    assert.deepEqual(whole.choices[1].message.tool_calls, []);
    assert.equal(choices.get(0)!.toolCalls.length, 1);
    assert.equal(choices.get(1)!.toolCalls.length, 0);
    assert.equal(choices.get(1)!.content, 'No call here.');
  });

  test('tool_choice none, or no tools: the call text comes back as content untouched', async () => {
    for (const body of [{ tools: [WEATHER_TOOL], tool_choice: 'none' }, {}]) {
      const { whole, choices, helper } = await bothModes([`Hi ${CALL_PARIS}`], body);
      assert.equal(whole.choices[0].message.content, `Hi ${CALL_PARIS}`, JSON.stringify(body));
      assert.deepEqual(whole.choices[0].message.tool_calls, []);
      assert.equal(whole.choices[0].finish_reason, 'stop');
      assert.equal(choices.get(0)!.content, `Hi ${CALL_PARIS}`);
      assert.equal(choices.get(0)!.toolCalls.length, 0);
      assert.equal(helper.choices[0].message.content, `Hi ${CALL_PARIS}`);
    }
  });

  test('a tag with invalid JSON inside is no call: the text stays content, finish_reason stop', async () => {
    const text = 'Hmm <tool_call>\n{"name": "get_weather", "arguments": {oops}\n</tool_call>';
    const { whole, choices } = await bothModes([text], { tools: [WEATHER_TOOL] });
    assert.equal(whole.choices[0].message.content, text);
    assert.deepEqual(whole.choices[0].message.tool_calls, []);
    assert.equal(whole.choices[0].finish_reason, 'stop');
    assert.equal(choices.get(0)!.content, text);
    assert.equal(choices.get(0)!.chunks.at(-1)!.finish_reason, 'stop');
  });

  test('a call cut off by max_tokens is no call: finish_reason length', async () => {
    engine.texts = [CALL_PARIS];
    const whole = await create({ tools: [WEATHER_TOOL], max_tokens: 4 });
    assert.equal(whole.choices[0].finish_reason, 'length');
    assert.deepEqual(whole.choices[0].message.tool_calls, []);
  });

  test('<think> reasoning goes to message.reasoning and reasoning deltas; include_reasoning:false drops it', async () => {
    const text = '<think>\nThe user greets me.\n</think>\n\nHello there.';
    const { whole, choices, helper } = await bothModes([text], {});
    assert.equal(whole.choices[0].message.reasoning.trim(), 'The user greets me.');
    assert.equal(whole.choices[0].message.content, 'Hello there.');
    assert.equal(choices.get(0)!.reasoning, whole.choices[0].message.reasoning);
    assert.equal(choices.get(0)!.content, 'Hello there.');
    assert.equal(helper.choices[0].message.content, 'Hello there.');

    const hidden = await bothModes([text], { include_reasoning: false });
    assert.equal(hidden.whole.choices[0].message.reasoning, null);
    assert.equal(hidden.whole.choices[0].message.content, 'Hello there.');
    assert.equal(hidden.choices.get(0)!.reasoning, '');
    assert.equal(hidden.choices.get(0)!.content, 'Hello there.');
  });

  test('reasoning then a tool call', async () => {
    const { whole, choices } = await bothModes([`<think>\nI need the weather.\n</think>\n\n${CALL_PARIS}`], {
      tools: [WEATHER_TOOL],
    });
    const { message } = whole.choices[0];
    assert.equal(message.reasoning.trim(), 'I need the weather.');
    assert.equal(message.content, null);
    assert.equal(message.tool_calls[0].function.name, 'get_weather');
    assert.equal(whole.choices[0].finish_reason, 'tool_calls');
    assert.equal(choices.get(0)!.reasoning, message.reasoning);
    assert.equal(choices.get(0)!.toolCalls.length, 1);
  });

  test('multi-byte characters split across tokens are never split in a delta', async () => {
    const text = 'Café 😀 naïve 日本';
    const { whole, choices } = await bothModes([text], {});
    assert.equal(whole.choices[0].message.content, text);
    assert.equal(choices.get(0)!.content, text);
    for (const chunk of choices.get(0)!.chunks)
      assert.ok(!(chunk.delta.content ?? '').includes('\uFFFD'), JSON.stringify(chunk.delta));
    assert.ok(
      choices.get(0)!.chunks.some((chunk) => chunk.delta.content === '' && chunk.logprobs?.content.length === 1),
      'a token that ends mid-character still gets its chunk, with its logprob and empty content',
    );
  });

  test('an engine fault mid-stream is one `data: {"error": …}` event and then [DONE]; without streaming a 500', async () => {
    engine.texts = ['Some words before the fault.'];
    engine.failAfterTokens = true;
    try {
      const { payloads, chunks } = await sse(url, key, { messages: HI });
      const last = chunks.at(-1)!;
      assert.deepEqual(Object.keys(last), ['error']);
      assert.equal(last.error.code, 500);
      assert.equal(last.error.type, 'InternalServerError');
      assert.match(last.error.message, /scripted engine fault/);
      assert.equal(payloads.filter((payload) => payload.includes('"error"')).length, 1);
      assert.ok(chunks.length > 2, 'content came before the fault');

      await assert.rejects(
        async () => {
          for await (const _chunk of (await create({ stream: true })) as AsyncIterable<Chunk>);
        },
        (error: unknown) => error instanceof OpenAI.APIError && /scripted engine fault/.test(error.message),
      );

      const response = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ messages: HI }),
      });
      assert.equal(response.status, 500);
      const body = await response.json();
      assert.equal(body.error.type, 'InternalServerError');
      assert.equal(body.error.code, 500);
    } finally {
      engine.failAfterTokens = false;
    }
  });
});
