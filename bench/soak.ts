/**
 * Soak: N minutes of mixed traffic against a real server in its own process (chat streamed and not,
 * trajectory logging, artifact uploads, small RL and SFT jobs one after another, old checkpoints deleted as
 * ART does), sampling the resident memory of the server and of its engine through /proc. Prints the series
 * and whether each stays flat within 10% after the warm-up (the mean of the last samples against the first);
 * exits 1 when one does not or a request got a 5xx.
 * Usage: npx tsx bench/soak.ts [--minutes 30] [--sample-seconds 60] [--warmup-minutes 5]
 * (DATABASE_URL runs it on PostgreSQL.)
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { type Api, httpApi } from '../test/helpers/api.ts';
import { childPids, rssBytes, type ServerProcess, spawnServerProcess } from '../test/helpers/server-process.ts';

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '30' },
    'sample-seconds': { type: 'string', default: '60' },
    'warmup-minutes': { type: 'string', default: '5' },
  },
});
const MINUTES = Number(values.minutes);
const SAMPLE_MS = Number(values['sample-seconds']) * 1000;
const WARMUP_MS = Number(values['warmup-minutes']) * 60_000;
const KEY = `sk-${'soak'.repeat(8)}`;
const MODEL = 'local/soak/main';
const TOLERANCE = 0.1;

interface Sample {
  seconds: number;
  server: number | null;
  engine: number | null;
  requests: number;
  jobs: number;
}

/** Counts answers by status; a 5xx or a network failure is remembered with its route. */
class Tally {
  statuses = new Map<string, number>();
  failures: string[] = [];
  requests = 0;
  jobs = 0;

  record(route: string, status: number | string): void {
    this.requests += 1;
    this.statuses.set(String(status), (this.statuses.get(String(status)) ?? 0) + 1);
    if (typeof status !== 'number' || status >= 500) this.failures.push(`${route} → ${status}`);
  }
}

const PROMPTS = ['Say a word.', 'What is 2+2?', 'Name a colour.', 'Count to three.', 'Greet me.'];
const pick = <T>(items: T[], i: number) => items[i % items.length];

async function chatLoop(server: ServerProcess, tally: Tally, until: number, worker: number): Promise<void> {
  for (let i = 0; Date.now() < until; i += 1) {
    const stream = (i + worker) % 2 === 0;
    const body = {
      model: MODEL,
      messages: [{ role: 'user', content: pick(PROMPTS, i) }],
      max_tokens: 16,
      seed: i,
      stream,
      temperature: 0.8,
    };
    const response = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    }).catch(() => null);
    const text = response ? await response.text() : '';
    const streamedError = stream && /"error":\{/.test(text);
    tally.record(
      stream ? 'chat (stream)' : 'chat',
      response === null ? 'network' : streamedError ? 'stream-error' : response.status,
    );
  }
}

/** A sampled group of two answers with logprobs, as ART submits for RL. */
async function sampleGroup(api: Api, tally: Tally, i: number): Promise<unknown> {
  const trajectories = [];
  for (const seed of [i, i + 1]) {
    const response = await api('POST', '/v1/chat/completions', {
      model: MODEL,
      messages: [{ role: 'user', content: pick(PROMPTS, i) }],
      max_tokens: 8,
      seed,
    });
    tally.record('chat (rollout)', response.status);
    trajectories.push({
      messages_and_choices: [{ role: 'user', content: pick(PROMPTS, i) }, response.body.choices?.[0]],
      reward: seed % 2,
      metrics: { seed },
      metadata: { i },
    });
  }
  return { trajectories };
}

