/** Trajectory → tokens, advantages, weights and packing, checked against hand-computed values on the tiny model's tokenizer. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { BUILTIN_BASE_MODEL } from '../../src/config.ts';
import { renderChat } from '../../src/conversation/template.ts';
import { loadTokenizer } from '../../src/conversation/tokenizer.ts';
import { trainingRenderer } from '../../src/training/render.ts';
import {
  groupAdvantages,
  type Placement,
  packRows,
  rowLength,
  type ScoredSequence,
  weighSequences,
} from '../../src/training/rl/data.ts';
import { rewardStdDevMultiplier, rowSizeMultiplier } from '../../src/training/rl/rate-multipliers.ts';
import { TrajectoryTokenizeError, tokenizeTrajectory } from '../../src/training/rl/tokens.ts';
import { trainedTokens } from '../../src/training/rl/trained-tokens.ts';
import { tokenizeConversation } from '../../src/training/sft/tokens.ts';

const close = (actual: number, expected: number, message?: string) =>
  assert.ok(Math.abs(actual - expected) < 1e-5, `${message ?? ''} ${actual} vs ${expected}`);

describe('advantages and weights', () => {
  test('group advantages: centred, scaled by the population std, zero for equal rewards', () => {
    const scaled = groupAdvantages([1, 0, 1, 0], true);
    for (const [i, a] of scaled.entries()) close(a, i % 2 === 0 ? 0.5 / (0.5 + 1e-6) : -0.5 / (0.5 + 1e-6));
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
    assert.deepEqual(
      rows.map((row) => row.segment_ids),
      [
        [0, 0, 0, 1, 1],
        [0, 0, 0, 0, 0],
      ],
    );
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
  const renderer = trainingRenderer({ tokenizer, template }, null, null);
  const promptIds = (messages: Record<string, unknown>[]) =>
    tokenizer.encode(renderChat({ template, messages, addGenerationPrompt: true }));
  /** A choice as our server returns it, its logprob entries built by `entry` from each sampled id. */
  const choiceOf = (
    content: string,
    entry: (id: number, i: number) => Record<string, unknown>,
    extra: Record<string, unknown> = {},
  ) => {
    const sampled = [...tokenizer.encode(content), eos];
    return {
      sampled,
      choice: {
        finish_reason: 'stop',
        index: 0,
        message: { role: 'assistant', content, ...extra },
        logprobs: { content: sampled.map(entry) },
      },
    };
  };
  const asTokenIds = (id: number, i: number) => ({
    token: `token_id:${id}`,
    logprob: -0.1 * (i + 1),
    bytes: [],
    top_logprobs: [],
  });
  const asText = (id: number, i: number) => ({
    token: tokenizer.decode([id]),
    logprob: -0.1 * (i + 1),
    bytes: Array.from(tokenizer.tokenBytes(id)!),
    top_logprobs: [],
  });

  test('a Choice trains on its exact sampled ids with their logprobs; everything else is context', () => {
    const { sampled, choice } = choiceOf('Paris', asTokenIds);
    const messages = [
      { role: 'system', content: 'Answer briefly.' },
      { role: 'user', content: 'Capital of France?' },
    ];
    const sequences = tokenizeTrajectory(
      renderer,
      { messages_and_choices: [...messages, choice, { role: 'user', content: 'dropped' }] },
      { allow_training_without_logprobs: false },
    );
    assert.equal(sequences.length, 1);
    const [sequence] = sequences;
    const prompt = promptIds(messages);
    assert.deepEqual(sequence.tokens, [...prompt, ...sampled]);
    assert.deepEqual(sequence.mask.filter(Boolean).length, sampled.length);
    assert.deepEqual(
      sequence.logprobs.filter((l) => l !== null),
      sampled.map((_, i) => -0.1 * (i + 1)),
    );
  });

  test('OpenAI SDK logprobs (decoded strings with bytes) recover the same ids and keep every logprob', () => {
    // A multi-byte character split across byte tokens: its pieces decode to U+FFFD, only the bytes identify them.
    const { sampled, choice } = choiceOf('Größe 東京', asText);
    const sequence = tokenizeTrajectory(
      renderer,
      { messages_and_choices: [{ role: 'user', content: 'hi' }, choice] },
      { allow_training_without_logprobs: false },
    )[0];
    assert.deepEqual(
      sequence.tokens.filter((_, t) => sequence.mask[t]),
      sampled,
    );
    assert.ok(
      sequence.mask.every((m, t) => !m || sequence.logprobs[t] !== null),
      'every trained token keeps its sampler logprob',
    );
  });

  test('logprobs that identify no token: re-tokenized, trained without sampler logprobs', () => {
    const { choice } = choiceOf('Paris', (id, i) => ({
      token: tokenizer.decode([id]),
      logprob: -0.1 * (i + 1),
      bytes: null,
      top_logprobs: [],
    }));
    const sequence = tokenizeTrajectory(
      renderer,
      { messages_and_choices: [{ role: 'user', content: 'hi' }, choice] },
      { allow_training_without_logprobs: false },
    )[0];
    assert.equal(tokenizer.decode(sequence.tokens.filter((_, t) => sequence.mask[t])), 'Paris<|im_end|>');
    assert.ok(sequence.logprobs.every((l) => l === null));
  });

  test('consecutive choices whose contexts extend one another share one sequence', () => {
    const first = choiceOf('Paris', asTokenIds);
    const second = choiceOf('Rome', asTokenIds);
    const items = [
      { role: 'user', content: 'France?' },
      first.choice,
      { role: 'user', content: 'Italy?' },
      second.choice,
    ];
    const sequences = tokenizeTrajectory(
      renderer,
      { messages_and_choices: items },
      { allow_training_without_logprobs: false },
    );
    assert.equal(sequences.length, 1);
    const secondPrompt = promptIds([items[0], { role: 'assistant', content: 'Paris' }, items[2]]);
    assert.deepEqual(sequences[0].tokens, [...secondPrompt, ...second.sampled]);
    assert.equal(sequences[0].mask.filter(Boolean).length, first.sampled.length + second.sampled.length);
  });

  test('a template that rewrites earlier turns: the later choice is trained in its own context, never an error', () => {
    // Reasoning only in the last assistant turn, as Qwen3 renders it.
    const rewriting =
      "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' }}{%- if m.role == 'assistant' and loop.last and m.reasoning %}{{ '<think>\\n' + m.reasoning + '\\n</think>\\n\\n' }}{%- endif %}{{ m.content + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}";
    const thinking = { ...renderer, text: trainingRenderer({ tokenizer, template: rewriting }, null, null).text };
    const think = (answer: string) => `<think>\nhmm\n</think>\n\n${answer}`;
    const first = choiceOf(think('Paris'), asTokenIds);
    const second = choiceOf(think('Rome'), asTokenIds);
    const firstMessage = { ...first.choice, message: { role: 'assistant', content: 'Paris', reasoning: 'hmm' } };
    const items = [
      { role: 'user', content: 'France?' },
      firstMessage,
      { role: 'user', content: 'Italy?' },
      second.choice,
    ];
    const sequences = tokenizeTrajectory(
      thinking,
      { messages_and_choices: items },
      { allow_training_without_logprobs: false },
    );
    assert.equal(
      sequences.length,
      2,
      'the second context drops the first turn’s reasoning, so it cannot extend the first sequence',
    );
    const context = tokenizer.encode(
      renderChat({
        template: rewriting,
        messages: [items[0], firstMessage.message, items[2]],
        addGenerationPrompt: true,
      }),
    );
    assert.deepEqual(sequences[1].tokens, [...context, ...second.sampled]);
    assert.deepEqual(
      sequences[0].tokens.filter((_, t) => sequences[0].mask[t]),
      first.sampled,
    );
  });

  test('a sampled token id outside the vocabulary is a tokenize error naming where it is, never a crash in the engine', () => {
    const outside = tokenizer.vocabSize;
    const viaLogprobs = {
      message: { role: 'assistant', content: 'x' },
      logprobs: {
        content: [
          { token: 'token_id:5', logprob: -1 },
          { token: `token_id:${outside}`, logprob: -1 },
        ],
      },
    };
    const viaTokenIds = { message: { role: 'assistant', content: 'x' }, logprobs: null, token_ids: [5, 99999999] };
    const cases: [Record<string, unknown>, RegExp][] = [
      [
        viaLogprobs,
        new RegExp(
          `messages_and_choices\\.1\\.logprobs\\.content\\.1\\.token: token id ${outside} is outside the vocabulary`,
        ),
      ],
      [viaTokenIds, /messages_and_choices\.1\.token_ids\.1: token id 99999999 is outside the vocabulary/],
    ];
    for (const [choice, message] of cases) {
      assert.throws(
        () =>
          tokenizeTrajectory(
            renderer,
            { messages_and_choices: [{ role: 'user', content: 'hi' }, choice] },
            { allow_training_without_logprobs: true },
          ),
        (error: unknown) => error instanceof TrajectoryTokenizeError && message.test(error.message),
      );
    }
  });

  test('plain assistant messages are context, allowed or not; a choice without logprobs trains only when allowed', () => {
    const items = [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'hello' },
    ];
    for (const allowTrainingWithoutLogprobs of [false, true])
      assert.deepEqual(
        tokenizeTrajectory(
          renderer,
          { messages_and_choices: items },
          { allow_training_without_logprobs: allowTrainingWithoutLogprobs },
        ),
        [],
      );
    const choice = [items[0], { index: 0, finish_reason: 'stop', message: items[1], logprobs: null }];
    assert.deepEqual(
      tokenizeTrajectory(renderer, { messages_and_choices: choice }, { allow_training_without_logprobs: false }),
      [],
    );
    const [allowed] = tokenizeTrajectory(
      renderer,
      { messages_and_choices: choice },
      { allow_training_without_logprobs: true },
    );
    const trained = allowed.tokens.filter((_, i) => allowed.mask[i]);
    assert.equal(tokenizer.decode(trained), 'hello<|im_end|>');
    assert.ok(allowed.logprobs.every((logprob) => logprob === null));
  });
});

