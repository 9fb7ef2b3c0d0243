/**
 * ART's captured trajectories (`exchanges`: chat completions, completions, Responses, Messages) → generations,
 * conversations and training tokens, on the built-in model's tokenizer: exact ids where the response carries them, the
 * base model's rendering where it does not, multi-turn rollouts as one sequence (a Responses `previous_response_id`
 * too), branches trained once at their shared start, and malformed exchanges named.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { TrajectoryExchanges } from '../../src/api/models.ts';
import { BUILTIN_BASE_MODEL } from '../../src/config.ts';
import { renderChat } from '../../src/conversation/template.ts';
import { loadTokenizer } from '../../src/conversation/tokenizer.ts';
import { capturedSequences } from '../../src/training/rl/captured.ts';
import { capturedConversations, generationsFor, readExchanges } from '../../src/trajectories/exchanges.ts';

describe('captured trajectories', async () => {
  const tokenizer = await loadTokenizer(BUILTIN_BASE_MODEL.path);
  const template = tokenizer.chatTemplate!;
  const eos = tokenizer.eosTokenId!;
  const base = { tokenizer, template };
  const options = { allow_training_without_logprobs: false, chat_template_kwargs: {} };
  const MODEL = 'wandb-artifact:///local/proj/agent';
  const promptIds = (messages: Record<string, unknown>[]) =>
    tokenizer.encode(renderChat({ template, messages, addGenerationPrompt: true }));
  let clock = 0;
  const times = () => {
    clock += 1;
    return { start_time: `2026-01-01T00:00:${String(clock).padStart(2, '0')}Z`, end_time: `2026-01-01T00:01:00Z` };
  };

  /** A chat exchange as our server answers ART's client (token ids, `token_id:` logprobs), one choice per answer. */
  const chatExchange = (messages: Record<string, unknown>[], answers: string[], exact = true) => {
    const prompt = promptIds(messages);
    const choices = answers.map((content, index) => {
      const ids = [...tokenizer.encode(content), eos];
      return {
        index,
        finish_reason: 'stop',
        message: { role: 'assistant', content },
        logprobs: {
          content: ids.map((id, i) => ({
            token: exact ? `token_id:${id}` : tokenizer.decode([id]),
            logprob: -0.5 - i,
            bytes: exact ? [] : null,
            top_logprobs: [],
          })),
        },
        ...(exact ? { token_ids: ids, prompt_token_ids: prompt } : {}),
      };
    });
    return { request: { model: MODEL, messages }, response: { choices }, ...times() };
  };
  const trained = (sequence: { tokens: number[]; mask: number[] }) =>
    sequence.tokens.filter((_, t) => sequence.mask[t]);
  const sequencesOf = (exchanges: TrajectoryExchanges, allow = false) => {
    const read = readExchanges(exchanges, ['exchanges']);
    assert.deepEqual(read.problems, []);
    return capturedSequences(base, read.generations, { ...options, allow_training_without_logprobs: allow });
  };

  test('a chat exchange trains the sampled ids after the prompt ids the response reports, with their logprobs', () => {
    const messages = [{ role: 'user', content: 'Capital of France?' }];
    const [sequence, ...rest] = sequencesOf({ chat_completions: [chatExchange(messages, ['Paris'])] });
    assert.equal(rest.length, 0);
    const sampled = [...tokenizer.encode('Paris'), eos];
    assert.deepEqual(sequence.tokens, [...promptIds(messages), ...sampled]);
    assert.deepEqual(trained(sequence), sampled);
    assert.deepEqual(
      sequence.logprobs.filter((value) => value !== null),
      sampled.map((_, i) => -0.5 - i),
    );
  });

  test('a multi-turn rollout is one sequence; a branch from an earlier turn trains that turn once', () => {
    const first = [{ role: 'user', content: 'France?' }];
    const turn1 = chatExchange(first, ['Paris']);
    const after = (follow: string) => [
      ...first,
      { role: 'assistant', content: 'Paris' },
      { role: 'user', content: follow },
    ];
    const turn2 = chatExchange(after('Italy?'), ['Rome']);
    const [one] = sequencesOf({ chat_completions: [turn1, turn2] });
    const answer = (text: string) => [...tokenizer.encode(text), eos];
    assert.deepEqual(one.tokens, [...promptIds(after('Italy?')), ...answer('Rome')]);
    assert.deepEqual(trained(one), [...answer('Paris'), ...answer('Rome')]);

    const branch = chatExchange(after('Spain?'), ['Madrid']);
    const branched = sequencesOf({ chat_completions: [turn1, turn2, branch] });
    assert.equal(branched.length, 2, 'two branches from the first answer');
    assert.deepEqual(trained(branched[0]), [...answer('Paris'), ...answer('Rome')]);
    assert.deepEqual(trained(branched[1]), answer('Madrid'), 'the shared first answer trains once');
  });

  test('n choices are branches of one prompt, each trained', () => {
    const messages = [{ role: 'user', content: 'Say a colour.' }];
    const sequences = sequencesOf({ chat_completions: [chatExchange(messages, ['Red', 'Blue'])] });
    assert.deepEqual(
      sequences.map((sequence) => tokenizer.decode(trained(sequence))),
      ['Red<|im_end|>', 'Blue<|im_end|>'],
    );
  });

  test('a response without token evidence: the base model renders the prompt and the answer, without sampler logprobs', () => {
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Capital of France?' },
    ];
    const exchange = chatExchange(messages, ['Paris'], false);
    exchange.response.choices[0].logprobs.content.forEach((entry) => {
      entry.token = 'x';
    });
    const [sequence] = sequencesOf({ chat_completions: [exchange] });
    assert.deepEqual(sequence.tokens.slice(0, promptIds(messages).length), promptIds(messages));
    assert.equal(tokenizer.decode(trained(sequence)), 'Paris<|im_end|>');
    assert.ok(sequence.logprobs.every((value) => value === null));
    const withoutLogprobs = structuredClone(exchange);
    (withoutLogprobs.response.choices[0] as { logprobs: unknown }).logprobs = null;
    assert.deepEqual(sequencesOf({ chat_completions: [withoutLogprobs] }), [], 'no logprobs: not trained by default');
    assert.equal(sequencesOf({ chat_completions: [withoutLogprobs] }, true).length, 1, 'unless allowed');
  });

  test('completions: token-id prompts and token ids are exact; a text prompt is tokenized as the endpoint does', () => {
    const prompt = tokenizer.encode('The capital of France is');
    const sampled = tokenizer.encode(' Paris');
    const exact = {
      request: { model: MODEL, prompt, max_tokens: 4, logprobs: 0 },
      response: {
        choices: [
          { index: 0, text: ' Paris', finish_reason: 'length', token_ids: sampled, logprobs: { token_logprobs: [-1] } },
        ],
      },
      ...times(),
    };
    const [sequence] = sequencesOf({ completions: [exact] });
    assert.deepEqual(sequence.tokens, [...prompt, ...sampled]);
    assert.deepEqual(sequence.logprobs.slice(prompt.length), [-1]);

    const text = {
      request: { model: MODEL, prompt: 'Once upon a time', max_tokens: 4 },
      response: {
        choices: [{ index: 0, text: ' there was', finish_reason: 'stop', logprobs: { tokens: [' there'] } }],
      },
      ...times(),
    };
    const [fallback] = sequencesOf({ completions: [text] });
    const rendered = tokenizer.encode('Once upon a time', { addSpecialTokens: true });
    assert.deepEqual(fallback.tokens, [...rendered, ...tokenizer.encode(' there was'), eos]);
    assert.deepEqual(trained(fallback), [...tokenizer.encode(' there was'), eos]);
  });

  test('responses: token_generations are exact; previous_response_id continues the captured conversation', () => {
    const answer = (text: string) => [...tokenizer.encode(text), eos];
    const response = (id: string, text: string, prompt: number[] | null) => ({
      id,
      status: 'completed',
      output: [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text, annotations: [] }] }],
      ...(prompt
        ? {
            token_generations: [
              {
                prompt_token_ids: prompt,
                output_indices: [0],
                token_ids: answer(text),
                compact_logprobs: answer(text).map(() => -0.25),
              },
            ],
          }
        : {}),
    });
    const system = { role: 'system', content: 'Be brief.' };
    const first = [system, { role: 'user', content: 'France?' }];
    const second = [...first, { role: 'assistant', content: 'Paris' }, { role: 'user', content: 'Italy?' }];
    const exchanges = {
      responses: [
        {
          request: { model: MODEL, instructions: 'Be brief.', input: 'France?' },
          response: response('resp_1', 'Paris', promptIds(first)),
          ...times(),
        },
        {
          request: { model: MODEL, instructions: 'Be brief.', input: 'Italy?', previous_response_id: 'resp_1' },
          response: response('resp_2', 'Rome', promptIds(second)),
          ...times(),
        },
      ],
    };
    const read = readExchanges(exchanges, ['exchanges']);
    assert.deepEqual(read.problems, []);
    assert.deepEqual(read.generations[1].messages, second);
    const [sequence] = sequencesOf(exchanges);
    assert.deepEqual(sequence.tokens, [...promptIds(second), ...answer('Rome')]);
    assert.deepEqual(trained(sequence), [...answer('Paris'), ...answer('Rome')]);
    assert.ok(sequence.logprobs.filter((value) => value !== null).every((value) => value === -0.25));
    // From elsewhere (no token_generations): the base model renders both, and the text trains without logprobs.
    const bare = { responses: [{ ...exchanges.responses[0], response: response('resp_3', 'Paris', null) }] };
    const [fallback] = sequencesOf(bare, true);
    assert.deepEqual(fallback.tokens, [...promptIds(first), ...answer('Paris')]);
  });

  test('messages: the Anthropic conversation and its evidence; without evidence, the base model renders it', () => {
    const answer = [...tokenizer.encode('Paris'), eos];
    const request = {
      model: MODEL,
      system: 'Be brief.',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'France?' }] }],
      max_tokens: 8,
    };
    const chat = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'France?' },
    ];
    const content = [{ type: 'text', text: 'Paris' }];
    const exact = {
      request,
      response: { type: 'message', content, prompt_token_ids: promptIds(chat), token_ids: answer, logprobs: [-1, -1] },
      ...times(),
    };
    const [sequence] = sequencesOf({ messages: [exact] });
    assert.deepEqual(sequence.tokens, [...promptIds(chat), ...answer]);
    assert.deepEqual(sequence.logprobs.slice(-2), [-1, -1]);
    const [rendered] = sequencesOf({ messages: [{ ...exact, response: { type: 'message', content } }] }, true);
    assert.deepEqual(rendered.tokens, [...promptIds(chat), ...answer]);
    assert.ok(rendered.logprobs.every((value) => value === null));
  });

  test('the exchanges a job trains: those naming its model, else those of the one model named, else refused', () => {
    const mine = chatExchange([{ role: 'user', content: 'a' }], ['b']);
    const judge = {
      ...chatExchange([{ role: 'user', content: 'grade' }], ['5']),
      request: { model: 'gpt-4o', messages: [] },
    };
    const { generations } = readExchanges({ chat_completions: [mine, judge] }, []);
    const identity = { entity: 'local', project: 'proj', name: 'agent' };
    assert.equal(generationsFor(generations, identity, []).generations.length, 1);
    const base = readExchanges(
      { chat_completions: [{ ...mine, request: { ...mine.request, model: 'builtin/x' } }] },
      [],
    );
    assert.equal(generationsFor(base.generations, identity, []).generations.length, 1, 'one model named');
    const ambiguous = readExchanges(
      { chat_completions: [{ ...mine, request: { ...mine.request, model: 'a' } }, judge] },
      [],
    );
    assert.match(generationsFor(ambiguous.generations, identity, ['x']).problem!.msg, /ambiguous/);
  });

  test('malformed exchanges are problems naming the field', () => {
    const problems = (exchanges: Record<string, unknown>) =>
      readExchanges(exchanges as TrajectoryExchanges, ['exchanges']).problems.map((p) => p.loc.join('.'));
    assert.deepEqual(problems({ chat_completions: [{ request: {}, response: { choices: [] } }] }), [
      'exchanges.chat_completions.0.request.messages',
    ]);
    assert.deepEqual(problems({ chat_completions: [{ request: { messages: [] }, response: { choices: 'x' } }] }), [
      'exchanges.chat_completions.0.response.choices',
    ]);
    assert.deepEqual(
      problems({ chat_completions: [{ request: { messages: [] }, response: { choices: [{ index: 0 }] } }] }),
      ['exchanges.chat_completions.0.response.choices.0.message'],
    );
    assert.deepEqual(
      problems({
        chat_completions: [{ request: { messages: [] }, response: { choices: [{ message: {}, token_ids: [1, -2] }] } }],
      }),
      ['exchanges.chat_completions.0.response.choices.0.token_ids'],
    );
    assert.deepEqual(problems({ completions: [{ request: { prompt: 5 }, response: { choices: [{ text: '' }] } }] }), [
      'exchanges.completions.0.request.prompt',
    ]);
    assert.deepEqual(
      problems({ completions: [{ request: { prompt: ['a', 'b'] }, response: { choices: [{ text: '' }] } }] }),
      ['exchanges.completions.0.response.choices'],
    );
    const image = { role: 'user', content: [{ type: 'input_image', image_url: 'x' }] };
    assert.deepEqual(problems({ responses: [{ request: { input: [image] }, response: { output: [] } }] }), [
      'exchanges.responses.0.request.input.0.content.0.type',
    ]);
    assert.deepEqual(
      problems({ responses: [{ request: { input: 'a', previous_response_id: 'r' }, response: { output: [] } }] }),
      ['exchanges.responses.0.request.previous_response_id'],
    );
    assert.deepEqual(
      problems({
        messages: [{ request: { messages: [{ role: 'system', content: 'x' }] }, response: { content: [] } }],
      }),
      ['exchanges.messages.0.request.messages.0.role'],
    );
  });

  test('conversations for the dashboard: a rollout is one conversation, each branch another', () => {
    const first = [{ role: 'user', content: 'France?' }];
    const after = (follow: string) => [
      ...first,
      { role: 'assistant', content: 'Paris' },
      { role: 'user', content: follow },
    ];
    const conversations = capturedConversations({
      chat_completions: [
        chatExchange(first, ['Paris']),
        chatExchange(after('Italy?'), ['Rome']),
        chatExchange(after('Spain?'), ['Madrid']),
      ],
    });
    const shown = conversations.map((conversation) =>
      conversation.messages_and_choices.map((item) =>
        String(((item.message as Record<string, unknown>) ?? item).content),
      ),
    );
    assert.deepEqual(shown, [
      ['France?', 'Paris', 'Italy?', 'Rome'],
      ['France?', 'Paris', 'Spain?', 'Madrid'],
    ]);
  });
});
