/** Trajectory → tokens, advantages, weights and packing, checked against hand-computed values on the tiny model's tokenizer. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { BUILTIN_BASE_MODEL } from '../src/config.ts';
import { loadTokenizer } from '../src/chat/tokenizer.ts';
import { renderChat } from '../src/chat/template.ts';
import { tokenizeTrajectory, TrajectoryTokenizeError } from '../src/chat/trajectory-tokens.ts';
import { groupAdvantages, packRows, rowLength, weighSequences, type ScoredSequence } from '../src/jobs/rl-data.ts';

const close = (actual: number, expected: number, message?: string) => assert.ok(Math.abs(actual - expected) < 1e-5, `${message ?? ''} ${actual} vs ${expected}`);

describe('advantages and weights', () => {
  test('group advantages: centred, scaled by the population std, zero for equal rewards', () => {
    const scaled = groupAdvantages([1, 0, 1, 0], true);
    scaled.forEach((a, i) => close(a, i % 2 === 0 ? 0.5 / (0.5 + 1e-6) : -0.5 / (0.5 + 1e-6)));
    assert.deepEqual(groupAdvantages([2, 0], false), [1, -1]);
    assert.deepEqual(groupAdvantages([3, 3, 3], true), [0, 0, 0]);
  });

  const seq = (trajectory: number, advantage: number, mask: number[]): ScoredSequence => ({
    tokens: mask.map((_, i) => i + 1),
    mask,
    logprobs: mask.map(() => null),
    advantage,
    trajectory,
  });

  test('each trajectory counts equally whatever its length; advantages normalised by mean |A|·w', () => {
    const sequences = [seq(0, 1, [0, 1, 1, 1, 1]), seq(1, -1, [0, 1])];
    const { weights, advantages } = weighSequences(sequences, 0);
    // raw w: 1/4 for trajectory 0's four tokens, 1/1 for trajectory 1's one token; mean over 5 tokens = 0.4
    close(weights[0][1], 0.25 / 0.4);
    close(weights[1][1], 1 / 0.4);
    assert.equal(weights[0][0], 0);
    // mean(|A|·w) = mean(w) = 1 after normalisation, so A is unchanged
    close(advantages[0][1], 1);
    close(advantages[1][1], -1);
  });

  test('advantage_balance shrinks negative (b > 0) or positive (b < 0) advantages before normalising', () => {
    const sequences = [seq(0, 1, [0, 1]), seq(1, -1, [0, 1])];
    const positive = weighSequences(sequences, 0.5);
    // balanced A: +1, −0.5; mean(|A|·w) with w = 1: 0.75
    close(positive.advantages[0][1], 1 / 0.75);
    close(positive.advantages[1][1], -0.5 / 0.75);
    const negative = weighSequences(sequences, -0.5);
    close(negative.advantages[0][1], 0.5 / 0.75);
    close(negative.advantages[1][1], -1 / 0.75);
  });

  test('packing: first fit, segments restart, first token of a segment never trains, truncation', () => {
    const sequences = [seq(0, 1, [1, 1, 1]), seq(1, -1, [0, 1, 1, 1, 1, 1]), seq(2, 1, [0, 1])];
    const weighted = weighSequences(sequences, 0);
    const rows = packRows(sequences, weighted, 5);
    assert.deepEqual(rows.map((row) => row.segment_ids), [[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]]);
    assert.deepEqual(rows[0].mask, [0, 1, 1, 0, 1]);
    assert.equal(rows[1].tokens.length, 5, 'the 6-token sequence is truncated to the row length');
    assert.equal(rowLength([{ tokens: new Array(2100).fill(1), mask: [], logprobs: [] }], 8192, null), 4096);
    assert.equal(rowLength([{ tokens: new Array(10).fill(1), mask: [], logprobs: [] }], 1024, null), 1024);
    assert.equal(rowLength([], 8192, 512), 512);
  });
});

describe('trajectory tokenization', async () => {
  const tokenizer = await loadTokenizer(BUILTIN_BASE_MODEL.path);
  const template = tokenizer.chatTemplate!;
  const eos = tokenizer.eosTokenId!;

  test('a Choice trains on its exact sampled ids with their logprobs; everything else is context', () => {
    const sampled = [...tokenizer.encode('Paris'), eos];
    const choice = {
      finish_reason: 'stop',
      index: 0,
      message: { role: 'assistant', content: 'Paris' },
      logprobs: { content: sampled.map((id, i) => ({ token: `token_id:${id}`, logprob: -0.1 * (i + 1), bytes: [], top_logprobs: [] })) },
    };
    const messages = [
      { role: 'system', content: 'Answer briefly.' },
      { role: 'user', content: 'Capital of France?' },
    ];
    const sequence = tokenizeTrajectory(tokenizer, template, { messages_and_choices: [...messages, choice, { role: 'user', content: 'dropped' }] }, { allowTrainingWithoutLogprobs: false })!;
    const prompt = tokenizer.encode(renderChat({ template, messages, addGenerationPrompt: true }));
    assert.deepEqual(sequence.tokens.slice(0, prompt.length), prompt);
    assert.deepEqual(sequence.tokens.slice(prompt.length, prompt.length + sampled.length), sampled);
    assert.deepEqual(sequence.mask.filter(Boolean).length, sampled.length);
    assert.deepEqual(sequence.logprobs.filter((l) => l !== null), sampled.map((_, i) => -0.1 * (i + 1)));
    // The rendering of the whole conversation tokenizes to the same ids.
    const whole = tokenizer.encode(renderChat({ template, messages: [...messages, { role: 'assistant', content: 'Paris' }], addGenerationPrompt: false }));
    assert.deepEqual(sequence.tokens, whole);
  });

  test('plain assistant messages are context; without a trainable turn there is nothing to train', () => {
    const items = [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }];
    assert.equal(tokenizeTrajectory(tokenizer, template, { messages_and_choices: items }, { allowTrainingWithoutLogprobs: false }), null);
    const allowed = tokenizeTrajectory(tokenizer, template, { messages_and_choices: items }, { allowTrainingWithoutLogprobs: true })!;
    const trained = allowed.tokens.filter((_, i) => allowed.mask[i]);
    assert.equal(tokenizer.decode(trained), 'hello<|im_end|>');
  });

  test('a sampled token id outside the vocabulary is a tokenize error naming where it is, never a crash in the engine', () => {
    const outside = tokenizer.vocabSize;
    const viaLogprobs = { message: { role: 'assistant', content: 'x' }, logprobs: { content: [{ token: 'token_id:5', logprob: -1 }, { token: `token_id:${outside}`, logprob: -1 }] } };
    const viaTokenIds = { message: { role: 'assistant', content: 'x' }, logprobs: null, token_ids: [5, 99999999] };
    const cases: [Record<string, unknown>, RegExp][] = [
      [viaLogprobs, new RegExp(`messages_and_choices\\.1\\.logprobs\\.content\\.1\\.token: token id ${outside} is outside the vocabulary`)],
      [viaTokenIds, /messages_and_choices\.1\.token_ids\.1: token id 99999999 is outside the vocabulary/],
    ];
    for (const [choice, message] of cases) {
      assert.throws(
        () => tokenizeTrajectory(tokenizer, template, { messages_and_choices: [{ role: 'user', content: 'hi' }, choice] }, { allowTrainingWithoutLogprobs: true }),
        (error: unknown) => error instanceof TrajectoryTokenizeError && message.test(error.message),
      );
    }
  });
});
