/**
 * Large prompts render and tokenize on the prompt worker (src/conversation/prompt-worker.ts), off the event loop: its ids
 * are exactly the loop's (the built-in model, and Qwen3's, Qwen2.5's and Llama 3.1's real tokenizers and templates),
 * a template that cannot render is still a TemplateError (the caller's 400), and over HTTP a conversation of 20,000
 * messages is refused with the loop's exact token count while the loop stays free.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { BUILTIN_BASE_MODEL } from '../src/config.ts';
import { promptRenderOptions, renderPrompt } from '../src/conversation/prompt.ts';
import { LARGE_PROMPT_CHARS, PromptWorker } from '../src/conversation/prompt-worker.ts';
import { TemplateError } from '../src/conversation/template.ts';
import { type ChatTokenizer, loadTokenizer } from '../src/conversation/tokenizer.ts';
import { FAMILIES, writeTokenizerFolder } from './helpers/families.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'lookup',
      description: 'Find a word.',
      parameters: { type: 'object', properties: { word: { type: 'string' } } },
    },
  },
];

/** A conversation of `turns` user/assistant pairs with varied text (words, digits, accents, an emoji). */
function conversation(turns: number): Record<string, unknown>[] {
  return Array.from({ length: turns }, (_, i) => [
    { role: 'user', content: `Question ${i}: what is ${i} × 7, in words? Réponds vite 🙂` },
    {
      role: 'assistant',
      content: `${i * 7} — that is ${String(i * 7)
        .split('')
        .join(' ')}.`,
    },
  ]).flat();
}

describe('prompt worker', () => {
  let tokenizer: ChatTokenizer;
  let worker: PromptWorker;
  const folders: string[] = [];
  before(async () => {
    tokenizer = await loadTokenizer(BUILTIN_BASE_MODEL.path);
    worker = new PromptWorker();
  });
  after(async () => {
    await worker.close();
    for (const folder of folders) fs.rmSync(folder, { recursive: true, force: true });
  });

  for (const family of ['builtin', ...FAMILIES] as const) {
    test(`${family}: the worker renders and encodes exactly as the loop does, with and without special tokens`, async () => {
      let own = tokenizer;
      if (family !== 'builtin') {
        folders.push(writeTokenizerFolder(family));
        own = await loadTokenizer(folders.at(-1)!);
      }
      const input = {
        template: own.chatTemplate!,
        messages: conversation(400),
        tools: TOOLS,
        addGenerationPrompt: true,
      };
      const options = promptRenderOptions(own, input);
      assert.ok(
        JSON.stringify(options.messages).length > LARGE_PROMPT_CHARS,
        'a conversation the plan sends to the worker',
      );
      const onLoop = renderPrompt(own, input);
      assert.deepEqual(await worker.encode({ folder: own.folder, addSpecialTokens: false, options }), onLoop.ids);
      assert.deepEqual(
        await worker.encode({ folder: own.folder, addSpecialTokens: false, text: onLoop.text }),
        onLoop.ids,
      );
      assert.deepEqual(
        await worker.encode({ folder: own.folder, addSpecialTokens: true, text: onLoop.text }),
        renderPrompt(own, input, { addSpecialTokens: true }).ids,
      );
    });
  }

  test('a template that cannot render is a TemplateError with its message; the worker keeps serving', async () => {
    const options = promptRenderOptions(tokenizer, {
      template: "{{ raise_exception('no system role here') }}",
      messages: conversation(1),
      addGenerationPrompt: true,
    });
    await assert.rejects(
      worker.encode({ folder: tokenizer.folder, addSpecialTokens: false, options }),
      (error) => error instanceof TemplateError && /no system role here/.test(error.message),
    );
    await assert.rejects(
      worker.encode({ folder: '/nonexistent', addSpecialTokens: false, text: 'hi' }),
      (error) => !(error instanceof TemplateError),
    );
    assert.equal(
      (await worker.encode({ folder: tokenizer.folder, addSpecialTokens: false, text: 'hi' })).length > 0,
      true,
    );
  });
});

describe('a 20,000-message chat over HTTP', () => {
  let e2e: E2eServer;
  before(async () => {
    e2e = await startE2eServer();
  });
  after(async () => {
    await e2e.close();
  });

  test('is refused with the exact prompt length, and the event loop is not held while it is tokenized', async (t) => {
    const tokenizer = await loadTokenizer(BUILTIN_BASE_MODEL.path);
    const messages = Array.from({ length: 20_000 }, () => ({ role: 'user', content: 'hi' }));
    // The same work on the loop, for scale: what a request would hold it for without the worker.
    const started = performance.now();
    const expected = renderPrompt(tokenizer, { template: tokenizer.chatTemplate!, messages, addGenerationPrompt: true })
      .ids.length;
    const onLoopMs = performance.now() - started;

    let longestGapMs = 0;
    let last = performance.now();
    const ticker = setInterval(() => {
      const now = performance.now();
      longestGapMs = Math.max(longestGapMs, now - last);
      last = now;
    }, 5);
    const response = await e2e.api('POST', '/v1/chat/completions', { messages, max_tokens: 4 });
    clearInterval(ticker);
    assert.equal(response.status, 400);
    assert.equal(response.body.error.param, 'input_tokens');
    assert.match(response.body.error.message, new RegExp(`your prompt contains ${expected} input tokens`));
    t.diagnostic(
      `longest event-loop gap during the request ${longestGapMs.toFixed(0)} ms; the same work on the loop ${onLoopMs.toFixed(0)} ms`,
    );
    assert.ok(
      longestGapMs < onLoopMs / 2,
      `the loop was held ${longestGapMs.toFixed(0)} ms; the work takes ${onLoopMs.toFixed(0)} ms on it`,
    );
  });
});
