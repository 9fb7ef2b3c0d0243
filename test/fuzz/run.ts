/**
 * One fuzz run: start the real server as its own process (its sampler a TCP engine, see probes.ts), seed two
 * entities, inject broken adapters for the first, snapshot the second, send `requests` seeded hostile requests
 * (the first entity's key for writes, either key for reads) while a worker thread polls /v1/health and the second
 * entity's temperature-0 answers are compared in rounds, then check the server is alive and the second entity's
 * data and answers unchanged.
 * Request i is drawn from its own PRNG (seed, i), so one finding replays with the same seed.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { startTcpEngine } from '../helpers/engine-process.ts';
import { type ServerProcess, spawnServerProcess } from '../helpers/server-process.ts';
import { type Ctx, ENDPOINTS, type Endpoint } from './endpoints.ts';
import { type Draft, type Outcome, renderBody, renderPath, send } from './http.ts';
import { buildDraft } from './mutate.ts';
import { Prng } from './prng.ts';
import { answerChanges, answersOf, injectBadAdapters, probeWhile } from './probes.ts';
import { seedWandbUploads } from './wandb.ts';
import { seedEntity, snapshot, snapshotChanges, type World } from './world.ts';

export interface FuzzOptions {
  seed: number;
  requests: number;
  concurrency?: number;
  databaseUrl?: string | null;
  timeoutMs?: number;
  progress?: (line: string) => void;
}

export interface Finding {
  index: number;
  label: string;
  request: string;
  status: number | string;
  detail: string;
}

export interface HealthReport {
  polls: number;
  slow: number;
  failures: number;
  maxMs: number;
  /** Each late or failed poll: when it started (epoch ms) and how long it took. */
  late: { at: number; ms: number }[];
}

/** A request's time on the wire, to name the ones in flight while health was late. */
interface Span {
  at: number;
  ms: number;
  request: string;
  status: number | string;
}

export interface FuzzReport {
  histogram: Map<string, Map<string, number>>;
  findings: Finding[];
  health: HealthReport;
  crashed: string | null;
  crossEntityChanges: string[];
  /** Health went unanswered for WEDGED_MS: the run stopped there. */
  wedged: boolean;
  seconds: number;
  spans: Span[];
  /** The server's own error log lines (the last few), which name the cause of a 5xx. */
  serverErrors: string[];
  /** Rounds of the other entity's answers taken beside chats on the injected adapters (probes.ts). */
  isolationRounds: number;
}

const KEY_A = `sk-${'fuzz'.repeat(8)}`;
const ENTITY_B = 'fuzz-b';
const WEDGED_MS = 30_000;

/** Polls /v1/health every 100 ms from a thread of its own, so the fuzzer's own work cannot slow the clock. */
const HEALTH_POLLER = `
const { parentPort, workerData } = require('node:worker_threads');
const http = require('node:http');
const report = { polls: 0, slow: 0, failures: 0, maxMs: 0, late: [] };
let stopped = false;
let lastAnswer = Date.now();
let wedged = false;
parentPort.on('message', () => { stopped = true; });
const poll = () => new Promise((resolve) => {
  const request = http.get(workerData.url + '/v1/health', { agent: false, timeout: 5000 }, (response) => {
    response.resume();
    response.on('end', () => resolve(response.statusCode === 200));
  });
  request.on('timeout', () => { request.destroy(); resolve(false); });
  request.on('error', () => resolve(false));
});
(async () => {
  while (!stopped) {
    const at = Date.now();
    const started = performance.now();
    const ok = await poll();
    const ms = performance.now() - started;
    if (!ok || ms > 1000) report.late.push({ at, ms: Math.round(ms) });
    if (ok) lastAnswer = Date.now();
    if (!wedged && Date.now() - lastAnswer > workerData.wedgedMs) {
      wedged = true;
      parentPort.postMessage({ wedged: true });
    }
    report.polls += 1;
    if (!ok) report.failures += 1;
    if (ms > 1000) report.slow += 1;
    report.maxMs = Math.max(report.maxMs, Math.round(ms));
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  parentPort.postMessage({ report });
})();
`;

/** Starts the poller; `onWedged` runs once health has not answered for `wedgedMs`. Resolves its figures when stopped. */
function startHealthPoller(url: string, wedgedMs: number, onWedged: () => void): () => Promise<HealthReport> {
  const worker = new Worker(HEALTH_POLLER, { eval: true, workerData: { url, wedgedMs } });
  const report = new Promise<HealthReport>((resolve) => {
    worker.on('message', (message: { wedged?: true; report?: HealthReport }) => {
      if (message.wedged) onWedged();
      if (message.report) resolve(message.report);
    });
  });
  return async () => {
    worker.postMessage('stop');
    const result = await report;
    await worker.terminate();
    return result;
  };
}

