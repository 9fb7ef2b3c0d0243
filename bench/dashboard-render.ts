/**
 * The dashboard in headless Chromium: how long the models page and a model with 2,000 steps and 5 overlaid
 * runs (6 metrics each, reward with a std band, a val split every 10 steps) take from navigation to every
 * chart drawn, median of 5 loads each. Prints ms against the 1 s goal; asserts nothing.
 * Usage: npx tsx bench/dashboard-render.ts
 */
import { benchDashboard } from './dashboard-session.ts';
import { median } from './measure.ts';

const STEPS = 2000;
const RUNS = 5;
const LOADS = 5;

await benchDashboard(async (e2e, session) => {
  const { trajectories } = e2e.server.services.repositories;
  const ids: string[] = [];
  for (let run = 0; run < RUNS; run += 1) {
    const model = await e2e.api('POST', '/v1/preview/models', {
      project: 'bench',
      name: `run-${run}`,
      base_model: 'builtin/tiny-chat',
    });
    ids.push(model.body.id);
    const started = Date.now() - STEPS * 1000;
    for (let step = 1; step <= STEPS; step += 1) {
      const at = new Date(started + step * 1000).toISOString();
      const reward = Math.min(1, Math.max(0, Math.tanh(step / (300 + 50 * run)) + 0.05 * Math.sin(step)));
      await trajectories.insertRunMetrics(
        model.body.run_id,
        step,
        'train',
        {
          reward,
          reward_std_dev: 0.2,
          loss: 1 / step,
          grad_norm: 0.5 + 0.1 * Math.cos(step),
          entropy: 2 - step / STEPS,
          tokens_per_second: 900 + step,
        },
        at,
      );
      if (step % 10 === 0)
        await trajectories.insertRunMetrics(
          model.body.run_id,
          step,
          'log:val',
          { 'val/reward': reward * 0.9, 'val/reward_std_dev': 0.1 },
          at,
        );
    }
  }

  const timeLoad = async (target: string, ready: string) => {
    const page = await session.context.newPage();
    await page.goto(target);
    await page.locator(ready).first().waitFor({ timeout: 30_000 });
    const ms = await page.evaluate(() => performance.now());
    await page.close();
    return ms;
  };
  const modelsPage: number[] = [];
  const overlaid: number[] = [];
  const compare = ids.slice(1).join(',');
  for (let load = 0; load < LOADS; load += 1) {
    modelsPage.push(await timeLoad('/#/', 'tr[data-model="run-4"]'));
    overlaid.push(
      await timeLoad(
        `/#/models/${ids[0]}?compare=${compare}`,
        `figure[data-chart="Reward"][data-series-count="${2 * RUNS}"] canvas`,
      ),
    );
  }
  console.log(
    `models page (${RUNS} models): ${median(modelsPage).toFixed(0)} ms median of ${LOADS} loads (goal < 1000 ms)`,
  );
  console.log(
    `model page, ${STEPS} steps × ${RUNS} overlaid runs, all charts drawn: ${median(overlaid).toFixed(0)} ms median of ${LOADS} loads (goal < 1000 ms)`,
  );
});
