/**
 * The tokens view of one 4,000-token trajectory in headless Chromium: time from navigation to every token
 * painted, to recolour all of them by the trainer's logprob after the step, and to answer a hover (event to
 * readout updated), medians of 5 loads and of 200 hovers. Prints ms; asserts nothing.
 * Usage: npx tsx bench/dashboard-tokens.ts
 */
import { benchDashboard } from './dashboard-session.ts';
import { median } from './measure.ts';

const TOKENS = 4000;
const LOADS = 5;
const HOVERS = 200;

await benchDashboard(async (e2e, session) => {
  const model = (
    await e2e.api('POST', '/v1/preview/models', { project: 'bench', name: 'tokens', base_model: 'builtin/tiny-chat' })
  ).body;
  const logprob = (i: number) => -((i * 37) % 500) / 100;
  const content = Array.from({ length: TOKENS }, (_, i) => ({
    token: `t${i % 97} `,
    logprob: logprob(i),
    bytes: null,
    top_logprobs: [],
  }));
  const choice = {
    index: 0,
    finish_reason: 'length',
    message: { role: 'assistant', content: content.map((entry) => entry.token).join('') },
    logprobs: { content },
  };
  const logged = await e2e.api('POST', `/v1/preview/models/${model.id}/log`, {
    split: 'train',
    trajectory_groups: [
      { trajectories: [{ messages_and_choices: [{ role: 'user', content: 'Go.' }, choice], reward: 1 }] },
    ],
  });
  if (logged.status !== 200) throw new Error(JSON.stringify(logged.body));
  await e2e.server.services.repositories.trainedTokens.replaceStep(model.id, 0, [
    {
      groupIndex: 0,
      trajectoryIndex: 0,
      advantage: 1,
      token_ids: content.map((_, i) => i),
      sampler_logprobs: content.map((entry) => entry.logprob),
      trainer_logprobs: content.map((entry) => entry.logprob / 2),
    },
  ]);

  const loads: number[] = [];
  const recolours: number[] = [];
  let hovers: number[] = [];
  for (let load = 0; load < LOADS; load += 1) {
    const page = await session.context.newPage();
    await page.goto(`/#/models/${model.id}/trajectories?split=train&step=0`);
    await page.locator(`.token-view .tok[data-index="${TOKENS - 1}"][data-hue]`).waitFor({ timeout: 30_000 });
    loads.push(await page.evaluate(() => performance.now()));
    recolours.push(
      await page.evaluate(() => {
        const picker = document.querySelector<HTMLSelectElement>('select[aria-label="Colour tokens by"]')!;
        const started = performance.now();
        picker.value = 'trainer';
        picker.dispatchEvent(new Event('change'));
        return performance.now() - started;
      }),
    );
    // The readout updates synchronously in the mouseover handler; layout is forced so its cost counts too.
    hovers = hovers.concat(
      await page.evaluate((count) => {
        const spans = [...document.querySelectorAll<HTMLElement>('.token-view .tok')];
        const readout = document.querySelector<HTMLElement>('.token-readout')!;
        return Array.from({ length: count }, (_, i) => {
          const started = performance.now();
          spans[(i * 131) % spans.length].dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
          void readout.offsetHeight;
          return performance.now() - started;
        });
      }, HOVERS),
    );
    await page.close();
  }
  console.log(
    `tokens view, ${TOKENS} tokens: navigation to all painted ${median(loads).toFixed(0)} ms median of ${LOADS} loads`,
  );
  console.log(`recolour by trainer logprob after the step: ${median(recolours).toFixed(1)} ms median of ${LOADS}`);
  console.log(
    `hover to readout: ${median(hovers).toFixed(2)} ms median, ${Math.max(...hovers).toFixed(2)} ms max of ${hovers.length}`,
  );
});
