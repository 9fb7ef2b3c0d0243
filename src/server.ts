/**
 * The whole service in one process: database (migrated), engine supervisor, services, job worker and
 * HTTP listener, started in that order and stopped in reverse. `serve` and the end-to-end tests use it.
 */
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { buildApp } from './app.ts';
import { systemClock, type Clock } from './clock.ts';
import type { Config } from './config.ts';
import { createServices, type Services } from './context.ts';
import { EngineSupervisor } from './engine/supervisor.ts';
import { JobWorker } from './jobs/worker.ts';
import { migrate, openStore } from './store/db.ts';

export interface RunningServer {
  app: FastifyInstance;
  url: string;
  services: Services;
  supervisor: EngineSupervisor | null;
  worker: JobWorker;
  bootstrapKey: string | null;
  close(): Promise<void>;
}

export async function startServer(config: Config, options: { clock?: Clock; engineArgs?: string[] } = {}): Promise<RunningServer> {
  const logger = pino({ level: config.logLevel });
  const store = openStore(config);
  await migrate(store);
  const engineLogger = logger.child({ component: 'engine' });
  const supervisor = config.engineEnabled
    ? new EngineSupervisor({
        python: config.enginePython,
        args: options.engineArgs,
        logger: engineLogger,
      })
    : null;
  supervisor?.start();

  let worker: JobWorker | undefined;
  const services = createServices({
    config,
    store,
    clock: options.clock ?? systemClock,
    engine: supervisor,
    engineProbe: supervisor ? () => supervisor.probe() : undefined,
    onJobSubmitted: () => worker?.wake(),
    onCancelRequested: (jobId) => worker?.cancelLocal(jobId),
  });
  worker = new JobWorker(services.queue, services.runners, logger.child({ component: 'jobs' }), {
    pollMs: 500,
    // Renew well before the lease runs out, so a slow step never loses it.
    heartbeatMs: Math.max(250, Math.floor(config.jobLeaseMs / 4)),
    onFinished: (type, status, seconds) => services.metrics.observeJob(type, status, seconds),
  });
  const bootstrap = await services.auth.bootstrap(config.dataDir, config.bootstrapApiKey);
  await services.models.sweepPendingDeletions();
  await services.models.sweepTemporaryCheckpoints();
  await services.blobs.sweepStaging();
  await services.imports.sweepStaging();
  worker.start();

  const app = buildApp({ config, services });
  const address = await app.listen({ port: config.port, host: config.host });
  return {
    app,
    url: address.replace('[::1]', 'localhost'),
    services,
    supervisor,
    worker,
    bootstrapKey: bootstrap?.key ?? null,
    async close() {
      await app.close();
      await worker?.stop();
      await supervisor?.stop();
      await store.close();
    },
  };
}
