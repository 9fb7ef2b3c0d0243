/**
 * The dashboard in headless Chromium against the real server and engine, with data from a short RL run made
 * through the API (rollouts sampled with chat completions, three training jobs, a logged validation split
 * with tool calls and reasoning, a failing job). Asserts on what is visible; any browser console error,
 * page error or failed request fails the suite. Screenshots of every page land in screenshots/.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { inflateSync } from 'node:zlib';
import type { Page } from 'playwright-core';
import { newId } from '../src/ids.ts';
import { type BrowserSession, CHROMIUM, chromiumAvailable, openBrowser, SCREENSHOT_DIR } from './helpers/browser.ts';
import { sampleGroup, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const TIMEOUT = 15_000;

/** A validation split as an agent would log it: reasoning, a tool call, its result, a final answer. */
function agentTrajectory(reward: number, city: string) {
  return {
    messages_and_choices: [
      { role: 'system', content: 'You answer weather questions with the get_weather tool.' },
      { role: 'user', content: `What is the weather in ${city}?` },
      {
        role: 'assistant',
        content: '',
        reasoning: `The user wants the weather in ${city}; I should call get_weather.`,
        tool_calls: [
          {
            id: `call_${city}`,
            type: 'function',
            function: { name: 'get_weather', arguments: JSON.stringify({ city, unit: 'celsius' }) },
          },
        ],
      },
      {
        role: 'tool',
        tool_call_id: `call_${city}`,
        content: JSON.stringify({ city, temperature_c: 21, sky: 'clear' }),
      },
      { role: 'assistant', content: `It is 21 °C and clear in ${city}.` },
    ],
    tools: [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Current weather for a city',
          parameters: {
            type: 'object',
            properties: { city: { type: 'string' }, unit: { type: 'string' } },
            required: ['city'],
          },
        },
      },
    ],
    reward,
    metrics: { tool_calls: 1, answer_length: 24 + city.length },
    metadata: { city },
    logs: [`asked about ${city}`],
  };
}

const valGroups = (shift: number) => [
  { trajectories: [agentTrajectory(0.2 + shift, 'Paris'), agentTrajectory(0.6 + shift, 'Lyon')] },
  { trajectories: [agentTrajectory(0.4 + shift, 'Oslo'), agentTrajectory(0.9 + shift, 'Rome')] },
];

const PROMPTS = ['Name a colour.', 'Count to three.'];
/** Many small rows, so a job takes many gradient steps. */
const MANY_ROWS = { packed_sequence_length: 32 };