describe('SFT rows', async () => {
  const tokenizer = await loadTokenizer(BUILTIN_BASE_MODEL.path);
  const renderer = trainingRenderer({ tokenizer, template: tokenizer.chatTemplate! }, null, null);
  const conversation = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'France?' },
    { role: 'assistant', content: 'Paris' },
    { role: 'user', content: 'Italy?' },
    { role: 'assistant', content: 'Rome' },
  ];
  const trained = (turns: 'all' | 'last') => {
    const row = tokenizeConversation(renderer, conversation, turns)!;
    assert.deepEqual(
      row.tokens,
      tokenizer.encode(renderer.text(conversation, false)),
      'one rendering of the whole conversation',
    );
    return tokenizer.decode(row.tokens.filter((_, t) => row.mask[t]));
  };

  test('every assistant span is trained, its end-of-turn token included; system and user turns are masked', () => {
    assert.equal(trained('all'), 'Paris<|im_end|>\nRome<|im_end|>\n');
  });

  test('assistant_turns "last" trains only the last span', () => {
    assert.equal(trained('last'), 'Rome<|im_end|>\n');
  });
});

describe('trained tokens for the tokens view', () => {
  const seq = (
    trajectory: number,
    advantage: number,
    tokens: number[],
    logprobs: (number | null)[],
  ): ScoredSequence => ({ tokens, mask: tokens.map(() => 1), logprobs, advantage, trajectory });

  test('traced back through packing to their trajectory; whole trajectories up to the cap; one forward over only their rows', async () => {
    // Trajectory 0 has a main history and an additional one; trajectory 1 lands in a row of its own.
    const sequences = [
      seq(0, 1, [10, 11, 12], [null, -0.1, -0.2]),
      seq(1, -1, [20, 21, 22, 23], [null, -0.3, -0.4, -0.5]),
      seq(0, 1, [30, 31], [null, -0.6]),
    ];
    const placements: Placement[] = [];
    const rows = packRows(sequences, weighSequences(sequences, 0), 5, placements);
    assert.deepEqual(placements, [
      { row: 0, offset: 0, length: 3 },
      { row: 1, offset: 0, length: 4 },
      { row: 0, offset: 3, length: 2 },
    ]);
    const forwarded: number[][] = [];
    // Stands in for the engine: the logprob "after" is minus the token id / 100, so each value names its token.
    const forward = async (batch: { tokens: number[] }[]) => {
      forwarded.push(...batch.map((row) => row.tokens));
      return { logprobs: batch.map((row) => row.tokens.map((token, p) => (p === 0 ? null : -token / 100))) };
    };
    const locate = (trajectory: number) => ({ groupIndex: 7, trajectoryIndex: trajectory });
    const kept = await trainedTokens({ rows, sequences, placements }, forward, locate, 3);
    assert.deepEqual(
      forwarded,
      [[10, 11, 12, 30, 31]],
      'trajectory 1 (3 trained tokens) would pass the cap of 3: its row is not forwarded',
    );
    assert.equal(kept.length, 1);
    assert.deepEqual(
      { ...kept[0], advantage: Math.sign(kept[0].advantage) },
      {
        groupIndex: 7,
        trajectoryIndex: 0,
        advantage: 1,
        token_ids: [11, 12, 31],
        sampler_logprobs: [-0.1, -0.2, -0.6],
        trainer_logprobs: [-0.11, -0.12, -0.31],
      },
    );
    const all = await trainedTokens({ rows, sequences, placements }, forward, locate);
    assert.deepEqual(
      all.map((trajectory) => [trajectory.trajectoryIndex, trajectory.token_ids]),
      [
        [0, [11, 12, 31]],
        [1, [21, 22, 23]],
      ],
    );
  });
});

