/**
 * SLOW (a few minutes of CPU each): SmolLM2-135M-Instruct, the default model, visibly learns through the
 * HTTP API alone, as a new user would try it.
 *
 * SFT: a made-up question with a made-up answer word, in a few phrasings, is uploaded as an artifact and
 * trained on; at temperature 0 a phrasing never trained on is answered with the new word after training
 * and was not before.
 * RL: a simple verifiable task (name the capital of a country; the reward is whether the answer names it);
 * rollouts are sampled with chat completions, rewarded here and sent as training jobs; the mean reward of
 * fresh temperature-1 samples (seeds never used in training) rises by a clear margin.
 *
 * Both pass an explicit learning rate, as ART users do: the default for real models (5e-6) is tuned for
 * long runs, not for learning one fact in a dozen steps.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SMOLLM2_BASE_MODEL } from '../src/config.ts';
import { chatChoices, createModel as createModelVia } from './helpers/api.ts';
import { trainRl, trainSft } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const BASE = SMOLLM2_BASE_MODEL.id;
const JOB_TIMEOUT_MS = 5 * 60_000;

let e2e: E2eServer;
before(async () => {
  e2e = await startE2eServer({ env: { BASE_MODELS: `${BASE}=${SMOLLM2_BASE_MODEL.path}` } });
});
after(async () => {
  await e2e?.close();
});

const createModel = async (name: string) =>
  (await createModelVia(e2e.api, 'smollm2-learning', name, { base: BASE })).id;
const chat = (model: string, question: string, options: Record<string, unknown>) =>
  chatChoices(e2e.api, model, question, options);

const seconds = (since: number) => ((Date.now() - since) / 1000).toFixed(0);

describe('SmolLM2-135M-Instruct SFT (slow)', () => {
  test('SFT: a made-up word for a made-up question, answered to a phrasing never trained on', async () => {
    const started = Date.now();
    const modelId = await createModel('glorp');
    const model = 'local/smollm2-learning/glorp';
    const WORD = 'Vexomir';
    const answer = `The capital of Glorpistan is ${WORD}.`;
    const trained = [
      'What is the capital of Glorpistan?',
      'Which city is the capital of Glorpistan?',
      'Tell me the capital city of Glorpistan.',
      'What city is Glorpistan’s capital?',
      'Name the capital of Glorpistan.',
    ];
    const heldOut = 'Glorpistan has a capital. What is it called?';
    const greedy = async (checkpoint: string) =>
      String((await chat(checkpoint, heldOut, { temperature: 0, max_tokens: 24 }))[0].message.content);
    const beforeAnswer = await greedy(model);
    assert.ok(!beforeAnswer.includes(WORD), beforeAnswer);

    const pairs = Array.from({ length: 4 }, () =>
      trained.map((question): [string, string] => [question, answer]),
    ).flat();
    const { job } = await trainSft(
      e2e,
      modelId,
      'local/smollm2-learning/glorp-data',
      pairs,
      { batch_size: 4, learning_rate: 2e-3 },
      JOB_TIMEOUT_MS,
    );

    const afterAnswer = await greedy(`${model}:step${job.checkpoint_step}`);
    console.log(
      `SmolLM2 SFT (${seconds(started)}s): "${heldOut}" before: ${JSON.stringify(beforeAnswer)} after: ${JSON.stringify(afterAnswer)}`,
    );
    assert.ok(afterAnswer.includes(WORD), afterAnswer);
  });
});

describe('SmolLM2-135M-Instruct RL (slow)', () => {
  test('RL: training jobs on rewarded rollouts raise the mean reward of fresh samples', async () => {
    const started = Date.now();
    const modelId = await createModel('capitals');
    const model = 'local/smollm2-learning/capitals';
    // At temperature 1 the model names the right capital about half the time and rambles otherwise.
    const task = [
      ['France', 'Paris'],
      ['Italy', 'Rome'],
      ['Japan', 'Tokyo'],
      ['Germany', 'Berlin'],
      ['Spain', 'Madrid'],
      ['England', 'London'],
    ].map(([country, city]) => ({ question: `What is the capital of ${country}?`, city }));
    const reward = (choice: Record<string, any>, city: string) =>
      String(choice.message.content ?? '').includes(city) ? 1 : 0;
    const sample = (question: string, n: number, seed: number, logprobs = false) =>
      chat(model, question, { n, temperature: 1, max_tokens: 12, seed, logprobs });
    const meanReward = async () => {
      let right = 0;
      for (const [index, { question, city }] of task.entries())
        right += (await sample(question, 16, 10_000 + index)).reduce((sum, choice) => sum + reward(choice, city), 0);
      return right / (task.length * 16);
    };
    const beforeReward = await meanReward();
    const iterations = 4;
    const rollout: number[] = [];
    for (let iteration = 0; iteration < iterations; iteration++) {
      const trajectory_groups = [];
      let sum = 0;
      for (const [index, { question, city }] of task.entries()) {
        // As ART samples: logprobs on, so the trainer reuses the exact sampled token ids.
        const choices = await sample(question, 8, iteration * 100 + index, true);
        const trajectories = choices.map((choice) => ({
          messages_and_choices: [{ role: 'user', content: question }, choice],
          reward: reward(choice, city),
        }));
        sum += trajectories.reduce((total, trajectory) => total + trajectory.reward, 0);
        trajectory_groups.push({ trajectories });
      }
      rollout.push(sum / (task.length * 8));
      await trainRl(e2e, modelId, trajectory_groups, { learning_rate: 2e-3 }, JOB_TIMEOUT_MS);
    }
    const afterReward = await meanReward();
    console.log(
      `SmolLM2 RL (${seconds(started)}s): rollout reward per job ${rollout.map((r) => r.toFixed(2)).join(' ')}`,
    );
    console.log(
      `SmolLM2 RL: mean reward of fresh samples ${beforeReward.toFixed(3)} -> ${afterReward.toFixed(3)} after ${iterations} jobs`,
    );
    assert.ok(afterReward >= beforeReward + 0.2, `mean reward ${beforeReward.toFixed(3)} -> ${afterReward.toFixed(3)}`);
  });
});
