/**
 * The built-in SmolLM2-135M-Instruct (converted from its GGUF by scripts/install.sh) against an independent
 * reading of the same GGUF: Hugging Face transformers (`gguf_file=`, run by test/reference/smollm2_check.py
 * with $REFERENCE_PYTHON) gives the expected token ids, chat prompts and fp32 log-probabilities; the real
 * server, engine and tokenizer must agree within 1e-4. Also: the chat completion a new user would try
 * answers sensibly, and constrained outputs at temperature 1 keep the documented JSON layout (a real small model
 * is where whitespace between tokens used to take the whole budget) and a structural tag with plain-text tags works.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BUILTIN_BASE_MODEL, loadConfig, repoRoot, SMOLLM2_BASE_MODEL } from '../src/config.ts';
import { renderChat } from '../src/conversation/template.ts';
import type { LoadedBase } from '../src/services/base-model-runtime.ts';
import { layoutBreaks } from './helpers/json-layout.ts';
import { runJsonScript } from './helpers/reference.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const BASE = SMOLLM2_BASE_MODEL.id;
const REFERENCE_PYTHON = process.env.REFERENCE_PYTHON ?? path.join(repoRoot, '.venv-test', 'bin', 'python');
const TOLERANCE = 1e-4;

interface Reference {
  text_ids: number[][];
  chat_text: string[];
  chat_ids: number[][];
  logprobs: (number | null)[][];
  top: [number, number][][][];
}

/** Runs the reference script on one request; it loads the GGUF once per call, so each test file calls it once. */
function reference(request: Record<string, unknown>): Promise<Reference> {
  return runJsonScript<Reference>(REFERENCE_PYTHON, 'test/reference/smollm2_check.py', request);
}

const TEXTS = [
  'What is the capital of France?',
  'Hello world 12345 and 3.14159, $1,000,000 on 2024-11-24.',
  "I'm sure you're right; they'll say WE'VE won.",
  '  leading spaces\n\n\ttabs and\r\nline ends   ',
  'def square(x):\n    return x ** 2  # comment\n',
  'Émilie a mangé 12 crêpes 🍓 — 日本語のテキスト, Ελληνικά.',
  '<|im_start|>user\nhi<|im_end|>\n<|endoftext|>',
];
const CHATS = [
  [{ role: 'user', content: 'What is the capital of France?' }],
  [
    { role: 'system', content: 'You answer in one word.' },
    { role: 'user', content: 'Name a colour.' },
    { role: 'assistant', content: 'Blue.' },
    { role: 'user', content: 'Another one?' },
  ],
];
const LONG_TEXT =
  'The quick brown fox jumps over the lazy dog. A language model predicts the next token from the ones before it, one position at a time.';

test('without BASE_MODELS the server offers SmolLM2 (the default) and the tiny model', () => {
  const config = loadConfig({});
  assert.deepEqual(
    config.baseModels.map((model) => model.id),
    [SMOLLM2_BASE_MODEL.id, BUILTIN_BASE_MODEL.id],
  );
  assert.equal(config.defaultBaseModel, SMOLLM2_BASE_MODEL.id);
  assert.equal(loadConfig({ DEFAULT_BASE_MODEL: BUILTIN_BASE_MODEL.id }).defaultBaseModel, BUILTIN_BASE_MODEL.id);
});

