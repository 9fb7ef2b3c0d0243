/**
 * The dashboard in headless Chromium: how long the models page and a model with 2,000 steps and 5 overlaid
 * runs (6 metrics each, reward with a std band, a val split every 10 steps) take from navigation to every
 * chart drawn, median of 5 loads each. Prints ms against the 1 s goal; asserts nothing.
 * Usage: npx tsx bench/dashboard-render.ts
 */
import { chromiumAvailable, CHROMIUM, openBrowser } from '../test/helpers/browser.ts';
import { startE2eServer } from '../test/helpers/server.ts';

const STEPS = 2000;
const RUNS = 5;
const LOADS = 5;
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

if (!chromiumAvailable()) {
  console.log(`no Chromium at ${CHROMIUM}; scripts/install.sh installs it`);
  process.exit(0);
}
const e2e = await startE2eServer();
const session = await openBrowser(e2e.url);
try {
  const { trajectories } = e2e.server.services.repositories;
  const ids: string[] = [];
  for (let run = 0; run < RUNS; run += 1) {
    const model = await e2e.api('POST', '/v1/preview/models', { project: 'bench', name: `run-${run}`, base_model: 'builtin/tiny-chat' });
    ids.push(model.body.id);
    const started = Date.now() - STEPS * 1000;
    for (let step = 1; step <= STEPS; step += 1) {
      const at = new Date(started + step * 1000).toISOString();
      const reward = Math.min(1, Math.max(0, Math.tanh(step / (300 + 50 * run)) + 0.05 * Math.sin(step)));
      await trajectories.insertRunMetrics(model.body.run_id, step, 'train', { reward, reward_std_dev: 0.2, loss: 1 / step, grad_norm: 0.5 + 0.1 * Math.cos(step), entropy: 2 - step / STEPS, tokens_per_second: 900 + step }, at);
      if (step % 10 === 0) await trajectories.insertRunMetrics(model.body.run_id, step, 'log:val', { 'val/reward': reward * 0.9, 'val/reward_std_dev': 0.1 }, at);
    }
  }
  await session.context.addInitScript((key) => sessionStorage.setItem('agent-trainer.api-key', key), e2e.key);

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
    overlaid.push(await timeLoad(`/#/models/${ids[0]}?compare=${compare}`, `figure[data-chart="Reward"][data-series-count="${2 * RUNS}"] canvas`));
  }
  console.log(`models page (${RUNS} models): ${median(modelsPage).toFixed(0)} ms median of ${LOADS} loads (goal < 1000 ms)`);
  console.log(`model page, ${STEPS} steps × ${RUNS} overlaid runs, all charts drawn: ${median(overlaid).toFixed(0)} ms median of ${LOADS} loads (goal < 1000 ms)`);
} finally {
  await session.close();
  await e2e.close();
}