describe('learning rates (ART 0.5.23 keys)', () => {
  test('num_trajectories_learning_rate_multiplier_power: rate × (segments in the row)^power', () => {
    const row = { segment_ids: [0, 0, 1, 1, 1, 2, 3] };
    assert.equal(rowSizeMultiplier(row, 0), 1);
    close(rowSizeMultiplier(row, 0.5), 2);
    close(rowSizeMultiplier(row, -1), 0.25);
  });

  test('scale_learning_rate_by_reward_std_dev: the least-squares spread at the last step over the intercept (ART 0.5.7)', () => {
    // y = 2 − 0.5x through (0, 2), (1, 1.5), (2, 1): prediction at step 2 is 1, intercept 2.
    close(
      rewardStdDevMultiplier([
        { step: 0, value: 2 },
        { step: 1, value: 1.5 },
        { step: 2, value: 1 },
      ]),
      0.5,
    );
    // Points of one step are averaged first: (1, 1.5) twice over is still one point.
    close(
      rewardStdDevMultiplier([
        { step: 0, value: 2 },
        { step: 1, value: 1 },
        { step: 1, value: 2 },
        { step: 2, value: 1 },
      ]),
      0.5,
    );
    assert.equal(
      rewardStdDevMultiplier([
        { step: 3, value: 1 },
        { step: 3, value: 5 },
      ]),
      1,
      'fewer than two steps',
    );
    assert.equal(
      rewardStdDevMultiplier([
        { step: 0, value: 0 },
        { step: 1, value: 1 },
      ]),
      1,
      'intercept 0',
    );
    assert.equal(
      rewardStdDevMultiplier([
        { step: 4, value: 1 },
        { step: 5, value: 2 },
      ]),
      1,
      'intercept −3',
    );
    assert.equal(
      rewardStdDevMultiplier([
        { step: 0, value: 1 },
        { step: 5, value: 0 },
        { step: 9, value: 0 },
      ]),
      0,
      'a negative prediction is floored at 0',
    );
  });
});
