/**
 * The tiny built-in chat model: deterministic build, HF-loadable tokenizer that round-trips any
 * text, single-id special tokens, and a chat template that renders the Hermes tool format.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Template } from '@huggingface/jinja';
import { ensureTinyModel } from '../../models/make-tiny.ts';
import { pretrainingSet } from '../../models/recipe/pretraining.ts';
import { ConversationTokenizer } from '../../models/recipe/sequences.ts';
import { type ChatTokenizer, loadTokenizer } from '../../src/conversation/tokenizer.ts';

let modelDir: string;
let tokenizer: ChatTokenizer;
const readJson = (name: string) => JSON.parse(readFileSync(join(modelDir, name), 'utf8')) as Record<string, unknown>;

before(async () => {
  modelDir = (await ensureTinyModel()).dir;
  tokenizer = await loadTokenizer(modelDir);
});

describe('tiny model folder', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'tiny-model-'));
  after(() => rmSync(scratch, { recursive: true, force: true }));

  test('a second build into another folder is byte-identical, and a third is skipped', async () => {
    const copy = await ensureTinyModel(join(scratch, 'tiny-chat'));
    assert.equal(copy.built, true);
    const digest = (dir: string, name: string) =>
      createHash('sha256')
        .update(readFileSync(join(dir, name)))
        .digest('hex');
    for (const name of readdirSync(modelDir)) assert.equal(digest(copy.dir, name), digest(modelDir, name), name);
    assert.equal((await ensureTinyModel(copy.dir)).built, false);
  });

  test('is small and holds the HF files', () => {
    const names = readdirSync(modelDir).sort();
    for (const name of [
      'config.json',
      'generation_config.json',
      'model.safetensors',
      'tokenizer.json',
      'tokenizer_config.json',
    ]) {
      assert.ok(names.includes(name), name);
    }
    const bytes = names.reduce((sum, name) => sum + statSync(join(modelDir, name)).size, 0);
    assert.ok(bytes < 10 * 1024 * 1024, `${bytes} bytes`);
  });

  test('safetensors header matches config.json in the Llama layout', () => {
    const config = readJson('config.json') as Record<string, number | string | boolean>;
    assert.equal(config.model_type, 'llama');
    const file = readFileSync(join(modelDir, 'model.safetensors'));
    const headerLength = Number(file.readBigUInt64LE(0));
    assert.equal((8 + headerLength) % 8, 0);
    const header = JSON.parse(file.subarray(8, 8 + headerLength).toString('utf8')) as Record<
      string,
      { dtype: string; shape: number[]; data_offsets: [number, number] }
    >;
    const { __metadata__: _, ...tensors } = header;
    const hidden = Number(config.hidden_size);
    assert.deepEqual(tensors['model.embed_tokens.weight'].shape, [Number(config.vocab_size), hidden]);
    assert.deepEqual(tensors['model.layers.0.self_attn.k_proj.weight'].shape, [
      Number(config.num_key_value_heads) * Number(config.head_dim),
      hidden,
    ]);
    assert.equal(tensors['lm_head.weight'], undefined, 'embeddings are tied');
    assert.equal(Object.keys(tensors).length, 2 + 9 * Number(config.num_hidden_layers));
    const dataBytes = Math.max(...Object.values(tensors).map((t) => t.data_offsets[1]));
    assert.equal(file.length, 8 + headerLength + dataBytes);
    const parameters = Object.values(tensors).reduce((sum, t) => sum + t.shape.reduce((a, b) => a * b, 1), 0);
    assert.equal(parameters, readJson('recipe.json').num_parameters);
    assert.ok(
      Object.values(tensors).every((t) => t.dtype === 'F16'),
      'committed in f16',
    );
  });

  test('is pretrained: the recipe records a falling loss and answers in the chat format', () => {
    const report = readJson('recipe.json').pretraining as {
      first_loss: number;
      final_loss: number;
      ends_turn: number;
      accuracy: Record<string, { greedy: number }>;
    };
    assert.ok(report.final_loss < report.first_loss / 4, JSON.stringify(report));
    assert.ok(report.ends_turn > 0.9, 'greedy answers end their turn');
    assert.ok(report.accuracy.arithmetic_seen.greedy > 0, 'some sums right');
  });
});

describe('pretraining sequences', () => {
  test('tokenize as the whole text does, with the loss on assistant turns and their end only', async () => {
    const template = tokenizer.chatTemplate ?? assert.fail('no template');
    const sequences = new ConversationTokenizer(tokenizer, template);
    const { conversations } = pretrainingSet();
    const kinds = new Set<string>();
    for (const conversation of [
      ...conversations.slice(0, 200),
      ...conversations.filter((c) => c.thinkingOff).slice(0, 5),
    ]) {
      kinds.add(conversation.kind + (conversation.thinkingOff ? '+thinking-off' : ''));
      const { ids, mask } = sequences.tokenize(conversation);
      const text = tokenizer.decode(ids);
      assert.deepEqual(ids, tokenizer.encode(text), "piecewise ids equal the whole text's");
      const trained = tokenizer.decode(ids.filter((_, i) => mask[i] === 1));
      const expected = conversation.messages
        .filter((m) => m.role === 'assistant')
        .map(
          (m) =>
            `${m.content ?? ''}${(m.tool_calls as { function: { name: string; arguments: unknown } }[] | undefined)?.map((call) => `<tool_call>\n${JSON.stringify({ name: call.function.name, arguments: call.function.arguments }).replace(/":/g, '": ').replace(/,"/g, ', "')}\n</tool_call>`).join('\n') ?? ''}<|im_end|>`,
        )
        .join('');
      assert.equal(trained, expected);
      assert.ok(!text.includes('<think>\n\n</think>\n\n') || conversation.thinkingOff);
    }
    // Every kind, and every kind but tool use (whose last turn answers a tool result) also with thinking off.
    assert.deepEqual([...kinds].sort(), [
      'arithmetic',
      'arithmetic+thinking-off',
      'chat',
      'chat+thinking-off',
      'copy',
      'copy+thinking-off',
      'reverse',
      'reverse+thinking-off',
      'tool',
    ]);
  });
});

describe('tiny tokenizer', () => {
  test('fills the vocabulary that config.json declares', () => {
    assert.equal(tokenizer.vocabSize, readJson('config.json').vocab_size);
  });

  test('round-trips any UTF-8 text exactly', () => {
    const texts = [
      'Hello, world! The quick brown fox jumps over the lazy dog.',
      '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
      'def add(a, b):\n    return a + b\n\n\tindented\r\nwindows line',
      '  leading and trailing spaces  ',
      'Ünïcödé, 中文字符, emoji 👩‍💻🎉, combining e\u0301 vs é, RTL שלום',
      '\u0000\u0001 control \u007f and \u00a0 no-break space',
      '12345 + 67890 = 80235',
      '',
    ];
    for (const text of texts) assert.equal(tokenizer.decode(tokenizer.encode(text)), text, JSON.stringify(text));
  });

  test('common words are single tokens and digits are split', () => {
    for (const word of [
      'system',
      'user',
      'assistant',
      ' the',
      ' function',
      ' return',
      ' weather',
      ' answer',
      'name',
      ' tool',
    ]) {
      assert.equal(tokenizer.encode(word).length, 1, JSON.stringify(word));
    }
    assert.deepEqual(
      tokenizer.encode('2025').map((id) => tokenizer.decode([id])),
      ['2', '0', '2', '5'],
    );
  });

  test('added tokens are single ids; only control tokens are special', () => {
    const added = [
      '<|endoftext|>',
      '<|im_start|>',
      '<|im_end|>',
      '<tool_call>',
      '</tool_call>',
      '<tool_response>',
      '</tool_response>',
      '<think>',
      '</think>',
    ];
    for (const content of added) {
      const id = tokenizer.tokenId(content);
      assert.ok(id !== undefined, content);
      assert.deepEqual(tokenizer.encode(content), [id], content);
      assert.deepEqual(tokenizer.encode(`x${content}y`)[1], id, `${content} inside text`);
    }
    assert.equal(tokenizer.eosToken, '<|im_end|>');
    assert.equal(tokenizer.eosTokenId, tokenizer.tokenId('<|im_end|>'));
    assert.equal(tokenizer.padTokenId, tokenizer.tokenId('<|endoftext|>'));
    const text = '<|im_start|>assistant\n<think>\nhm\n</think>\n\n<tool_call>\n{}\n</tool_call><|im_end|>';
    assert.equal(
      tokenizer.decode(tokenizer.encode(text), { skipSpecialTokens: true }),
      'assistant\n<think>\nhm\n</think>\n\n<tool_call>\n{}\n</tool_call>',
    );
  });

  test('token bytes concatenate to the UTF-8 of the text, even inside a character', () => {
    const text = 'naïve 👩‍💻 <tool_call> 中文';
    const ids = tokenizer.encode(text);
    const bytes = Buffer.concat(ids.map((id) => tokenizer.tokenBytes(id) ?? assert.fail(`no bytes for ${id}`)));
    assert.deepEqual(bytes, Buffer.from(text, 'utf8'));
    assert.equal(tokenizer.tokenBytes(tokenizer.vocabSize), undefined);
  });

  test('is loaded once per folder', async () => {
    assert.equal(await loadTokenizer(modelDir), tokenizer);
    assert.equal(await loadTokenizer(join(modelDir, '.')), tokenizer);
  });
});

describe('tiny chat template', () => {
  const tools = [
    {
      type: 'function',
      function: {
        name: 'get_weather',
        description: 'Get the weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    },
  ];
  const render = (context: Record<string, unknown>) =>
    new Template(tokenizer.chatTemplate ?? assert.fail('no template')).render(context);

  test('renders tools, reasoning, tool calls, grouped tool results and the generation prompt', () => {
    const prompt = render({
      tools,
      add_generation_prompt: true,
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Weather in Paris and Rome?' },
        {
          role: 'assistant',
          content: null,
          reasoning: 'I need the tool.',
          tool_calls: [
            { id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } },
            { id: 'c2', type: 'function', function: { name: 'get_weather', arguments: { city: 'Rome' } } },
          ],
        },
        { role: 'tool', tool_call_id: 'c1', content: '{"temp": 21}' },
        { role: 'tool', tool_call_id: 'c2', content: [{ type: 'text', text: 'sunny' }] },
        { role: 'assistant', content: 'Paris is 21 degrees, Rome is sunny.' },
        { role: 'user', content: 'Thanks' },
      ],
    });
    const expected =
      '<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
      'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' +
      '{"type": "function", "function": {"name": "get_weather", "description": "Get the weather", "parameters": ' +
      '{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}\n</tools>\n\n' +
      'For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n' +
      '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' +
      '<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n' +
      '<|im_start|>assistant\n<think>\nI need the tool.\n</think>\n\n' +
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n' +
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call><|im_end|>\n' +
      '<|im_start|>user\n<tool_response>\n{"temp": 21}\n</tool_response>\n<tool_response>\nsunny\n</tool_response><|im_end|>\n' +
      '<|im_start|>assistant\nParis is 21 degrees, Rome is sunny.<|im_end|>\n' +
      '<|im_start|>user\nThanks<|im_end|>\n' +
      '<|im_start|>assistant\n';
    assert.equal(prompt, expected);

    const ids = tokenizer.encode(prompt);
    assert.equal(tokenizer.decode(ids), prompt);
    const count = (content: string) => ids.filter((id) => id === tokenizer.tokenId(content)).length;
    assert.equal(count('<|im_start|>'), 7);
    assert.equal(count('<|im_end|>'), 6);
    assert.equal(count('<tool_call>'), 4); // two in the instructions, two calls
    assert.equal(count('<tool_response>'), 2);
  });

  test('adds the default system prompt, content text after calls, and an empty think block on request', () => {
    assert.equal(
      render({ messages: [{ role: 'user', content: 'Hi' }], add_generation_prompt: true, enable_thinking: false }),
      '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n',
    );
    assert.equal(
      render({
        messages: [
          { role: 'user', content: 'Hi' },
          { role: 'assistant', content: 'Calling.', tool_calls: [{ function: { name: 'f', arguments: {} } }] },
        ],
      }),
      '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n' +
        '<|im_start|>assistant\nCalling.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call><|im_end|>\n',
    );
  });
});