/** Request i: which route, which key, which entity's ids, and how it is broken. */
export function drawRequest(seed: number, index: number, world: World): Draft {
  const rng = new Prng((seed ^ Math.imul(index + 1, 0x9e3779b9)) >>> 0);
  const endpoint = rng.weighted<Endpoint>(ENDPOINTS.map((candidate) => [candidate.weight, candidate] as const));
  const key = endpoint.writes || rng.chance(0.6) ? world.a.key : world.b.key;
  const c: Ctx = { rng, world, target: rng.chance(0.6) ? world.a : world.b, readOnly: key === world.b.key };
  return buildDraft(endpoint, c, key, rng.chance(0.2));
}

function describeRequest(draft: Draft): string {
  const body = renderBody(draft);
  const preview = body ? ` body(${body.length} B): ${body.subarray(0, 200).toString('utf8')}` : '';
  return `${draft.method} ${renderPath(draft).slice(0, 200)}${preview}`;
}

/** Keeps models the fuzzer made, so later requests may delete them instead of the seeded ones. */
function remember(world: World, draft: Draft, outcome: Outcome): void {
  const creates = [
    'POST /v1/preview/models',
    'POST /v1/preview/models/import',
    'POST /v1/preview/models/:model_id/fork',
  ];
  if (
    !creates.includes(draft.label) ||
    outcome.status !== 200 ||
    draft.headers.authorization !== `Bearer ${world.a.key}`
  )
    return;
  const id = /"id":"([^"]+)"/.exec(outcome.detail)?.[1];
  if (id && /"entity":"local"/.test(outcome.detail)) world.a.disposableModelIds.push(id);
}

/** Counts the answer in the histogram; a 5xx, a hung request, a refused connection or a 2xx that must not be is a finding. */
function record(report: FuzzReport, index: number, draft: Draft, outcome: Outcome, at: number): void {
  report.spans.push({
    at,
    ms: Math.round(outcome.ms),
    request: `#${index} ${describeRequest(draft).slice(0, 160)}`,
    status: outcome.status,
  });
  const row = report.histogram.get(draft.label) ?? new Map<string, number>();
  row.set(String(outcome.status), (row.get(String(outcome.status)) ?? 0) + 1);
  report.histogram.set(draft.label, row);
  const bad =
    (typeof outcome.status === 'number' && outcome.status >= 500) ||
    ['timeout', 'refused', 'fuzzer error'].includes(String(outcome.status));
  const accepted = draft.mustRefuse !== undefined && typeof outcome.status === 'number' && outcome.status < 300;
  if (bad || accepted)
    report.findings.push({
      index,
      label: draft.label,
      request: describeRequest(draft),
      status: outcome.status,
      detail: accepted ? `${draft.mustRefuse}: ${outcome.detail}` : outcome.detail,
    });
}

/** Sends the requests; stops early when the server dies or health stops answering (then the requests in flight are the suspects). */
async function fire(server: ServerProcess, world: World, options: FuzzOptions, report: FuzzReport): Promise<void> {
  let next = 0;
  const inFlight = new Map<number, Draft>();
  const stopPoller = startHealthPoller(server.url, WEDGED_MS, () => {
    report.wedged = true;
    for (const [index, draft] of inFlight)
      report.findings.push({
        index,
        label: draft.label,
        request: describeRequest(draft),
        status: 'in flight while wedged',
        detail: '',
      });
  });
  const worker = async () => {
    while (next < options.requests && server.exit() === null && !report.wedged) {
      const index = next++;
      const draft = drawRequest(options.seed, index, world);
      const at = Date.now();
      inFlight.set(index, draft);
      // A bug of the fuzzer's own is a finding too, not the end of the run.
      const outcome = await send(server.url, draft, options.timeoutMs ?? 60_000).catch((error: Error) => ({
        status: 'fuzzer error',
        ms: 0,
        detail: error.stack ?? error.message,
      }));
      inFlight.delete(index);
      record(report, index, draft, outcome, at);
      remember(world, draft, outcome);
      if ((index + 1) % 500 === 0)
        options.progress?.(`fuzz: ${index + 1}/${options.requests} requests, ${report.findings.length} findings`);
    }
  };
  await Promise.all(Array.from({ length: options.concurrency ?? 4 }, worker));
  report.health = await stopPoller();
}