describe('dashboard in a real browser (skipped without Chromium)', {
  skip: chromiumAvailable() ? false : `no Chromium at ${CHROMIUM} (scripts/install.sh installs it)`,
}, () => {
  let e2e: E2eServer;
  let session: BrowserSession;
  let page: Page;
  let modelId: string;
  let failedJobId: string;
  const stepsTrained = 3;
  let groupsForJobs: Awaited<ReturnType<typeof sampleGroup>>[] = [];

  const expectNoProblems = () =>
    assert.deepEqual(session.problems, [], 'no browser console errors, page errors or failed requests');

  before(async () => {
    e2e = await startE2eServer();
    const created = await e2e.api('POST', '/v1/preview/models', {
      project: 'dash',
      name: 'policy',
      base_model: 'builtin/tiny-chat',
    });
    modelId = created.body.id;
    await e2e.api('POST', '/v1/preview/models', { project: 'dash', name: 'baseline', base_model: 'builtin/tiny-chat' });
    const rival = await e2e.api('POST', '/v1/preview/models', {
      project: 'dash',
      name: 'rival',
      base_model: 'builtin/tiny-chat',
    });

    // A short RL run: sample from the latest checkpoint, score, train; log a validation split at every step.
    for (let round = 0; round < stepsTrained; round += 1) {
      const log = await e2e.api('POST', `/v1/preview/models/${modelId}/log`, {
        split: 'val',
        trajectory_groups: valGroups(round * 0.03),
      });
      assert.equal(log.status, 200, JSON.stringify(log.body));
      const groups = [];
      for (const [index, prompt] of PROMPTS.entries()) {
        // Rewards that rise from round to round, spread within each group.
        groups.push(
          await sampleGroup(
            e2e,
            'local/dash/policy',
            prompt,
            3,
            (_choice, i) => Math.min(1, 0.15 * round + 0.25 * ((i + index) % 3)),
            round * 10 + index * 3,
          ),
        );
      }
      groupsForJobs = groups;
      const job = await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: modelId,
        trajectory_groups: groups,
        experimental_config: {},
      });
      assert.equal(job.status, 200, JSON.stringify(job.body));
      assert.equal((await waitForJob(e2e, job.body.id)).status, 'COMPLETED');
    }
    await e2e.api('POST', `/v1/preview/models/${modelId}/log`, { split: 'val', trajectory_groups: valGroups(0.1) });
    // Another run's history, to overlay.
    for (let step = 1; step <= 3; step += 1) {
      await e2e.server.services.repositories.trajectories.insertRunMetrics(
        rival.body.run_id,
        step,
        'train',
        { reward: 0.1 * step, reward_std_dev: 0.3, loss: 0.5 },
        new Date().toISOString(),
      );
    }

    // A job that fails while training: an absurd learning rate pushes the adapter past its bound at the first step.
    const broken = await e2e.api('POST', '/v1/preview/models', {
      project: 'experiments',
      name: 'broken',
      base_model: 'builtin/tiny-chat',
    });
    const failing = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: broken.body.id,
      trajectory_groups: [
        {
          trajectories: [0, 1].map((reward) => ({
            messages_and_choices: [
              { role: 'user', content: 'hi' },
              {
                index: 0,
                finish_reason: 'stop',
                message: { role: 'assistant', content: 'hello there' },
                logprobs: null,
              },
            ],
            reward,
          })),
        },
      ],
      experimental_config: { allow_training_without_logprobs: true, learning_rate: 1e6 },
    });
    assert.equal(failing.status, 200, JSON.stringify(failing.body));
    failedJobId = failing.body.id;
    assert.equal((await waitForJob(e2e, failedJobId)).status, 'FAILED');

    session = await openBrowser(e2e.url);
    page = session.page;
    page.setDefaultTimeout(TIMEOUT);
  });

  after(async () => {
    await session?.close();
    await e2e?.close();
  });

  test('sign in by pasting an API key; the models list shows each project with base model, latest step and last reward', async () => {
    await page.goto('/');
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    await session.screenshot('01-sign-in');
    // A wrong key is refused with the server's message (the browser logs the 401 itself: expected, once).
    await page.getByLabel('API key').fill('sk-not-a-key-of-this-server-000000');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('alert').getByText('Invalid or revoked API key').waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.length), 0);
    assert.ok(session.problems.length === 1 && /401/.test(session.problems[0]), session.problems.join('\n'));
    session.problems.length = 0;

    await page.getByLabel('API key').fill(e2e.key);
    await page.getByLabel('API key').press('Enter');
    await page.getByRole('heading', { name: 'Models', level: 1 }).waitFor();
    assert.equal(
      await page.evaluate(() => sessionStorage.getItem('agent-trainer.api-key')),
      e2e.key,
      'the key lives in sessionStorage',
    );
    assert.equal(await page.evaluate(() => localStorage.length), 0, 'nothing in localStorage');

    const dash = page.getByRole('region', { name: 'Project dash' });
    const policy = dash.locator('tr[data-model="policy"]');
    await policy.waitFor();
    const cells = await policy.locator('td, th').allInnerTexts();
    assert.equal(cells[0], 'policy');
    assert.equal(cells[1], 'builtin/tiny-chat');
    assert.equal(cells[2], String(stepsTrained), 'latest step');
    assert.equal(cells[3], String(stepsTrained + 1), 'checkpoints 0..3');
    assert.match(
      cells[4],
      /^train \d[\d.]* ± [\d.]+ @3\nval \d[\d.]* ± [\d.]+ @3$/,
      `last reward per split: ${cells[4]}`,
    );
    assert.match(cells[5].toLowerCase(), /completed/);
    const baseline = await dash.locator('tr[data-model="baseline"] td').allInnerTexts();
    assert.equal(baseline[1], '0', 'a fresh model is at step 0');
    assert.equal(baseline[3], '—', 'no reward yet');
    await page.getByRole('region', { name: 'Project experiments' }).waitFor();
    await session.screenshot('02-models');
    expectNoProblems();
  });

  test('the keyboard alone reaches a model: Tab to its link, Enter', async () => {
    await page.locator('body').focus();
    let reached = false;
    for (let presses = 0; presses < 40 && !reached; presses += 1) {
      await page.keyboard.press('Tab');
      reached = await page.evaluate(() => document.activeElement?.textContent === 'policy');
    }
    assert.ok(reached, 'Tab reaches the model link');
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'policy', level: 1 }).waitFor();
    expectNoProblems();
  });

  test('model page: one chart per metric family on uPlot, reward band inside [0, 1], hover synced across charts', async () => {
    const reward = page.locator('figure[data-chart="Reward"]');
    await reward.locator('canvas').first().waitFor();
    assert.equal(await reward.getAttribute('data-series-count'), '2', 'train and val');
    const legend = reward.locator('.chart-legend li');
    assert.deepEqual(
      await legend.evaluateAll((nodes) =>
        nodes.map((node) => [node.textContent!.replace(/[\d.]+$/, ''), node.getAttribute('data-points')]),
      ),
      [
        ['train', String(stepsTrained)],
        ['val', String(stepsTrained + 1)],
      ],
    );
    assert.equal(await reward.getAttribute('data-x-min'), '0');
    assert.equal(await reward.getAttribute('data-x-max'), String(stepsTrained));
    const bandMin = Number(await reward.getAttribute('data-band-min'));
    const bandMax = Number(await reward.getAttribute('data-band-max'));
    assert.ok(
      bandMin >= 0 && bandMax <= 1 && bandMax > bandMin,
      `the reward's ±σ band stays in [0, 1]: ${bandMin}..${bandMax}`,
    );
    // loss and policy_loss are one family: one chart, one picker chip.
    const loss = page.locator('figure[data-chart="Loss"]');
    assert.equal(await loss.getAttribute('data-series-count'), '1');
    assert.equal(await page.locator('[data-metric="policy_loss"]').count(), 0, 'no second, near-identical loss chart');

    // Hover at a step shows its values on this chart and on the loss chart at the same step.
    const box = (await reward.locator('.u-over').boundingBox())!;
    const xAt = (step: number) => box.x + (step / stepsTrained) * box.width;
    await page.mouse.move(xAt(2), box.y + box.height / 2);
    await reward.locator('.chart-tooltip').getByText('step 2').waitFor();
    await loss.locator('.chart-tooltip').getByText('step 2').waitFor();
    await reward.focus();
    await page.keyboard.press('End');
    await reward.locator('.chart-tooltip').getByText('step 3').waitFor();
    await page.mouse.move(0, 0);

    // The picker adds and removes charts.
    const entropyChip = page.getByRole('button', { name: 'Entropy' });
    assert.equal(await entropyChip.getAttribute('aria-pressed'), 'true');
    await entropyChip.click();
    await page.locator('figure[data-chart="Entropy"]').waitFor({ state: 'detached' });
    const learningRate = page.getByRole('button', { name: 'Learning rate' });
    await learningRate.click();
    await page.locator('figure[data-chart="Learning rate"] canvas').first().waitFor();
    assert.match(page.url(), /metrics=/, 'the picked metrics are in the URL');

    const rows = page.locator('table.checkpoints tbody tr');
    assert.deepEqual(
      await rows.evaluateAll((nodes) => nodes.map((node) => Number(node.getAttribute('data-step')))),
      [3, 2, 1, 0],
    );
    const headers = await page.locator('table.checkpoints thead th').allInnerTexts();
    assert.ok(headers.map((text) => text.toLowerCase()).includes('reward'), headers.join('|'));
    assert.ok(headers.includes('VAL/REWARD') || headers.includes('val/reward'), headers.join('|'));
    assert.notEqual(
      (await rows.first().locator('td.num').first().innerText()).trim(),
      '—',
      'the latest checkpoint shows its reward',
    );
    await page.mouse.move(0, 0);
    await session.screenshot('03-model');
    expectNoProblems();
  });

  test('model page: delete a checkpoint after confirming', async () => {
    await page.getByRole('checkbox', { name: 'Select step 1' }).check();
    await page.getByRole('button', { name: 'Delete 1 selected' }).click();
    const dialog = page.getByRole('dialog');
    await dialog.getByText('Delete checkpoint step 1?').waitFor();
    await session.screenshot('04-delete-confirm', { fullPage: false });
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await dialog.waitFor({ state: 'detached' });
    assert.equal(await page.locator('table.checkpoints tbody tr[data-step="1"]').count(), 1, 'cancel keeps it');

    await page.getByRole('button', { name: 'Delete 1 selected' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Delete checkpoint' }).click();
    await page.locator('table.checkpoints tbody tr[data-step="1"]').waitFor({ state: 'detached' });
    await page.getByText('Deleted 1 checkpoint').waitFor();
    const listed = await e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints?limit=100`);
    assert.deepEqual(
      listed.body.data.map((checkpoint: { step: number }) => checkpoint.step),
      [0, 2, 3],
    );
    // The run history keeps the deleted step's metrics: the chart still has its point.
    assert.equal(
      await page
        .locator('figure[data-chart="Reward"] .chart-legend li[data-series="0:train:reward"]')
        .getAttribute('data-points'),
      '3',
    );
    expectNoProblems();
  });

  test('model page charts: drag to zoom and reset, EMA smoothing, wall-clock axis, another run overlaid, a click opens that step', async () => {
    const reward = page.locator('figure[data-chart="Reward"]');
    const over = reward.locator('.u-over');
    await reward.scrollIntoViewIfNeeded();
    let box = (await over.boundingBox())!;
    const xAt = (step: number) => box.x + (step / stepsTrained) * box.width;
    await page.mouse.move(xAt(0.9), box.y + 10);
    await page.mouse.down();
    await page.mouse.move(xAt(2.1), box.y + 20, { steps: 5 });
    await page.mouse.up();
    await reward.getByRole('button', { name: 'Reset zoom' }).waitFor();
    const zoomed = [Number(await reward.getAttribute('data-x-min')), Number(await reward.getAttribute('data-x-max'))];
    assert.ok(
      zoomed[0] > 0.5 && zoomed[0] < 1.3 && zoomed[1] > 1.7 && zoomed[1] < 2.5,
      `zoomed to about steps 1..2: ${zoomed}`,
    );
    await reward.getByRole('button', { name: 'Reset zoom' }).click();
    await reward.getByRole('button', { name: 'Reset zoom' }).waitFor({ state: 'hidden' });
    assert.deepEqual(
      [await reward.getAttribute('data-x-min'), await reward.getAttribute('data-x-max')],
      ['0', String(stepsTrained)],
    );

    // Smoothing: the readout gives the EMA beside the raw value; the URL keeps it.
    await page.getByLabel('Smoothing (EMA)').fill('0.6');
    box = (await over.boundingBox())!;
    await page.mouse.move(xAt(3) - 2, box.y + box.height / 2);
    await reward.locator('.chart-tooltip').getByText(/EMA/).first().waitFor();
    assert.match(page.url(), /smooth=0.6/);

    // Wall-clock time on x: the scale is in epoch seconds of the rows.
    await page.getByLabel('X axis').selectOption('time');
    assert.ok(Number(await reward.getAttribute('data-x-min')) > 1.7e9, 'x is wall-clock seconds');
    await page.getByLabel('X axis').selectOption('step');

    // Overlay another run: its train reward joins as a third series with its own legend entry.
    const rivalId = (await e2e.api('GET', '/v1/dashboard/models?project=dash')).body.data.find(
      (model: { name: string }) => model.name === 'rival',
    ).id;
    await page.getByLabel('Compare with').selectOption([rivalId]);
    await page.locator('figure[data-chart="Reward"][data-series-count="3"]').waitFor();
    assert.deepEqual(
      await reward
        .locator('.chart-legend li')
        .evaluateAll((nodes) => nodes.map((node) => node.querySelector('span:nth-child(2)')!.textContent)),
      ['policy · train', 'policy · val', 'rival · train'],
    );
    await page.mouse.move(0, 0);
    await session.screenshot('03b-model-compare');
    await page.getByLabel('Compare with').selectOption([]);
    await page.locator('figure[data-chart="Reward"][data-series-count="2"]').waitFor();
    await page.getByLabel('Smoothing (EMA)').fill('0');

    // A click on the train reward at step 3 opens the trajectories it was computed from (sampled at step 2).
    await reward.scrollIntoViewIfNeeded();
    box = (await over.boundingBox())!;
    const trainReward = (await e2e.api('GET', `/v1/dashboard/models/${modelId}`)).body.rewards.train.value as number;
    const [yMin, yMax] = [
      Number(await reward.getAttribute('data-y-min')),
      Number(await reward.getAttribute('data-y-max')),
    ];
    await page.mouse.click(xAt(3) - 1, box.y + (1 - (trainReward - yMin) / (yMax - yMin)) * box.height);
    await page.getByLabel('Split').waitFor();
    assert.equal(await page.getByLabel('Split').inputValue(), 'train');
    assert.equal(await page.getByLabel('Step').inputValue(), String(stepsTrained - 1));
    expectNoProblems();
  });

  test('trajectories: browse by split and step, open one with reasoning, tool calls, tool results and rewards', async () => {
    await page.getByRole('link', { name: 'Trajectories' }).click();
    await page.getByLabel('Split').waitFor();
    assert.equal(await page.getByLabel('Split').inputValue(), 'train');
    assert.equal(
      await page.getByLabel('Step').inputValue(),
      String(stepsTrained - 1),
      'the latest trained step (trajectories are kept at the step they were sampled from)',
    );
    const items = page.locator('.trajectory-list button[data-id]');
    await items.first().waitFor();
    assert.equal(await items.count(), PROMPTS.length * 3);
    // The first trajectory opens by itself: a sampled choice with logprobs.
    await page.locator('.trajectory-detail').getByText('choice', { exact: true }).first().waitFor();
    // Its sampled tokens, coloured by the sampler's probability: hue 120·p, p = exp(logprob).
    const tokens = page.locator('.trajectory-detail .token-view .tok');
    await tokens.first().waitFor();
    const painted = await tokens.evaluateAll((nodes) =>
      nodes.map((node) => [
        Number(node.getAttribute('data-logprob')),
        Number(node.getAttribute('data-hue')),
        getComputedStyle(node).backgroundColor,
      ]),
    );
    assert.ok(painted.length > 0);
    for (const [logprob, hue, background] of painted) {
      assert.equal(hue, Math.round(120 * Math.min(1, Math.exp(logprob as number))), `token with logprob ${logprob}`);
      assert.notEqual(background, 'rgba(0, 0, 0, 0)', 'every token is painted');
    }
    // By advantage: one colour for the whole response, green above the group mean, red below.
    const listed = (
      await e2e.api('GET', `/v1/dashboard/models/${modelId}/trajectories?split=train&step=${stepsTrained - 1}`)
    ).body.data as { group_index: number; trajectory_index: number; reward: number }[];
    const rewards = listed.filter((item) => item.group_index === 0).map((item) => item.reward);
    const mean = rewards.reduce((sum, reward) => sum + reward, 0) / rewards.length;
    await page.getByLabel('Colour tokens by').selectOption('advantage');
    const hues = new Set(await tokens.evaluateAll((nodes) => nodes.map((node) => node.getAttribute('data-hue'))));
    assert.deepEqual([...hues], [rewards[0] >= mean ? '120' : '0']);
    await tokens.nth(0).hover();
    assert.match(
      await page.locator('.token-readout').innerText(),
      /#0 · logprob -?[\d.]+ · p [\d.]+ · advantage -?[\d.]+ · trainer logprob after -?[\d.]+ \(Δ -?[\d.]+\)/,
    );
    // By the trainer's logprob after the job's step: the stored values, on the sampler's scale, token by token.
    const openedId = await page.locator('.trajectory-list button[data-id]').first().getAttribute('data-id');
    const trained = (await e2e.api('GET', `/v1/dashboard/models/${modelId}/trajectories/${openedId}`)).body
      .trained_tokens as { sampler_logprobs: number[]; trainer_logprobs: number[] };
    assert.ok(trained && trained.trainer_logprobs.length > 0, 'the opened trajectory was trained');
    await page.getByLabel('Colour tokens by').selectOption('trainer');
    const afterPaint = await tokens.evaluateAll((nodes) =>
      nodes.map((node) => [
        Number(node.getAttribute('data-logprob')),
        node.getAttribute('data-hue'),
        node.classList.contains('tok-untrained'),
      ]),
    );
    afterPaint.forEach(([logprob, hue, untrained], index) => {
      if (index >= trained.trainer_logprobs.length) {
        assert.ok(untrained, `token ${index} beyond the trained ones is left blank`);
        return;
      }
      // The i-th sampled token is the i-th trained one: their sampler logprobs agree.
      assert.ok(
        Math.abs((logprob as number) - trained.sampler_logprobs[index]) < 1e-4,
        `token ${index}: ${logprob} vs ${trained.sampler_logprobs[index]}`,
      );
      assert.equal(
        hue,
        String(Math.round(120 * Math.min(1, Math.exp(trained.trainer_logprobs[index])))),
        `token ${index}`,
      );
    });
    await tokens.nth(1).hover();
    const shown = Number(
      /#1 · .* · trainer logprob after (-?[\d.e-]+) \(Δ/.exec(await page.locator('.token-readout').innerText())?.[1],
    );
    assert.ok(
      Math.abs(shown - trained.trainer_logprobs[1]) <= 1e-3 * Math.max(1, Math.abs(shown)),
      `hover shows ${shown}, stored ${trained.trainer_logprobs[1]}`,
    );

    // A trajectory that did not train (its reward is its group's mean: rewards 0, 0.25, 0.5 at step 0): no trainer colouring.
    const atZero = (await e2e.api('GET', `/v1/dashboard/models/${modelId}/trajectories?split=train&step=0`)).body
      .data as { id: string }[];
    const details = await Promise.all(
      atZero.map(
        async (item) => (await e2e.api('GET', `/v1/dashboard/models/${modelId}/trajectories/${item.id}`)).body,
      ),
    );
    const untrainedAt = details.findIndex((detail) => detail.trained_tokens === null);
    assert.ok(
      untrainedAt >= 0 && details.some((detail) => detail.trained_tokens !== null),
      'step 0 holds trained and untrained trajectories',
    );
    await page.getByLabel('Step').selectOption('0');
    await items.nth(untrainedAt).click();
    await page.locator('.trajectory-detail .trained-note').getByText('Not trained').waitFor();
    assert.equal(
      await page
        .locator('.trajectory-detail select[aria-label="Colour tokens by"] option[value="trainer"]')
        .isDisabled(),
      true,
    );
    await page.locator('.trajectory-detail .tok').first().hover();
    assert.match(await page.locator('.token-readout').innerText(), /trainer logprob after not stored$/);
    // Partial: known trainer logprobs for its first two tokens only (p = 1 and p = 0.5: hues 120 and 60), the rest blank.
    const sampledCount = await page.locator('.trajectory-detail .tok').count();
    await e2e.server.services.repositories.trainedTokens.replaceStep(modelId, 0, [
      {
        groupIndex: details[untrainedAt].group_index,
        trajectoryIndex: details[untrainedAt].trajectory_index,
        advantage: 0.5,
        token_ids: [1, 2],
        sampler_logprobs: [-1, -1],
        trainer_logprobs: [0, Math.log(0.5)],
      },
    ]);
    await page.reload();
    await page.locator('.trajectory-detail .trained-note').getByText(`2 of ${sampledCount} tokens trained`).waitFor();
    await page.locator('.trajectory-detail').getByLabel('Colour tokens by').selectOption('trainer');
    const partial = await page
      .locator('.trajectory-detail .tok')
      .evaluateAll((nodes) =>
        nodes.map(
          (node) => node.getAttribute('data-hue') ?? (node.classList.contains('tok-untrained') ? 'blank' : 'unpainted'),
        ),
      );
    assert.deepEqual(partial, ['120', '60', ...Array(sampledCount - 2).fill('blank')]);
    await page.locator('.trajectory-detail .tok').nth(1).hover();
    assert.match(await page.locator('.token-readout').innerText(), /trainer logprob after -0\.6931 \(Δ /);
    await page.locator('.trajectory-detail .tok').nth(2).hover();
    assert.match(await page.locator('.token-readout').innerText(), /trainer logprob after not trained$/);

    await page.getByLabel('Split').selectOption('val');
    await page.getByLabel('Step').selectOption('3');
    await items.nth(1).click();
    const detail = page.locator('.trajectory-detail');
    const conversation = detail.locator('.conversation');
    await detail.getByRole('heading', { name: 'Group 0 · trajectory 1' }).waitFor();
    await conversation.getByText('What is the weather in Lyon?').waitFor();
    await detail.locator('.reasoning').getByText('I should call get_weather').waitFor();
    await detail.locator('.tool-call').getByText('get_weather').waitFor();
    assert.match(await detail.locator('.tool-call pre').innerText(), /"city": "Lyon"/);
    await detail.getByText('result of get_weather').waitFor();
    assert.match(await detail.locator('.msg-tool pre').innerText(), /"temperature_c": 21/);
    await conversation.getByText('It is 21 °C and clear in Lyon.').waitFor();
    await detail.locator('.empty-tokens').getByText('No sampled logprobs').waitFor();
    assert.equal(
      (await detail.locator('.reward-big').innerText()).replace(/\s+/g, ' ').trim().toLowerCase(),
      'reward 0.7',
    );
    assert.deepEqual(
      await detail.locator('.msg').evaluateAll((nodes) => nodes.map((node) => node.getAttribute('data-role'))),
      ['system', 'user', 'assistant', 'tool', 'assistant'],
    );
    await detail.getByText('Tools (1)').waitFor();
    assert.match(page.url(), /split=val&step=3/);

    // ↓ moves to the next trajectory.
    await items.nth(1).focus();
    await page.keyboard.press('ArrowDown');
    await conversation.getByText('What is the weather in Oslo?').waitFor();
    await items.nth(2).focus();
    await page.keyboard.press('ArrowUp');
    await conversation.getByText('What is the weather in Lyon?').waitFor();
    await session.screenshot('05-trajectory');
    expectNoProblems();
  });

  test("groups: a step's rollouts side by side, sorted by reward, with advantage, length, finish reason; a diff of two", async () => {
    await page.getByRole('link', { name: 'Groups' }).click();
    await page.locator('section.group').first().waitFor();
    assert.match(page.url(), new RegExp(`split=train&step=${stepsTrained - 1}`));
    assert.equal(await page.locator('section.group').count(), PROMPTS.length);
    for (const group of await page.locator('section.group').all()) {
      const cards = await group.locator('article.rollout').evaluateAll((nodes) =>
        nodes.map((node) => ({
          reward: Number(node.getAttribute('data-reward')),
          advantage: Number(node.getAttribute('data-advantage')),
          text: (node as HTMLElement).innerText,
        })),
      );
      assert.equal(cards.length, 3);
      const rewards = cards.map((card) => card.reward);
      assert.deepEqual(
        rewards,
        [...rewards].sort((a, b) => b - a),
        'sorted by reward, best first',
      );
      // rl-loss.md: A = (r − mean) / (population std + 1e-6).
      const mean = rewards.reduce((sum, reward) => sum + reward, 0) / rewards.length;
      const std = Math.sqrt(rewards.reduce((sum, reward) => sum + (reward - mean) ** 2, 0) / rewards.length);
      for (const card of cards)
        assert.ok(Math.abs(card.advantage - (card.reward - mean) / (std + 1e-6)) < 1e-9, JSON.stringify(card));
      for (const card of cards)
        assert.match(card.text, /length\s+\d+ tokens[\s\S]*finish\s+(stop|length)[\s\S]*tool calls\s+0/);
    }
    const first = page.locator('section.group').first();
    await first.getByRole('checkbox', { name: 'Diff trajectory 0' }).check();
    await first.getByRole('checkbox', { name: 'Diff trajectory 1' }).check();
    await first.locator('pre.diff').waitFor();
    assert.match(await first.locator('.group-diff h4').innerText(), /^T\d \(reward [\d.]+\) → T\d \(reward [\d.]+\)$/);

    // A logged split of plain messages: tool calls counted, no finish reason (nothing was sampled here).
    await page.getByLabel('Split').selectOption('val');
    await page.locator('section.group[data-group="1"] article.rollout').first().waitFor();
    const rome = page.locator('section.group[data-group="1"] article.rollout').first();
    assert.match(await rome.innerText(), /finish\s+—[\s\S]*tool calls\s+1/);
    assert.equal(
      await rome.getAttribute('data-reward'),
      '1',
      'Rome scored highest in the last logged split (0.9 + 0.1)',
    );
    await session.screenshot('05b-groups');
    expectNoProblems();
  });

  test('jobs: the list shows status; cancel a queued job; follow a job live to its end', async () => {
    // A long job, then one to follow and one to cancel, queued behind it on the same model.
    const big = Array.from({ length: 12 }, () => groupsForJobs).flat();
    const long = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: big,
      experimental_config: MANY_ROWS,
    });
    const followed = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: [...groupsForJobs, ...groupsForJobs],
      experimental_config: MANY_ROWS,
    });
    const doomed = await e2e.api('POST', '/v1/preview/training-jobs', {
      model_id: modelId,
      trajectory_groups: groupsForJobs,
      experimental_config: {},
    });

    await page.getByRole('link', { name: 'Jobs', exact: true }).first().click();
    await page.getByRole('heading', { name: 'Training jobs' }).waitFor();
    const doomedRow = page.locator(`tr[data-job="${doomed.body.id}"]`);
    await doomedRow.waitFor();
    assert.equal((await doomedRow.locator('.badge').innerText()).toLowerCase(), 'queued');
    await page.locator(`tr[data-job="${failedJobId}"] .badge`).getByText('failed').waitFor();
    assert.ok((await page.locator('table.jobs tbody tr').count()) >= 7);
    await session.screenshot('06-jobs');

    // Cancel the queued one from its page.
    await doomedRow.getByRole('link', { name: /^RL / }).click();
    await page.getByRole('button', { name: 'Cancel job' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel job' }).click();
    await page.locator('.status-slot .badge').getByText('cancelled').waitFor();
    await page.getByRole('alert').getByText('Cancelled', { exact: true }).waitFor();
    assert.equal((await e2e.api('GET', `/v1/preview/training-jobs/${doomed.body.id}`)).body.status, 'CANCELLED');

    // Follow the other one: queued behind the long job, then running, then completed — without a reload.
    await page.goto(`/#/jobs/${followed.body.id}`);
    await page.locator('.status-slot .badge').waitFor();
    // (A script string: tsx would wrap named functions in helpers the page does not have.)
    await page.evaluate(`(() => {
      const seen = (window.seen = []);
      function read() {
        const status = document.querySelector('.status-slot .badge')?.textContent ?? '';
        const progress = document.querySelector('#job-progress');
        const entry = status + ' ' + (progress ? progress.value + '/' + progress.max : '');
        if (seen.at(-1) !== entry) seen.push(entry);
      }
      read();
      new MutationObserver(read).observe(document.getElementById('content'), { subtree: true, childList: true, attributes: true, characterData: true });
    })()`);
    await page.locator('.status-slot .badge').getByText('completed').waitFor({ timeout: 60_000 });
    const seen = await page.evaluate(() => (window as unknown as { seen: string[] }).seen);
    assert.ok(
      seen.some((entry) => entry.startsWith('queued') || entry.startsWith('running')),
      `the page showed the job before it ended: ${seen.join(', ')}`,
    );
    const final = await waitForJob(e2e, followed.body.id);
    const total = final.num_sequences as number;
    assert.ok(total > 1, `several gradient steps: ${total}`);
    assert.equal(seen.at(-1), `completed ${total}/${total}`);
    assert.equal(await page.locator('.progress-label').innerText(), `${total} / ${total} gradient steps`);
    assert.match(
      await page.locator('.progress-rate').innerText(),
      /^[\d.]+ steps\/s on average$/,
      'the measured step rate',
    );
    // The configuration it ran with, defaults filled in, and how much data it got.
    const config = page.locator('dl.job-config');
    assert.equal(await config.locator('dd[data-key="packed_sequence_length"]').innerText(), '32');
    assert.ok(
      Number(await config.locator('dd[data-key="learning_rate"]').innerText()) > 0,
      'the default learning rate is shown',
    );
    assert.equal(await config.locator('dd[data-key="allow_training_without_logprobs"]').innerText(), 'false');
    await page.getByText(`${2 * PROMPTS.length} groups · ${2 * PROMPTS.length * 3} trajectories`).waitFor();
    await page.getByText(`Checkpoint step ${final.checkpoint_step} written`).waitFor();
    // The badge and that line come from the job; its last events arrive with the page's next poll (same transaction).
    await page.locator('table.events tbody tr[data-type="training_ended"]').waitFor();
    assert.equal(
      await page.locator('figure[data-chart="Loss"] .chart-legend li').getAttribute('data-points'),
      String(total),
      'one loss point per gradient step',
    );
    assert.equal(await page.locator('table.events tbody tr[data-type="gradient_step"]').count(), total);
    assert.equal(await page.locator('table.events tbody tr').first().getAttribute('data-type'), 'training_ended');
    await session.screenshot('07-job');
    await waitForJob(e2e, long.body.id);

    await page.goto(`/#/jobs/${failedJobId}`);
    const failure = page.getByRole('alert');
    await failure.getByText('Training failed').waitFor();
    assert.match(await failure.innerText(), /diverged/i);
    await page.locator('dl.job-config dd[data-key="allow_training_without_logprobs"]').getByText('true').waitFor();
    assert.equal(await page.locator('.progress-rate').innerText(), '', 'no rate without steps');
    await session.screenshot('08-job-failed');

    // Retention's deletions are part of the job that caused them.
    const pruned = (
      await e2e.api('POST', '/v1/preview/models', { project: 'dash', name: 'pruned', base_model: 'builtin/tiny-chat' })
    ).body.id;
    assert.equal((await e2e.api('PUT', `/v1/preview/models/${pruned}/retention`, { keep_last: 1 })).status, 200);
    let last = '';
    for (let round = 0; round < 2; round += 1) {
      last = (
        await e2e.api('POST', '/v1/preview/training-jobs', {
          model_id: pruned,
          trajectory_groups: groupsForJobs,
          experimental_config: {},
        })
      ).body.id;
      await waitForJob(e2e, last);
    }
    await page.goto(`/#/jobs/${last}`);
    const deletion = page.locator('table.events tbody tr[data-type="checkpoints_deleted"]');
    await deletion.waitFor();
    assert.match(await deletion.innerText(), /retention deleted step 1\b/);
    expectNoProblems();
  });

  test('playground: a checkpoint streams its reply; hovering a token shows its logprob', async () => {
    await page.getByRole('link', { name: 'Playground' }).click();
    await page.getByLabel('Model').selectOption({ label: 'dash / policy' });
    await page.getByLabel('Checkpoint').selectOption('3');
    assert.match(page.url(), /step=3/);
    await page.getByLabel('Max tokens').fill('24');
    await page.getByLabel('Temperature').fill('1');

    // Record the reply's length at every DOM change: a streamed reply grows piece by piece. The tiny model
    // writes 24 tokens in a few milliseconds, so the network is slowed to let the pieces arrive apart.
    await page.evaluate(`(() => {
      const lengths = (window.lengths = []);
      new MutationObserver(() => {
        const reply = document.querySelector('.msg-assistant .reply-tokens');
        if (reply && lengths.at(-1) !== reply.textContent.length) lengths.push(reply.textContent.length);
      }).observe(document.querySelector('.chat-log'), { subtree: true, childList: true, characterData: true });
    })()`);
    const cdp = await session.context.newCDPSession(page);
    await cdp.send('Network.enable');
    await cdp.send('Network.emulateNetworkConditions', {
      offline: false,
      latency: 0,
      downloadThroughput: 12 * 1024,
      uploadThroughput: -1,
    });
    await page.getByLabel('Message').fill('Tell me a story about a robot.');
    await page.getByLabel('Message').press('Enter');
    const reply = page.locator('.msg-assistant').last();
    await reply.locator('.msg-foot[data-finish]').waitFor({ timeout: 30_000 });
    await cdp.send('Network.emulateNetworkConditions', {
      offline: false,
      latency: 0,
      downloadThroughput: -1,
      uploadThroughput: -1,
    });
    await cdp.detach();
    // Random weights rarely end a reply early, but a trained tiny model may: either ending is fine.
    const finish = await reply.locator('.msg-foot').getAttribute('data-finish');
    assert.ok(finish === 'length' || finish === 'stop', `finish: ${finish}`);
    assert.equal(await reply.locator('.model-name').innerText(), 'local/dash/policy:step3');
    const pieces = await reply.locator('.tok').count();
    assert.ok(pieces > 1, `several streamed pieces: ${pieces}`);
    const lengths = await page.evaluate(() => (window as unknown as { lengths: number[] }).lengths);
    assert.ok(
      lengths.length >= 3 && lengths.every((length, i) => i === 0 || length > lengths[i - 1]),
      `the reply grew while streaming: ${lengths.join(',')}`,
    );
    const footer = await reply.locator('.msg-foot').innerText();
    const tokens = Number(/^(\d+) tokens · .* tokens\/s/.exec(footer)?.[1]);
    assert.ok(tokens >= pieces - 1 && tokens <= 24, footer);
    assert.equal(
      await page
        .locator('.msg-user')
        .innerText()
        .then((text) => text.includes('Tell me a story about a robot.')),
      true,
    );

    await reply.locator('.tok').nth(1).hover();
    const tip = page.locator('#token-tip');
    await tip.waitFor({ state: 'visible' });
    assert.match(await tip.innerText(), /logprob -?\d/);
    assert.ok((await tip.locator('.tip-table tr').count()) >= 1, 'alternatives are listed');
    await session.screenshot('09-playground');

    // The keyboard reads the same logprobs: focus the reply, → moves token by token.
    await reply.locator('.reply-tokens').focus();
    await page.keyboard.press('ArrowRight');
    await page.keyboard.press('ArrowRight');
    assert.equal(await reply.locator('.tok.active').count(), 1);
    await tip.waitFor({ state: 'visible' });

    // A second turn goes to the same checkpoint with the history.
    await page.getByLabel('Message').fill('And then?');
    await page.getByLabel('Message').press('Enter');
    await page.locator('.msg-assistant').nth(1).locator('.msg-foot[data-finish]').waitFor({ timeout: 30_000 });
    assert.equal(await page.locator('.msg-user').count(), 2);
    expectNoProblems();
  });

  test('a model with 200 checkpoints paints in under a second', async () => {
    const { models, trajectories } = e2e.server.services.repositories;
    const big = await e2e.api('POST', '/v1/preview/models', {
      project: 'dash',
      name: 'long-run',
      base_model: 'builtin/tiny-chat',
    });
    const run = big.body.run_id as string;
    for (let step = 1; step <= 200; step += 1) {
      const metrics = {
        reward: Math.tanh(step / 60) + 0.05 * Math.sin(step),
        reward_std_dev: 0.2 / Math.sqrt(step),
        loss: 1 / step,
        grad_norm: 0.5 + 0.1 * Math.cos(step),
        entropy: 2 - step / 200,
        tokens_per_second: 900 + step,
      };
      const now = new Date().toISOString();
      await models.insertCheckpoint({
        id: newId(),
        model_id: big.body.id,
        step,
        metrics: JSON.stringify(metrics),
        adapter_path: null,
        created_at: now,
      });
      await trajectories.insertRunMetrics(run, step, 'train', metrics, now);
      if (step % 10 === 0)
        await trajectories.insertRunMetrics(
          run,
          step,
          'log:val',
          { 'val/reward': metrics.reward - 0.1, 'val/reward_std_dev': 0.1 },
          now,
        );
    }
    const fresh = await session.context.newPage();
    fresh.setDefaultTimeout(TIMEOUT);
    await fresh.addInitScript((key) => sessionStorage.setItem('agent-trainer.api-key', key), e2e.key);
    await fresh.goto(`/#/models/${big.body.id}`);
    await fresh.locator('figure[data-chart="Reward"][data-series-count="2"] canvas').waitFor();
    await fresh.locator('table.checkpoints tbody tr').nth(99).waitFor();
    // Times from the browser's own clock, counted from the start of navigation.
    const timing = await fresh.evaluate(() => ({
      paint: performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? null,
      now: performance.now(),
    }));
    assert.ok(timing.paint !== null && timing.paint < 1000, `first contentful paint ${timing.paint} ms`);
    assert.ok(timing.now < 2000, `chart and checkpoints shown ${timing.now} ms after navigation started`);
    console.log(
      `# 200 checkpoints: first contentful paint ${timing.paint?.toFixed(0)} ms; chart and table complete by ${timing.now.toFixed(0)} ms`,
    );
    const points = await fresh
      .locator('figure[data-chart="Reward"] .chart-legend li')
      .evaluateAll((nodes) => nodes.map((node) => node.getAttribute('data-points')));
    assert.deepEqual(points, ['200', '20'], 'train at every step, val at every tenth');
    assert.equal(await fresh.locator('table.checkpoints tbody tr').count(), 100, 'the first page of checkpoints');
    await fresh.screenshot({ path: path.join(SCREENSHOT_DIR, '10-model-200-checkpoints.png') });
    await fresh.getByRole('button', { name: 'Load more checkpoints' }).click();
    await fresh.locator('table.checkpoints tbody tr').nth(199).waitFor();
    await fresh.close();
    expectNoProblems();
  });

  test('empty and partial states: a model with no jobs, a model whose only job failed at once, no trajectories to group', async () => {
    const models = (await e2e.api('GET', '/v1/dashboard/models?limit=100')).body.data as { id: string; name: string }[];
    const idOf = (name: string) => models.find((model) => model.name === name)!.id;
    await page.goto(`/#/models/${idOf('baseline')}`);
    await page.getByText('No metrics yet').waitFor();
    await page.getByText('No jobs yet').waitFor();
    await page.goto(`/#/models/${idOf('broken')}`);
    await page.getByText('No metrics yet').waitFor();
    await page.locator('table.jobs tr[data-status="FAILED"]').waitFor();
    await page.goto(`/#/models/${idOf('baseline')}/groups`);
    await page.getByText('No trajectories yet').waitFor();
    await session.screenshot('11-empty-groups');
    expectNoProblems();
  });

  test('at 390 px wide the navigation fits, nothing scrolls sideways, and the keyboard still reaches every page', async () => {
    const phone = await session.context.newPage();
    phone.setDefaultTimeout(TIMEOUT);
    await phone.setViewportSize({ width: 390, height: 844 });
    await phone.addInitScript((key) => sessionStorage.setItem('agent-trainer.api-key', key), e2e.key);
    phone.on('pageerror', (error) => session.problems.push(`page error: ${error.message}`));
    for (const target of [`/#/models/${modelId}`, `/#/models/${modelId}/groups`, '/#/jobs', '/#/engines']) {
      await phone.goto(target);
      await phone.locator('main h1').first().waitFor();
      for (const link of await phone.getByRole('navigation', { name: 'Main' }).getByRole('link').all()) {
        const box = (await link.boundingBox())!;
        assert.ok(
          box.x >= 0 && box.x + box.width <= 390,
          `${await link.innerText()} is on screen at ${target}: ${JSON.stringify(box)}`,
        );
      }
      const widths = await phone.evaluate(() => {
        const client = document.documentElement.clientWidth;
        // The outermost elements that stick out, to name the culprit.
        const wide = [...document.querySelectorAll('body *')].filter(
          (node) =>
            node.getBoundingClientRect().right > client + 1 &&
            !(node.parentElement && node.parentElement.getBoundingClientRect().right > client + 1),
        );
        return {
          scroll: document.documentElement.scrollWidth,
          client,
          wide: wide.slice(0, 5).map((node) => `${node.tagName}.${node.className}`),
        };
      });
      assert.ok(widths.scroll <= widths.client, `no sideways scroll at ${target}: ${JSON.stringify(widths)}`);
    }
    await phone.goto(`/#/models/${modelId}`);
    await phone.locator('figure[data-chart="Reward"] canvas').waitFor();
    await phone.screenshot({ path: path.join(SCREENSHOT_DIR, '12-phone-model.png'), fullPage: true });
    // From the page's content, back up into the top bar.
    await phone.locator('main').focus();
    let reached = false;
    for (let presses = 0; presses < 10 && !reached; presses += 1) {
      await phone.keyboard.press('Shift+Tab');
      reached = await phone.evaluate(() => document.activeElement?.textContent === 'Playground');
    }
    assert.ok(reached, 'Tab reaches the Playground link');
    await phone.close();
    expectNoProblems();
  });

  test('engines: the trainer and the sampler, each with its process, state and memory by kind', async () => {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Engines' }).click();
    await page.getByRole('heading', { name: 'Engines' }).waitFor();
    const trainer = page.locator('section[data-role="trainer"]');
    await trainer.locator('table').waitFor();
    assert.match(await trainer.innerText(), /ready/i);
    const rows = await trainer.locator('tbody th').allTextContents();
    for (const kind of ['Resident (RSS)', 'Base weights (this process’s share)', 'Adapters', 'Adam moments'])
      assert.ok(rows.includes(kind), `${kind} among ${rows.join(', ')}`);
    assert.match((await trainer.locator('thead').textContent()) ?? '', /rank 0 · pid \d+ · cpu/);
    assert.match(await trainer.locator('tbody').innerText(), /\d+(\.\d+)? (MiB|GiB)/);
    await page.locator('section[data-role="sampler"] table').waitFor();
    await page.screenshot({ path: path.join(SCREENSHOT_DIR, '14-engines.png'), fullPage: true });
    expectNoProblems();
  });

  test('sign out forgets the key', async () => {
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.length), 0);
    assert.equal(await page.getByRole('navigation', { name: 'Main' }).isVisible(), false);
    expectNoProblems();
  });
});

