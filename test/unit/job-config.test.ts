/**
 * src/training/rl/config.ts and sft/config.ts: the keys an RL job may send are RlConfig's properties, each value is
 * read against its property's schema (so a bound is written once, in the schema), and neither kind reads the base's
 * default learning rate when the job names one.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseRlConfig, RlConfig } from '../../src/training/rl/config.ts';
import { parseSftConfig } from '../../src/training/sft/config.ts';

const problemsOf = (raw: Record<string, unknown>) =>
  parseRlConfig(raw, () => 1e-3).problems.map(({ loc, msg, type }) => ({ key: loc.at(-1), msg, type }));

/** The default's reader for a job that names its rate: it must not be called. */
const unread = () => {
  throw new Error('the default learning rate was read for a job that named one');
};

describe('RL experimental_config', () => {
  test('every property of RlConfig is a known key but the two it derives; anything else is refused unless null', () => {
    const derived = new Set(['kl_reference', 'k2_tau']);
    for (const key of Object.keys(RlConfig.properties).filter((name) => !derived.has(name)))
      assert.ok(!problemsOf({ [key]: {} }).some((p) => p.type === 'not_implemented'), key);
    for (const key of [...derived, 'a_future_knob'])
      assert.deepEqual(
        problemsOf({ [key]: 1 }).map((p) => [p.key, p.type]),
        [[key, 'not_implemented']],
      );
    assert.deepEqual(problemsOf({ a_future_knob: null }), []);
    // ART's other spellings, and the keys that change nothing, are known too (and type-checked).
    assert.deepEqual(problemsOf({ loss_fn: 'ppo', normalize_advantages: false, plot_tensors: false }), []);
    assert.deepEqual(problemsOf({ plot_tensors: 'yes' }), [
      { key: 'plot_tensors', msg: 'Input should be a valid boolean', type: 'bool_type' },
    ]);
  });

  test("a value is held to its property's schema, bounds and all, and named as pydantic names it", () => {
    assert.deepEqual(
      problemsOf({
        advantage_balance: 2,
        epsilon: 0,
        kl_penalty_coef: -1,
        packed_sequence_length: 8,
        logprob_calculation_chunk_size: 1.5,
        importance_sampling_level: 'x',
        kl_ref_adapter_path: '',
        chat_template_kwargs: [],
        learning_rate: 'fast',
      }),
      [
        { key: 'learning_rate', msg: 'Input should be a valid number', type: 'float_type' },
        { key: 'advantage_balance', msg: 'must be between -1 and 1', type: 'value_error' },
        { key: 'epsilon', msg: 'must be > 0', type: 'value_error' },
        {
          key: 'importance_sampling_level',
          msg: "Input should be 'token', 'sequence', 'average', 'geometric_average'",
          type: 'literal_error',
        },
        { key: 'packed_sequence_length', msg: 'must be an integer >= 16', type: 'value_error' },
        { key: 'logprob_calculation_chunk_size', msg: 'must be an integer >= 1', type: 'value_error' },
        { key: 'kl_penalty_coef', msg: 'must be >= 0', type: 'value_error' },
        { key: 'kl_ref_adapter_path', msg: 'Input should be a non-empty string', type: 'string_type' },
        { key: 'chat_template_kwargs', msg: 'Input should be a valid dictionary', type: 'dict_type' },
      ],
    );
  });

  test('the default learning rate is read only when the job names none', () => {
    assert.equal(parseRlConfig({ learning_rate: 2e-5 }, unread).config.learning_rate, 2e-5);
    assert.equal(parseRlConfig({ learning_rate: null }, () => 7e-6).config.learning_rate, 7e-6);
  });
});

describe('SFT config', () => {
  test('the default learning rate is read only when the job names none; a schedule has one rate per batch', () => {
    const named = parseSftConfig({ learning_rate: [1e-3, 0] }, 3, unread);
    assert.deepEqual(named, {
      config: {
        batch_size: 2,
        learning_rate: [1e-3, 0],
        assistant_turns: 'all',
        chat_template_kwargs: null,
        metric_logging: null,
      },
      problems: [],
    });
    assert.equal(parseSftConfig(null, 3, () => 7e-6).config.learning_rate, 7e-6);
    const short = parseSftConfig({ batch_size: 1, learning_rate: [1e-3, -1] }, 3, unread);
    assert.deepEqual(
      short.problems.map((p) => p.loc),
      [
        ['body', 'config', 'learning_rate', 1],
        ['body', 'config', 'learning_rate'],
      ],
    );
  });
});
