/** A real service (real database, real HTTP stack through Fastify inject) for one test, with its bootstrap key. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.ts';
import { type Clock, systemClock } from '../../src/clock.ts';
import { type Config, loadConfig } from '../../src/config.ts';
import { createServices, type Services } from '../../src/context.ts';
import type { RuntimeEngines } from '../../src/services/base-model-runtime.ts';
import type { Probe } from '../../src/services/health-service.ts';
import { migrate, openStore, type Store } from '../../src/store/db.ts';
import type { Backend } from './database.ts';

export interface TestApp {
  app: FastifyInstance;
  key: string;
  config: Config;
  services: Services;
  store: Store;
  dataDir: string;
  call(
    method: string,
    url: string,
    body?: unknown,
    key?: string | null,
  ): Promise<{ status: number; body: any; headers: Record<string, unknown> }>;
  /** Listens on a free loopback port, for clients that need a real socket (SDKs, streams); answers the URL. */
  listen(): Promise<string>;
  close(): Promise<void>;
}

export interface TestAppOptions {
  clock?: Clock;
  engineProbe?: Probe;
  /** Engines the services drive (a scripted engine); none by default. */
  engines?: RuntimeEngines;
}

/** A folder that passes for a loadable base model where the engine is not involved. */
export function fakeBaseModelFolder(): string {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'base-model-'));
  fs.writeFileSync(path.join(folder, 'config.json'), '{"model_type": "llama"}');
  return folder;
}

/** Services and the Fastify app over `store`, without touching the database: how every test app is assembled. */
export function buildTestApp(
  config: Config,
  store: Store,
  options: TestAppOptions = {},
): { app: FastifyInstance; services: Services } {
  // Without engines there is nothing to probe; with them, the real probe (a stats round trip) unless a test gives one.
  const engineProbe = options.engineProbe ?? (options.engines ? undefined : async () => {});
  const services = createServices({
    config,
    store,
    clock: options.clock ?? systemClock,
    engines: options.engines,
    engineProbe,
  });
  return { app: buildApp({ config, services }), services };
}

export async function startTestApp(
  backend: Backend,
  options: TestAppOptions & { env?: Record<string, string> } = {},
): Promise<TestApp> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'service-test-'));
  const database = await backend.create();
  const config = loadConfig({
    DATA_DIR: dataDir,
    LOG_LEVEL: 'silent',
    BASE_MODELS: `test/base=${fakeBaseModelFolder()}`,
    ...(database.databaseUrl ? { DATABASE_URL: database.databaseUrl } : {}),
    ...options.env,
  });
  const store = openStore(config);
  await migrate(store);
  const { app, services } = buildTestApp(config, store, options);
  const bootstrap = await services.auth.bootstrap(dataDir, config.bootstrapApiKey);
  if (!bootstrap) throw new Error('expected an empty database');
  await app.ready();

  return {
    app,
    key: bootstrap.key,
    config,
    services,
    store,
    dataDir,
    async call(method, url, body, key = bootstrap.key) {
      const response = await app.inject({
        method: method as 'GET',
        url,
        headers: key === null ? {} : { authorization: `Bearer ${key}` },
        ...(body === undefined ? {} : { payload: body as object }),
      });
      const text = response.body;
      return { status: response.statusCode, body: text ? JSON.parse(text) : null, headers: response.headers };
    },
    listen: () => app.listen({ port: 0, host: '127.0.0.1' }),
    async close() {
      await app.close();
      await store.close();
      await database.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Every method and path the app registers (HEAD twins left out), as `METHOD /path`; nothing is served or stored. */
export async function registeredRoutes(): Promise<string[]> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'routes-'));
  const config = loadConfig({
    DATA_DIR: dataDir,
    LOG_LEVEL: 'silent',
    BASE_MODELS: `test/base=${fakeBaseModelFolder()}`,
  });
  const store = openStore(config);
  const { app } = buildTestApp(config, store);
  const routes: string[] = [];
  // Added before ready(): every route is declared in a plugin, and plugins load at ready(), inheriting the hook.
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) if (method !== 'HEAD') routes.push(`${method} ${route.url}`);
  });
  try {
    await app.ready();
    return [...new Set(routes)].sort();
  } finally {
    await app.close();
    await store.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}
