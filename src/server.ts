/**
 * The whole service in one process: database (migrated), engine supervisors (a trainer and samplers, or
 * one engine for both), services, job worker and HTTP listener, started in that order and stopped in
 * reverse. `serve` and the end-to-end tests use it.
 */
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import type { EngineReport } from './api/health.ts';
import { buildApp } from './app.ts';
import { type Clock, systemClock } from './clock.ts';
import type { Config } from './config.ts';
import { createServices, type Services } from './context.ts';
import type { Rank, RankMemory, StatsReply } from './engine/protocol.ts';
import { createEngineRoles, type EngineRoles, rolesHealth } from './engine/roles.ts';
import { EngineSupervisor } from './engine/supervisor.ts';
import { JobWorker } from './jobs/worker.ts';
import { migrate, openStore } from './store/db.ts';

export interface RunningServer {
  app: FastifyInstance;
  url: string;
  services: Services;
  /** Every engine by role; null with ENGINE=off. */
  engines: EngineRoles | null;
  /** The first engine of ours that serves chat (the only one in single mode), else our trainer. */
  supervisor: EngineSupervisor | null;
  /** Resolves when every engine answers. */
  waitForEngines(): Promise<void>;
  worker: JobWorker;
  bootstrapKey: string | null;
  close(): Promise<void>;
}

/**
 * What a process that stopped (or crashed) left behind, cleared at start-up: files of deleted checkpoints,
 * half-written checkpoints and uploads, and Tinker futures nobody will finish. Uploads of W&B artifacts still
 * pending are kept: their rows outlive the process, and the SDK goes on with them.
 */
export async function sweepLeftovers(services: Services): Promise<void> {
  await services.models.sweepPendingDeletions();
  await services.models.sweepTemporaryCheckpoints();
  await services.blobs.sweepStaging(new Set(await services.wandb.artifacts.stagingAreas()));
  await services.imports.sweepStaging();
  await services.tinker.futures.failLeftovers();
}

export async function startServer(
  config: Config,
  options: { clock?: Clock; engineArgs?: string[] } = {},
): Promise<RunningServer> {
  const logger = pino({ level: config.logLevel });
  const store = openStore(config);
  await migrate(store);
  const engines = config.engineEnabled
    ? createEngineRoles({
        topology: config.engines,
        serving: config.serving,
        python: config.enginePython,
        logger: logger.child({ component: 'engine' }),
        extraArgs: options.engineArgs,
        vllm: { config: config.vllm, bases: config.baseModels, serving: config.serving },
      })
    : null;
  for (const { supervisor } of engines?.all ?? []) supervisor.start();
  // Ours that samples, else the trainer (every topology trains on ours, also where vLLM samples every base).
  const ours = (engines?.all ?? []).filter(({ supervisor }) => supervisor instanceof EngineSupervisor);
  const supervisor =
    ((ours.find(({ role }) => role !== 'trainer') ?? ours[0])?.supervisor as EngineSupervisor | undefined) ?? null;

  let worker: JobWorker | undefined;
  const services = createServices({
    config,
    store,
    clock: options.clock ?? systemClock,
    engines,
    engineProbe: engines ? () => probeEngines(engines) : undefined,
    onJobSubmitted: () => worker?.wake(),
    onCancelRequested: (jobId) => worker?.cancelLocal(jobId),
    logError: (message, error) => logger.child({ component: 'tinker' }).error({ err: error }, message),
  });
  worker = new JobWorker(services.queue, services.runners, logger.child({ component: 'jobs' }), {
    pollMs: 500,
    // Renew well before the lease runs out, so a slow step never loses it.
    heartbeatMs: Math.max(250, Math.floor(config.jobLeaseMs / 4)),
    onFinished: (type, status, seconds) => services.metrics.observeJob(type, status, seconds),
  });
  const bootstrap = await services.auth.bootstrap(config.dataDir, config.bootstrapApiKey);
  await sweepLeftovers(services);
  worker.start();
  await services.runtime.readTokenizers();

  const app = buildApp({ config, services });
  const address = await app.listen({ port: config.port, host: config.host });
  return {
    app,
    url: address.replace('[::1]', 'localhost'),
    services,
    engines,
    supervisor,
    async waitForEngines() {
      await Promise.all((engines?.all ?? []).map(({ supervisor }) => supervisor.waitUntilReady()));
    },
    worker,
    bootstrapKey: bootstrap?.key ?? null,
    async close() {
      await app.close();
      services.templateSandbox?.close();
      await services.promptWorker.close();
      await services.bodyWorker.close();
      await worker?.stop();
      await Promise.all((engines?.all ?? []).map(({ supervisor }) => supervisor.stop()));
      await store.close();
    },
  };
}

/**
 * The system check's engine entry: every engine's role, state, limits and memory by kind (a trainer's per rank, with
 * each rank's process); it fails naming those that do not answer, and why one could not start.
 */
async function probeEngines(engines: EngineRoles): Promise<Record<string, unknown>> {
  const outcomes = await Promise.allSettled(engines.all.map(({ supervisor }) => supervisor.probe()));
  const report = rolesHealth(engines).map((health, index) => engineReport(health, outcomes[index]));
  const down = report.filter((engine) => !engine.ok);
  const named = (engine: (typeof report)[number]) =>
    `${engine.role}${engine.kind === 'vllm' ? ` (vLLM at ${engine.url ?? 'not started'})` : ''} (${engine.state})` +
    (engine.error ? `: ${engine.error}` : '');
  if (down.length > 0) throw new Error(`engines not answering: ${down.map(named).join(', ')}`);
  return { engines: report };
}

function engineReport(
  health: ReturnType<typeof rolesHealth>[number],
  outcome: PromiseSettledResult<StatsReply | void>,
): EngineReport {
  const stats = outcome.status === 'fulfilled' ? outcome.value : undefined;
  const ready = 'engine' in health ? health.engine : null;
  const error = 'lastError' in health ? health.lastError : 'error' in health ? health.error : null;
  return {
    role: health.role,
    kind: health.kind,
    state: health.state,
    pid: health.pid,
    url: health.url,
    restarts: health.restarts,
    device: ready?.device ?? null,
    dtype: ready?.dtype ?? null,
    limits: (ready?.limits ?? null) as EngineReport['limits'],
    ok: outcome.status === 'fulfilled',
    ...(stats ? { rss_bytes: stats.rss_bytes, memory: { ...stats.memory } } : {}),
    ...(ready?.ranks ? { ranks: rankReports(ready.ranks, stats?.ranks ?? []) } : {}),
    ...(error ? { error } : {}),
  };
}

/** A trainer's ranks (process, host, device) with each one's memory as its last `stats` gave it. */
function rankReports(ranks: Rank[], memory: RankMemory[]) {
  return ranks.map((rank) => {
    const mine = memory.find((entry) => entry.rank === rank.rank);
    return { ...rank, ...(mine ? { rss_bytes: mine.rss_bytes, memory: { ...mine.memory } } : {}) };
  });
}