describe('dashboard: a model trained with held-out evaluations (skipped without Chromium)', {
  skip: chromiumAvailable() ? false : `no Chromium at ${CHROMIUM}`,
}, () => {
  let e2e: E2eServer;
  let session: BrowserSession;
  let modelId: string;

  // The history examples/rl_capitals_art.py leaves: held-out groups logged with split "val" at step 0 and after each
  // training job, and the train reward each job records.
  before(async () => {
    e2e = await startE2eServer();
    modelId = (
      await e2e.api('POST', '/v1/preview/models', {
        project: 'examples',
        name: 'capitals',
        base_model: 'builtin/tiny-chat',
      })
    ).body.id;
    for (let step = 0; step <= 2; step += 1) {
      const held = [
        await sampleGroup(
          e2e,
          'local/examples/capitals',
          'Name a colour.',
          3,
          (_choice, i) => Math.min(1, 0.2 * step + 0.3 * i),
          100 + step * 10,
        ),
      ];
      const logged = await e2e.api('POST', `/v1/preview/models/${modelId}/log`, {
        split: 'val',
        trajectory_groups: held,
      });
      assert.equal(logged.status, 200, JSON.stringify(logged.body));
      if (step === 2) break;
      const groups = [
        await sampleGroup(
          e2e,
          'local/examples/capitals',
          'Count to three.',
          3,
          (_choice, i) => Math.min(1, 0.3 * step + 0.25 * i),
          step * 10,
        ),
      ];
      const job = await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: modelId,
        trajectory_groups: groups,
        experimental_config: {},
      });
      assert.equal(job.status, 200, JSON.stringify(job.body));
      assert.equal((await waitForJob(e2e, job.body.id)).status, 'COMPLETED');
    }
    session = await openBrowser(e2e.url);
    session.page.setDefaultTimeout(TIMEOUT);
    await session.page.addInitScript((key) => sessionStorage.setItem('agent-trainer.api-key', key), e2e.key);
  });
  after(async () => {
    await session?.close();
    await e2e?.close();
  });

  test('the model page, screenshot-checked: the reward chart draws the train and the val curve, each in its own colour', async () => {
    const page = session.page;
    await page.goto(`/#/models/${modelId}`);
    const reward = page.locator('figure[data-chart="Reward"][data-series-count="2"]');
    await reward.locator('canvas').first().waitFor();
    await page.mouse.move(0, 0);
    const legend = await reward.locator('.chart-legend li').evaluateAll((nodes) =>
      nodes.map((node) => ({
        key: node.getAttribute('data-series'),
        points: node.getAttribute('data-points'),
        colour: getComputedStyle(node.querySelector('.swatch')!).backgroundColor,
      })),
    );
    assert.deepEqual(
      legend.map(({ key, points }) => [key, points]),
      [
        ['0:train:reward', '2'],
        ['0:val:reward', '3'],
      ],
    );
    assert.notEqual(legend[0].colour, legend[1].colour, 'train and val in different colours');
    // What was drawn: each curve's colour on the chart's canvas, in a screenshot of it.
    const png = await reward
      .locator('canvas')
      .first()
      .screenshot({ path: path.join(SCREENSHOT_DIR, '20-model-train-val-chart.png') });
    const pixels = decodePng(png);
    for (const { key, colour } of legend) {
      const drawn = countNear(pixels, colour.match(/\d+/g)!.map(Number), 40);
      assert.ok(drawn > 50, `${key}: only ${drawn} pixels of ${colour} on the chart`);
    }
    await session.screenshot('20-model-train-val');
    assert.deepEqual(session.problems, [], 'no browser console errors, page errors or failed requests');
  });

  test("a captured trajectory (ART's exchanges form) reads like a legacy one: the rollout's turns, its choices", async () => {
    // Two chat exchanges of one rollout, as ART 0.5.20+'s `with art.Trajectory()` records them from our answers.
    const chat = async (messages: Record<string, unknown>[]) => {
      // As ART's client asks: token ids, and logprob tokens written as ids.
      const request = {
        model: 'builtin/tiny-chat',
        messages,
        max_tokens: 4,
        logprobs: true,
        return_token_ids: true,
        return_tokens_as_token_ids: true,
      };
      const response = await e2e.api('POST', '/v1/chat/completions', request);
      assert.equal(response.status, 200, JSON.stringify(response.body));
      return { request, response: response.body, start_time: new Date().toISOString() };
    };
    const first = await chat([{ role: 'user', content: 'Name a colour.' }]);
    const second = await chat([
      ...first.request.messages,
      first.response.choices[0].message,
      { role: 'user', content: 'Another one?' },
    ]);
    const logged = await e2e.api('POST', `/v1/preview/models/${modelId}/log`, {
      split: 'captured',
      trajectory_groups: [{ trajectories: [{ exchanges: { chat_completions: [first, second] }, reward: 1 }] }],
    });
    assert.equal(logged.status, 200, JSON.stringify(logged.body));
    const page = session.page;
    await page.goto(`/#/models/${modelId}/trajectories?split=captured`);
    const detail = page.locator('.trajectory-detail');
    await detail.getByText('captured: chat_completions').waitFor();
    const roles = await detail
      .locator('.conversation .msg')
      .evaluateAll((nodes) => nodes.map((node) => node.getAttribute('data-role')));
    assert.deepEqual(roles, ['user', 'assistant', 'user', 'assistant']);
    assert.equal(await detail.locator('.conversation .msg').getByText('choice', { exact: true }).count(), 2);
    // The sampled tokens read as text, not as the ids the logprobs were written as.
    const tokens = await detail.locator('.token-view .tok').allInnerTexts();
    assert.ok(tokens.length > 0 && tokens.every((token) => !token.startsWith('token_id:')), JSON.stringify(tokens));
    assert.ok(tokens.join('').startsWith(first.response.choices[0].message.content), JSON.stringify(tokens));
    await session.screenshot('21-captured-trajectory');
    assert.deepEqual(session.problems, [], 'no browser console errors, page errors or failed requests');
  });
});

