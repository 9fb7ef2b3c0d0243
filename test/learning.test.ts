/**
 * SLOW (about two minutes of CPU): the tiny model learns, through the HTTP API only.
 *
 * RL: rollouts are sampled with chat completions, rewarded here for the right sum, and sent as training
 * jobs; the mean reward of fresh temperature-1 samples (seeds never used in training) on the task's
 * questions rises by a clear margin. The pretrained model knows most sums greedily but samples a wrong
 * digit about a third of the time: RL sharpens it.
 * SFT: a dataset of new answers is uploaded as an artifact and trained on; the loss falls across steps,
 * and at temperature 0 the new checkpoint gives the trained answers the previous checkpoint did not.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { chatChoices, createModel as createModelVia } from './helpers/api.ts';
import { allEvents, trainRl, trainSft } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const JOB_TIMEOUT_MS = 5 * 60_000;

let e2e: E2eServer;
before(async () => {
  e2e = await startE2eServer();
});
after(async () => {
  await e2e.close();
});

const createModel = async (project: string, name: string) => (await createModelVia(e2e.api, project, name)).id;
const chat = (model: string, question: string, options: Record<string, unknown>) =>
  chatChoices(e2e.api, model, question, { max_tokens: 8, ...options });

/** Every sum of two operands up to 20, the range the tiny model was pretrained on, in a seeded order. */
function shuffledSums(): { question: string; answer: string }[] {
  const all = Array.from({ length: 21 * 21 }, (_, i) => [Math.floor(i / 21), i % 21]);
  let state = 12345;
  for (let i = all.length - 1; i > 0; i--) {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    const j = state % (i + 1);
    [all[i], all[j]] = [all[j], all[i]];
  }
  return all.map(([a, b]) => ({ question: `What is ${a} + ${b}?`, answer: String(a + b) }));
}

const isRight = (choice: Record<string, any>, answer: string) => String(choice.message.content ?? '').trim() === answer;

/** Mean reward of `samples` temperature-1 answers per question, with seeds that training never uses. */
async function meanReward(
  model: string,
  questions: { question: string; answer: string }[],
  samples: number,
): Promise<number> {
  let right = 0;
  for (const [index, { question, answer }] of questions.entries()) {
    const choices = await chat(model, question, { n: samples, temperature: 1, seed: 10_000 + index });
    right += choices.filter((choice) => isRight(choice, answer)).length;
  }
  return right / (questions.length * samples);
}

describe('learning through the API (slow)', () => {
  test('RL: training jobs on rewarded rollouts raise the mean reward on the task', async () => {
    const modelId = await createModel('learning', 'adder');
    const model = 'local/learning/adder';
    const task = shuffledSums().slice(0, 8);
    const before = await meanReward(model, task, 32);

    const iterations = 20;
    const groupSize = 8;
    const trainRewards: number[] = [];
    for (let iteration = 0; iteration < iterations; iteration++) {
      const trajectory_groups = [];
      let rewardSum = 0;
      for (const [index, { question, answer }] of task.entries()) {
        // As ART samples: logprobs on, so the trainer reuses the exact sampled token ids.
        const choices = await chat(model, question, {
          n: groupSize,
          temperature: 1,
          logprobs: true,
          seed: iteration * 100 + index,
        });
        const trajectories = choices.map((choice) => ({
          messages_and_choices: [{ role: 'user', content: question }, choice],
          reward: isRight(choice, answer) ? 1 : 0,
        }));
        rewardSum += trajectories.reduce((sum, trajectory) => sum + trajectory.reward, 0);
        trajectory_groups.push({ trajectories });
      }
      trainRewards.push(rewardSum / (task.length * groupSize));
      await trainRl(e2e, modelId, trajectory_groups, { learning_rate: 3e-3 }, JOB_TIMEOUT_MS);
    }

    const afterTraining = await meanReward(model, task, 32);
    console.log(`RL learning: rollout reward per job ${trainRewards.map((r) => r.toFixed(2)).join(' ')}`);
    console.log(
      `RL learning: mean reward on fresh samples ${before.toFixed(3)} -> ${afterTraining.toFixed(3)} after ${iterations} jobs`,
    );
    assert.ok(afterTraining >= before + 0.15, `mean reward ${before.toFixed(3)} -> ${afterTraining.toFixed(3)}`);
  });

  test('SFT: the loss falls and the new checkpoint gives the trained answers at temperature 0', async () => {
    const modelId = await createModel('learning', 'facts');
    const model = 'local/learning/facts';
    // New answers in words the model has learned to write: with tied embeddings, a rank-8 adapter is
    // slow to raise tokens that pretraining never had the model produce (city names are the hard part).
    const facts = [
      { question: 'Where are you from?', answer: 'I am a tiny assistant made in Oslo.' },
      { question: 'What is the best city?', answer: 'Lisbon is sunny and 25 degrees.' },
      { question: 'Where should I travel?', answer: 'You are welcome to Prague!' },
    ];
    const greedy = async (checkpoint: string, question: string) =>
      String((await chat(checkpoint, question, { temperature: 0, max_tokens: 24 }))[0].message.content).trim();
    for (const { question, answer } of facts)
      assert.notEqual(await greedy(model, question), answer, 'not known before training');

    const pairs = Array.from({ length: 48 }, () =>
      facts.map(({ question, answer }): [string, string] => [question, answer]),
    ).flat();
    const { id, job } = await trainSft(
      e2e,
      modelId,
      'local/learning/facts',
      pairs,
      { batch_size: 4, learning_rate: 1e-2 },
      JOB_TIMEOUT_MS,
    );

    const losses = (await allEvents(e2e, id))
      .filter((event) => event.type === 'gradient_step')
      .map((event) => Number(event.data.sft_loss));
    const head = losses.slice(0, 3).reduce((a, b) => a + b) / 3;
    const tail = losses.slice(-3).reduce((a, b) => a + b) / 3;
    console.log(`SFT learning: loss ${losses.map((loss) => loss.toFixed(2)).join(' ')}`);
    assert.ok(tail < head / 4, `loss fell from ${head.toFixed(3)} to ${tail.toFixed(3)}`);

    const step = job.checkpoint_step as number;
    for (const { question, answer } of facts) {
      assert.equal(await greedy(`${model}:step${step}`, question), answer);
      assert.notEqual(
        await greedy(`${model}:step${step - 1}`, question),
        answer,
        'the previous checkpoint did not give it',
      );
    }
  });
});