export async function runFuzz(options: FuzzOptions): Promise<FuzzReport> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fuzz-'));
  const started = performance.now();
  // The sampler takes the test-only flag that lets injected adapters (probes.ts) past its load check.
  const secret = `fuzz-${process.pid}-${Date.now()}`;
  const sampler = await startTcpEngine({ secret, args: ['--skip-adapter-value-check'] });
  // A small artifact file limit, so the fuzzer reaches the "file too large" path without sending a gigabyte.
  const env = {
    ARTIFACT_MAX_FILE_BYTES: '1000000',
    SAMPLER_URLS: `tcp://127.0.0.1:${sampler.port}`,
    ENGINE_SECRET: secret,
  };
  const server = await spawnServerProcess({ dataDir, key: KEY_A, databaseUrl: options.databaseUrl, env });
  const report: FuzzReport = {
    histogram: new Map(),
    findings: [],
    health: { polls: 0, slow: 0, failures: 0, maxMs: 0, late: [] },
    crashed: null,
    crossEntityChanges: [],
    wedged: false,
    seconds: 0,
    spans: [],
    serverErrors: [],
    isolationRounds: 0,
  };
  try {
    const keyB = await server.createKey(ENTITY_B);
    const [a, b] = await Promise.all([
      seedEntity(server.url, 'local', KEY_A, false),
      seedEntity(server.url, ENTITY_B, keyB, true),
    ]);
    a.injected = await injectBadAdapters(server.url, dataDir, a);
    a.uploads = await seedWandbUploads(server.url, a.name, a.key);
    const world: World = { url: server.url, a, b };
    const [before, answers] = [await snapshot(server.url, b), await answersOf(server.url, b)];
    options.progress?.(
      `fuzz: seeded in ${Math.round((performance.now() - started) / 1000)} s; sending ${options.requests} requests (seed ${options.seed})`,
    );
    let firing = true;
    const probing = probeWhile(server.url, a, b, a.injected, answers, () => !firing);
    await fire(server, world, options, report).finally(() => (firing = false));
    const probe = await probing;
    report.isolationRounds = probe.rounds;
    report.findings.push(
      ...probe.serverErrors.map((error, index) => ({
        index: -1 - index,
        label: 'chat on an injected adapter',
        request: error,
        status: 'probe 5xx',
        detail: error,
      })),
    );
    report.crashed = server.exit();
    if (report.crashed === null && !report.wedged) {
      report.crossEntityChanges = [
        ...snapshotChanges(before, await snapshot(server.url, b)),
        ...probe.changes,
        ...answerChanges(answers, await answersOf(server.url, b), 'after the requests'),
      ];
    }
  } finally {
    report.serverErrors = server.errorLines.slice(-10);
    await server.stop();
    await sampler.kill();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
  report.seconds = (performance.now() - started) / 1000;
  return report;
}

/** The status histogram per route, the findings and the health figures, as printable lines. */
export function formatReport(report: FuzzReport): string {
  const lines = [...report.histogram.entries()]
    .sort(([x], [y]) => x.localeCompare(y))
    .map(
      ([label, row]) =>
        `${label.padEnd(72)} ${[...row.entries()]
          .sort()
          .map(([status, count]) => `${status}×${count}`)
          .join('  ')}`,
    );
  const total = [...report.histogram.values()].reduce(
    (sum, row) => sum + [...row.values()].reduce((a, b) => a + b, 0),
    0,
  );
  lines.push(
    `requests: ${total} in ${report.seconds.toFixed(1)} s; findings (5xx, timeouts, refused): ${report.findings.length}; crashed: ${report.crashed ?? 'no'}${report.wedged ? `; WEDGED (health unanswered for ${WEDGED_MS / 1000} s, run stopped)` : ''}`,
  );
  lines.push(
    `health: ${report.health.polls} polls, ${report.health.slow} over 1 s, ${report.health.failures} failed, slowest ${report.health.maxMs} ms`,
  );
  lines.push(
    `cross-entity changes: ${report.crossEntityChanges.length === 0 ? 'none' : report.crossEntityChanges.join(', ')} (the other entity's temperature-0 answers compared before, in ${report.isolationRounds} rounds beside chats on NaN/Inf/1e38 adapters, and after)`,
  );
  for (const finding of report.findings.slice(0, 30))
    lines.push(`  #${finding.index} ${finding.status} ${finding.request}\n      → ${finding.detail}`);
  if (report.serverErrors.length > 0)
    lines.push('server error log (last lines):', ...report.serverErrors.map((line) => `  ${line.slice(0, 600)}`));
  lines.push(
    'slowest requests:',
    ...[...report.spans]
      .sort((x, y) => y.ms - x.ms)
      .slice(0, 5)
      .map((span) => `      ${span.ms} ms ${span.status} ${span.request}`),
  );
  for (const late of report.health.late.slice(0, 10)) {
    const overlapping = report.spans
      .filter((span) => span.at < late.at + late.ms && span.at + span.ms > late.at)
      .sort((x, y) => y.ms - x.ms);
    lines.push(
      `  health late by ${late.ms} ms; slowest requests in flight then:`,
      ...overlapping.slice(0, 3).map((span) => `      ${span.ms} ms ${span.status} ${span.request}`),
    );
  }
  return lines.join('\n');
}
