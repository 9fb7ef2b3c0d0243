/**
 * Serving while training: chat latency idle and while an RL job trains, and the job's trainable
 * tokens/s alone and while chat is served, for one engine holding both roles (ENGINES=single) and for
 * separate sampler and trainer engines (ENGINES=separate). Each configuration runs its own server, one after
 * the other, so they never share the cores. Prints the figures side by side; asserts nothing.
 * Usage: npx tsx bench/serve-while-training.ts [--groups 16] [--idle 40]
 */
import { parseArgs } from 'node:util';
import { allEvents, submitRl, waitForJob } from '../test/helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from '../test/helpers/server.ts';
import { questionGroups, timedChat } from './measure.ts';

const { values } = parseArgs({
  options: { groups: { type: 'string', default: '16' }, idle: { type: 'string', default: '40' } },
});
const GROUPS = Number(values.groups);
const IDLE_REQUESTS = Number(values.idle);

interface Figures {
  idle: number[];
  during: number[];
  aloneTokensPerSecond: number;
  servingTokensPerSecond: number;
}

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
};

const CHAT_TOKENS = 16;
const chatOnce = async (e2e: E2eServer, model: string) =>
  (await timedChat(e2e, 'Tell me about the weather today.', model, CHAT_TOKENS)).ms;

/** Runs one RL job; while `serving`, chats back to back until it ends. Answers tokens/s and the latencies. */
async function trainJob(
  e2e: E2eServer,
  modelId: string,
  model: string,
  groups: { trajectories: unknown[] }[],
  serving: boolean,
) {
  const jobId = await submitRl(e2e, modelId, groups);
  const latencies: number[] = [];
  let finished = false;
  const done = waitForJob(e2e, jobId, 900_000).finally(() => (finished = true));
  if (serving) {
    // Start measuring once the job trains, not while it waits in the queue or tokenizes.
    while (!finished && (await e2e.api('GET', `/v1/preview/training-jobs/${jobId}`)).body.status !== 'RUNNING')
      await new Promise((r) => setTimeout(r, 20));
    while (!finished) latencies.push(await chatOnce(e2e, model));
  }
  const record = await done;
  if (record.status !== 'COMPLETED') throw new Error(`job ${record.status}: ${JSON.stringify(record.error)}`);
  const events = await allEvents(e2e, jobId);
  const steps = events.filter((event) => event.type === 'gradient_step');
  const tokens = steps.reduce((sum, event) => sum + Number(event.data.num_trainable_tokens), 0);
  const at = (event: unknown) => Date.parse((event as { created_at: string }).created_at);
  const started = at(events.find((event) => event.type === 'training_started'));
  return { tokensPerSecond: tokens / ((at(steps.at(-1)) - started) / 1000), latencies };
}

async function measure(engines: 'single' | 'separate'): Promise<Figures> {
  const e2e = await startE2eServer({ env: { ENGINES: engines } });
  try {
    const modelId = (
      await e2e.api('POST', '/v1/preview/models', { project: 'bench', name: 'swt', base_model: 'builtin/tiny-chat' })
    ).body.id;
    const model = 'local/bench/swt';
    const groups = await questionGroups(e2e, model, GROUPS);
    for (let i = 0; i < 5; i += 1) await chatOnce(e2e, model); // warm-up
    const idle: number[] = [];
    for (let i = 0; i < IDLE_REQUESTS; i += 1) idle.push(await chatOnce(e2e, model));
    await trainJob(e2e, modelId, model, groups.slice(0, 2), false); // warm-up: the trainer loads the base, torch its kernels
    const alone = await trainJob(e2e, modelId, model, groups, false);
    const serving = await trainJob(e2e, modelId, model, groups, true);
    return {
      idle,
      during: serving.latencies,
      aloneTokensPerSecond: alone.tokensPerSecond,
      servingTokensPerSecond: serving.tokensPerSecond,
    };
  } finally {
    await e2e.close();
  }
}

const results = { single: await measure('single'), separate: await measure('separate') };
const row = (label: string, cell: (f: Figures) => string) =>
  console.log(`${label.padEnd(42)}${cell(results.single).padStart(14)}${cell(results.separate).padStart(14)}`);
const ms = (value: number) => `${value.toFixed(0)} ms`;
console.log(`\nserve while training: ${GROUPS} groups x 4 per RL job, chat of ${CHAT_TOKENS} tokens at temperature 0`);
row('', () => '');
console.log(`${''.padEnd(42)}${'single'.padStart(14)}${'separate'.padStart(14)}`);
row('chat p50 idle', (f) => ms(percentile(f.idle, 50)));
row('chat p99 idle', (f) => ms(percentile(f.idle, 99)));
row('chat p50 during RL job', (f) => ms(percentile(f.during, 50)));
row('chat p99 during RL job', (f) => ms(percentile(f.during, 99)));
row('chat requests during the job', (f) => String(f.during.length));
row('p50 during / p50 idle', (f) => `${(percentile(f.during, 50) / percentile(f.idle, 50)).toFixed(2)}x`);
row('train tokens/s alone', (f) => f.aloneTokensPerSecond.toFixed(0));
row('train tokens/s while serving', (f) => f.servingTokensPerSecond.toFixed(0));
row('train rate while serving / alone', (f) => `${(f.servingTokensPerSecond / f.aloneTokensPerSecond).toFixed(2)}x`);