async function logLoop(api: Api, modelId: string, tally: Tally, until: number): Promise<void> {
  for (let i = 0; Date.now() < until; i += 1) {
    const group = {
      trajectories: [0, 1].map((j) => ({
        messages_and_choices: [
          { role: 'user', content: pick(PROMPTS, i) },
          { role: 'assistant', content: `answer ${i}.${j}` },
        ],
        reward: j,
        metrics: { turn: i },
      })),
    };
    tally.record(
      'log',
      (
        await api('POST', `/v1/preview/models/${modelId}/log`, {
          split: i % 3 === 0 ? 'val' : 'train',
          trajectory_groups: [group],
        })
      ).status,
    );
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

async function uploadData(server: ServerProcess, tally: Tally, i: number): Promise<string> {
  const rows = PROMPTS.map((prompt, j) =>
    JSON.stringify({
      messages: [
        { role: 'user', content: prompt },
        { role: 'assistant', content: `reply ${i}.${j}` },
      ],
    }),
  );
  const form = new FormData();
  form.append('file', new Blob([rows.join('\n')]), 'train.jsonl');
  const response = await fetch(`${server.url}/v1/preview/artifacts/local/soak/data`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}` },
    body: form,
  });
  tally.record('artifact upload', response.status);
  return ((await response.json()) as { url: string }).url;
}

async function waitForJob(api: Api, jobId: string, tally: Tally): Promise<void> {
  for (;;) {
    const job = await api('GET', `/v1/preview/training-jobs/${jobId}`);
    tally.record('job status', job.status);
    if (job.status !== 200 || ['COMPLETED', 'FAILED', 'CANCELLED'].includes(job.body.status)) {
      if (job.body?.status === 'FAILED') tally.failures.push(`job ${jobId} FAILED: ${JSON.stringify(job.body.error)}`);
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/** RL and SFT jobs in turn, each waited for; every few jobs the old checkpoints go, as ART's cleanup does. */
async function trainingLoop(
  server: ServerProcess,
  api: Api,
  modelId: string,
  tally: Tally,
  until: number,
): Promise<void> {
  for (let i = 0; Date.now() < until; i += 1) {
    const submit =
      i % 2 === 0
        ? await api('POST', '/v1/preview/training-jobs', {
            model_id: modelId,
            trajectory_groups: [await sampleGroup(api, tally, i), await sampleGroup(api, tally, i + 7)],
          })
        : await api('POST', '/v1/preview/sft-training-jobs', {
            model_id: modelId,
            training_data_url: await uploadData(server, tally, i),
            config: { batch_size: 2, learning_rate: 1e-4 },
          });
    tally.record(i % 2 === 0 ? 'rl submit' : 'sft submit', submit.status);
    if (submit.status !== 200) continue;
    await waitForJob(api, submit.body.id, tally);
    tally.jobs += 1;
    if (i % 4 === 3) await pruneCheckpoints(api, modelId, tally);
  }
}

async function pruneCheckpoints(api: Api, modelId: string, tally: Tally): Promise<void> {
  const listed = await api('GET', `/v1/preview/models/${modelId}/checkpoints?limit=100&order=desc`);
  tally.record('checkpoints', listed.status);
  const steps = (listed.body.data as { step: number }[])
    .map((c) => c.step)
    .slice(2)
    .filter((step) => step > 0);
  if (steps.length > 0)
    tally.record(
      'checkpoint delete',
      (await api('DELETE', `/v1/preview/models/${modelId}/checkpoints`, { steps })).status,
    );
}

function sampleLoop(server: ServerProcess, tally: Tally, started: number, until: number): Promise<Sample[]> {
  const samples: Sample[] = [];
  const take = () => {
    // Every engine process (a sampler and a trainer by default), summed: together they are what the service holds.
    const engines = childPids(server.child.pid!)
      .map(rssBytes)
      .filter((rss): rss is number => rss !== null);
    const engine = engines.length > 0 ? engines.reduce((a, b) => a + b, 0) : null;
    const sample = {
      seconds: Math.round((Date.now() - started) / 1000),
      server: rssBytes(server.child.pid!),
      engine,
      requests: tally.requests,
      jobs: tally.jobs,
    };
    samples.push(sample);
    console.log(
      `t=${String(sample.seconds).padStart(5)} s  server ${mb(sample.server)}  engine ${mb(sample.engine)}  requests ${sample.requests}  jobs ${sample.jobs}`,
    );
  };
  take();
  return new Promise((resolve) => {
    const timer = setInterval(() => {
      take();
      if (Date.now() >= until) {
        clearInterval(timer);
        resolve(samples);
      }
    }, SAMPLE_MS);
  });
}

const mb = (bytes: number | null) => (bytes === null ? '   gone' : `${(bytes / 2 ** 20).toFixed(1).padStart(7)} MB`);

/**
 * Flat: after the warm-up, the mean of the last few samples is within TOLERANCE of the mean of the first few.
 * A collected heap swings from sample to sample; a leak drifts, and the drift is what this judges.
 */
function verdict(name: string, series: (number | null)[]): boolean {
  const values = series.filter((value): value is number => value !== null);
  if (values.length < 2 || values.length !== series.length) {
    console.log(
      `${name}: ${values.length < 2 ? 'too few samples after the warm-up to judge' : 'the process went away'}`,
    );
    return false;
  }
  const window = Math.min(5, Math.max(1, Math.floor(values.length / 3)));
  const mean = (part: number[]) => part.reduce((sum, value) => sum + value, 0) / part.length;
  const first = mean(values.slice(0, window));
  const last = mean(values.slice(-window));
  const drift = (last - first) / first;
  const flat = Math.abs(drift) <= TOLERANCE;
  const spread = (Math.max(...values) - Math.min(...values)) / Math.min(...values);
  console.log(
    `${name}: first ${window} samples ${mb(first)}, last ${window} ${mb(last)}: drift ${(drift * 100).toFixed(1)}% (sample spread ${(spread * 100).toFixed(1)}%): ${flat ? 'flat' : 'NOT flat'} within ${TOLERANCE * 100}%`,
  );
  return flat;
}

async function main(): Promise<boolean> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'soak-'));
  const server = await spawnServerProcess({ dataDir, key: KEY, databaseUrl: process.env.DATABASE_URL ?? null });
  const tally = new Tally();
  try {
    const api = httpApi(server.url, KEY);
    const modelId = (
      await api('POST', '/v1/preview/models', { project: 'soak', name: 'main', base_model: 'builtin/tiny-chat' })
    ).body.id;
    const started = Date.now();
    const until = started + MINUTES * 60_000;
    console.log(
      `soak: ${MINUTES} min, samples every ${SAMPLE_MS / 1000} s, warm-up ${WARMUP_MS / 60_000} min; server pid ${server.child.pid}, engine pid ${server.enginePid()}`,
    );
    const [samples] = await Promise.all([
      sampleLoop(server, tally, started, until),
      chatLoop(server, tally, until, 0),
      chatLoop(server, tally, until, 1),
      logLoop(api, modelId, tally, until),
      trainingLoop(server, api, modelId, tally, until),
    ]);
    console.log(
      `answers: ${[...tally.statuses.entries()].map(([status, count]) => `${status}×${count}`).join('  ')}; jobs finished: ${tally.jobs}`,
    );
    for (const failure of tally.failures.slice(0, 20)) console.log(`  failure: ${failure}`);
    const after = samples.filter((sample) => sample.seconds * 1000 >= WARMUP_MS);
    const flat = [
      verdict(
        'server RSS',
        after.map((s) => s.server),
      ),
      verdict(
        'engine RSS',
        after.map((s) => s.engine),
      ),
    ];
    return flat.every(Boolean) && tally.failures.length === 0 && server.exit() === null;
  } finally {
    await server.stop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

process.exit((await main()) ? 0 : 1);