/** A PNG as Chromium writes screenshots (8-bit RGB or RGBA, not interlaced): rows of [r, g, b] pixels, unfiltered. */
function decodePng(png: Buffer): { width: number; height: number; rgb: Uint8Array } {
  const width = png.readUInt32BE(16);
  const height = png.readUInt32BE(20);
  const channels = png[25] === 6 ? 4 : 3;
  assert.ok(png[24] === 8 && (png[25] === 2 || png[25] === 6) && png[28] === 0, 'an 8-bit RGB(A) PNG');
  const chunks: Buffer[] = [];
  for (let at = 8; at < png.length; ) {
    const length = png.readUInt32BE(at);
    if (png.toString('latin1', at + 4, at + 8) === 'IDAT') chunks.push(png.subarray(at + 8, at + 8 + length));
    at += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(chunks));
  const stride = width * channels;
  const rows = new Uint8Array(height * stride);
  for (let y = 0; y < height; y += 1) {
    const filter = raw[y * (stride + 1)];
    for (let x = 0; x < stride; x += 1) {
      const value = raw[y * (stride + 1) + 1 + x];
      const left = x >= channels ? rows[y * stride + x - channels] : 0;
      const up = y > 0 ? rows[(y - 1) * stride + x] : 0;
      const upLeft = y > 0 && x >= channels ? rows[(y - 1) * stride + x - channels] : 0;
      const predictors = [0, left, up, (left + up) >> 1, paeth(left, up, upLeft)];
      rows[y * stride + x] = (value + predictors[filter]) & 0xff;
    }
  }
  const rgb = new Uint8Array(width * height * 3);
  for (let i = 0; i < width * height; i += 1) rgb.set(rows.subarray(i * channels, i * channels + 3), i * 3);
  return { width, height, rgb };
}

function paeth(a: number, b: number, c: number): number {
  const p = a + b - c;
  const [pa, pb, pc] = [Math.abs(p - a), Math.abs(p - b), Math.abs(p - c)];
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/** Pixels within `tolerance` (per channel) of a colour. */
function countNear(image: { rgb: Uint8Array }, [r, g, b]: number[], tolerance: number): number {
  let count = 0;
  for (let i = 0; i < image.rgb.length; i += 3) {
    if (
      Math.abs(image.rgb[i] - r) <= tolerance &&
      Math.abs(image.rgb[i + 1] - g) <= tolerance &&
      Math.abs(image.rgb[i + 2] - b) <= tolerance
    )
      count += 1;
  }
  return count;
}
