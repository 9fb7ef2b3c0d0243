/**
 * The real service for end-to-end tests: a fresh data folder and database, the real engine child process,
 * the job worker and an HTTP listener on a free port. `api()` calls it over real HTTP (helpers/api.ts).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Clock } from '../../src/clock.ts';
import { BUILTIN_BASE_MODEL, loadConfig } from '../../src/config.ts';
import { type RunningServer, startServer } from '../../src/server.ts';
import { httpApi } from './api.ts';
import { enginePython } from './engine-process.ts';

export interface E2eServer {
  server: RunningServer;
  url: string;
  key: string;
  dataDir: string;
  api(method: string, route: string, body?: unknown, key?: string): Promise<{ status: number; body: any }>;
  close(): Promise<void>;
}

/** Tests serve the tiny model alone (and default to it) unless they ask for more: SmolLM2 loads in seconds, not milliseconds. */
export const TINY_MODEL_ENV = { BASE_MODELS: `${BUILTIN_BASE_MODEL.id}=${BUILTIN_BASE_MODEL.path}` };

export async function startE2eServer(
  options: { env?: Record<string, string>; dataDir?: string; databaseUrl?: string | null; clock?: Clock } = {},
): Promise<E2eServer> {
  const dataDir = options.dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'e2e-'));
  const key = `sk-${'e2e'.repeat(15)}`;
  const config = loadConfig({
    DATA_DIR: dataDir,
    PORT: '0',
    LOG_LEVEL: process.env.E2E_LOG_LEVEL ?? 'silent',
    BOOTSTRAP_API_KEY: key,
    ENGINE_PYTHON: await enginePython(),
    ...TINY_MODEL_ENV,
    ...(options.databaseUrl ? { DATABASE_URL: options.databaseUrl } : {}),
    ...options.env,
  });
  const server = await startServer(config, { clock: options.clock });
  await server.waitForEngines();
  return {
    server,
    url: server.url,
    key,
    dataDir,
    api: httpApi(server.url, key),
    async close() {
      await server.close();
      if (!options.dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
