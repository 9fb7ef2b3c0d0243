/** src/training/defaults.ts: the learning rate follows the base model's size; ε follows the loss; one rule bounds every rate sent. */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { Value } from '@sinclair/typebox/value';
import { BUILTIN_BASE_MODEL, SMOLLM2_BASE_MODEL } from '../../src/config.ts';
import { BaseModelRegistry } from '../../src/services/base-models.ts';
import { AdamParamsBody } from '../../src/tinker/schemas.ts';
import { defaultLearningRate, lossEpsilons, optimizerConfig } from '../../src/training/defaults.ts';
import { learningRateProblem } from '../../src/training/learning-rate.ts';
import { parseRlConfig } from '../../src/training/rl/config.ts';

const configOf = (folder: string) =>
  JSON.parse(fs.readFileSync(path.join(folder, 'config.json'), 'utf8')) as Record<string, unknown>;

test('the toy built-in model learns at 1e-3 and a pretrained one at 5e-6, whatever id the registry gives them', () => {
  assert.equal(defaultLearningRate(configOf(BUILTIN_BASE_MODEL.path)), 1e-3);
  assert.equal(defaultLearningRate(configOf(SMOLLM2_BASE_MODEL.path)), 5e-6);
  const registry = new BaseModelRegistry([{ id: 'mine/tiny', path: BUILTIN_BASE_MODEL.path }], 'mine/tiny');
  assert.equal(defaultLearningRate(registry.modelConfig('mine/tiny')), 1e-3);
  // Unknown or unreadable bases take the rate that is safe for real models.
  assert.equal(registry.modelConfig('nowhere'), null);
  assert.equal(defaultLearningRate(null), 5e-6);
});

test('clip bounds: PPO 0.2 both ways, CISPO 1.0 and 4.0, an explicit null epsilon_high means epsilon', () => {
  assert.deepEqual(lossEpsilons(true, null, undefined), { epsilon: 0.2, epsilon_high: 0.2 });
  assert.deepEqual(lossEpsilons(true, 0.3, undefined), { epsilon: 0.3, epsilon_high: 0.3 });
  assert.deepEqual(lossEpsilons(false, null, undefined), { epsilon: 1.0, epsilon_high: 4.0 });
  assert.deepEqual(lossEpsilons(false, 0.5, null), { epsilon: 0.5, epsilon_high: 0.5 });
  assert.deepEqual(lossEpsilons(false, null, 2), { epsilon: 1.0, epsilon_high: 2 });
});

test('RL steps decay weights and clip at 0.1; SFT steps do not decay and clip at 1.0', () => {
  assert.deepEqual(optimizerConfig('rl', 1e-4), {
    learning_rate: 1e-4,
    betas: [0.9, 0.99],
    weight_decay: 0.1,
    max_grad_norm: 0.1,
  });
  assert.deepEqual(optimizerConfig('sft', 2e-4), {
    learning_rate: 2e-4,
    betas: [0.9, 0.99],
    weight_decay: 0,
    max_grad_norm: 1.0,
  });
});

test('one learning-rate rule, finite and >= 0, for RL, SFT and Tinker alike (RL took only > 0 before)', () => {
  const rl = parseRlConfig({ learning_rate: 0 }, () => 1e-3);
  assert.deepEqual(rl.problems, []);
  assert.equal(rl.config.learning_rate, 0);
  const negative = parseRlConfig({ learning_rate: -1e-5 }, () => 1e-3);
  assert.deepEqual(negative.problems, [
    { loc: ['body', 'experimental_config', 'learning_rate'], msg: learningRateProblem(-1e-5), type: 'value_error' },
  ]);
  for (const bad of [-1e-5, Number.NaN, Number.POSITIVE_INFINITY])
    assert.match(learningRateProblem(bad) ?? '', /must be a finite number >= 0/);
  assert.equal(learningRateProblem(0), null);
  const adam = { beta1: 0.9, beta2: 0.95, eps: 1e-8 };
  assert.ok(Value.Check(AdamParamsBody, { ...adam, learning_rate: 0 }));
  assert.ok(!Value.Check(AdamParamsBody, { ...adam, learning_rate: -1e-5 }));
});