describe('SmolLM2-135M-Instruct against transformers on the same GGUF', () => {
  let e2e: E2eServer;
  let base: LoadedBase;
  let expected: Reference;
  let completion: any;
  let ours: { textIds: number[][]; chatText: string[]; rows: number[][]; logprobs: (number | null)[][] };

  before(async () => {
    const record = path.join(SMOLLM2_BASE_MODEL.path, 'conversion.json');
    assert.ok(existsSync(record), `${SMOLLM2_BASE_MODEL.path} is not converted: run scripts/install.sh`);
    const gguf = path.join(
      repoRoot,
      'models',
      '.cache',
      (JSON.parse(readFileSync(record, 'utf8')) as { source: string }).source,
    );
    e2e = await startE2eServer({ env: { BASE_MODELS: `${BASE}=${SMOLLM2_BASE_MODEL.path}` } });
    const started = Date.now();
    base = await e2e.server.services.runtime.load(BASE);
    const stats = await e2e.server.services.runtime.sampler().request('stats', {});
    console.log(
      `# SmolLM2 load: ${((Date.now() - started) / 1000).toFixed(1)}s, engine RSS ${(stats.rss_bytes / 2 ** 20).toFixed(0)} MiB`,
    );

    completion = (
      await e2e.api('POST', '/v1/chat/completions', {
        model: BASE,
        messages: CHATS[0],
        temperature: 0,
        max_tokens: 24,
        logprobs: true,
        top_logprobs: 5,
        return_token_ids: true,
        return_tokens_as_token_ids: true,
      })
    ).body;
    const textIds = TEXTS.map((text) => base.tokenizer.encode(text));
    const chatText = CHATS.map((messages) =>
      renderChat({ template: base.template!, messages, addGenerationPrompt: true }),
    );
    const rows = [
      [...completion.prompt_token_ids, ...completion.choices[0].token_ids],
      base.tokenizer.encode(LONG_TEXT),
      base.tokenizer.encode(chatText[1]),
    ];
    const forward = await e2e.server.services.runtime
      .sampler()
      .request('forward', { base: BASE, adapter: null, rows: rows.map((tokens) => ({ tokens })) });
    ours = { textIds, chatText, rows, logprobs: forward.logprobs };
    expected = await reference({ gguf, texts: TEXTS, chats: CHATS, rows, top: 5 });
  });
  after(async () => {
    await e2e?.close();
  });

  test('our tokenizer gives transformers’ ids, and our template its chat prompts and their ids', () => {
    assert.deepEqual(ours.textIds, expected.text_ids);
    assert.deepEqual(ours.chatText, expected.chat_text);
    assert.deepEqual(
      ours.chatText.map((text) => base.tokenizer.encode(text)),
      expected.chat_ids,
    );
    assert.deepEqual(completion.prompt_token_ids, expected.chat_ids[0]);
  });

  test('a numeric character is split off alone, as llama.cpp does for tokenizer.ggml.pre "smollm"', () => {
    // transformers' GGUF tokenizer ignores `tokenizer.ggml.pre` = smollm and keeps ' ²' one pre-token (ids 3351, 127);
    // the model was trained with numerals isolated, which is what llama.cpp (and we) do. ASCII digits never merge
    // in this vocabulary, so the two readings agree on every text above.
    const tokenizer = base.tokenizer;
    assert.deepEqual(tokenizer.encode(' ²'), [...tokenizer.encode(' '), ...tokenizer.encode('²')]);
    assert.deepEqual(tokenizer.encode('x 42'), [
      ...tokenizer.encode('x '),
      ...tokenizer.encode('4'),
      ...tokenizer.encode('2'),
    ]);
  });

  test('the engine’s fp32 log-probabilities equal transformers’ within 1e-4 at every position', () => {
    let worst = 0;
    let compared = 0;
    ours.logprobs.forEach((row, r) => {
      assert.equal(row.length, expected.logprobs[r]!.length);
      row.forEach((value, t) => {
        if (t === 0) {
          assert.equal(value, null);
          return;
        }
        worst = Math.max(worst, Math.abs(value! - expected.logprobs[r]![t]!));
        compared += 1;
      });
    });
    console.log(
      `# SmolLM2 engine vs transformers: max |Δ logprob| ${worst.toExponential(2)} over ${compared} positions`,
    );
    assert.ok(compared > 100);
    assert.ok(worst <= TOLERANCE, `max difference ${worst}`);
  });

  test('JSON schema and json_object outputs at temperature 1 over 10 seeds keep the documented layout', async () => {
    const schema = {
      type: 'object',
      properties: {
        city: { type: 'string', maxLength: 20 },
        rank: { type: 'integer', minimum: 1, maximum: 9 },
        tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 3 },
      },
      required: ['city', 'rank', 'tags'],
      additionalProperties: false,
    };
    const messages = [{ role: 'user', content: 'Describe Paris as JSON with a city, a rank and some tags.' }];
    const seeds = Array.from({ length: 10 }, (_, i) => 40 + i);
    const formats = [{ type: 'json_schema', json_schema: { name: 'city', schema } }, { type: 'json_object' }];
    const answers = await Promise.all(
      formats.flatMap((format) =>
        seeds.map(async (seed) => {
          const answer = await e2e.api('POST', '/v1/chat/completions', {
            model: BASE,
            messages,
            response_format: format,
            temperature: 1,
            seed,
            max_tokens: 120,
          });
          return { format: format.type, seed, answer };
        }),
      ),
    );
    let finished = 0;
    for (const { format, seed, answer } of answers) {
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      const [choice] = answer.body.choices;
      const what = `${format} seed ${seed}: ${JSON.stringify(choice.message.content)} (${choice.finish_reason})`;
      assert.deepEqual(layoutBreaks(choice.message.content), [], what);
      if (choice.finish_reason !== 'stop') continue;
      const value = JSON.parse(choice.message.content);
      assert.ok(value !== null && typeof value === 'object' && !Array.isArray(value), what);
      finished += 1;
    }
    console.log(`# SmolLM2 constrained JSON: ${finished} of ${answers.length} finished within 120 tokens`);
    assert.ok(finished >= seeds.length, `${finished} finished`);
  });

  test('a structural tag with plain-text tags (<fn>…</fn>) is served, and every block is valid JSON of its schema', async () => {
    const schema = {
      type: 'object',
      properties: { city: { enum: ['Paris', 'Oslo'] } },
      required: ['city'],
      additionalProperties: false,
    };
    // The model is steered into opening tags: the tokens of "<fn>" are favoured wherever free text may go.
    const bias = Object.fromEntries(base.tokenizer.encode('<fn>').map((id) => [String(id), 8]));
    const answer = await e2e.api('POST', '/v1/chat/completions', {
      model: BASE,
      messages: [{ role: 'user', content: 'Call fn for Paris: write <fn>{"city": "Paris"}</fn>.' }],
      response_format: {
        type: 'structural_tag',
        triggers: ['<fn>'],
        structures: [{ begin: '<fn>', schema, end: '</fn>' }],
      },
      logit_bias: bias,
      temperature: 1,
      seed: 3,
      max_tokens: 80,
    });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    const { content } = answer.body.choices[0].message;
    const blocks = content.split('<fn>').slice(1);
    assert.ok(blocks.length >= 1, `no block opened: ${JSON.stringify(content)}`);
    blocks.forEach((block: string, i: number) => {
      const end = block.indexOf('</fn>');
      if (end === -1 && i === blocks.length - 1 && answer.body.choices[0].finish_reason === 'length') return;
      assert.ok(end !== -1, `block ${i} never closed: ${JSON.stringify(content)}`);
      assert.deepEqual(Object.keys(JSON.parse(block.slice(0, end))), ['city'], JSON.stringify(content));
    });
    console.log(`# SmolLM2 structural tag: ${JSON.stringify(content)}`);
  });

  test('a greedy chat completion says Paris, and its tokens and top-5 logprobs are transformers’ greedy choices', () => {
    const choice = completion.choices[0];
    console.log(`# SmolLM2 answers: ${JSON.stringify(choice.message.content)}`);
    assert.match(choice.message.content, /Paris/);
    assert.equal(choice.finish_reason, 'stop');
    const prompt = completion.prompt_token_ids.length;
    choice.token_ids.forEach((id: number, i: number) => {
      const top = expected.top[0]![prompt + i - 1]!;
      assert.equal(id, top[0]![0], `token ${i} is not transformers' argmax`);
      const reported = choice.logprobs.content[i].top_logprobs as { token: string; logprob: number }[];
      assert.deepEqual(
        reported.map((entry) => Number(entry.token.replace('token_id:', ''))),
        top.map(([tokenId]) => tokenId),
      );
      for (const [j, entry] of reported.entries())
        assert.ok(Math.abs(entry.logprob - top[j]![1]) <= TOLERANCE, `token ${i} top ${j}`);
    });
  });
});
