/**
 * The CLI's HTTP client: the service URL and API key from flags, the environment (AGENT_TRAINER_URL or SERVICE_URL, API_KEY)
 * or the local data folder's bootstrap key, and JSON calls that turn error bodies into readable errors.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { IdentityResponse } from '../api/identity.ts';
import { parseServedModelName } from '../api/model-name.ts';
import type { ModelResponse } from '../api/models.ts';
import type { Config } from '../config.ts';
import { BOOTSTRAP_KEY_FILE } from '../services/auth-service.ts';

export interface ServiceClient {
  url: string;
  key: string;
  json<T>(method: string, route: string, body?: unknown): Promise<T>;
  /** fetch against the service; a server that does not answer is an error saying where the CLI looked and how to point it elsewhere. */
  fetch(route: string, init?: RequestInit): Promise<Response>;
}

async function reach(url: string, route: string, init: RequestInit | undefined): Promise<Response> {
  try {
    return await fetch(`${url}${route}`, init);
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    const why = cause?.code ?? cause?.message ?? (error as Error).message;
    throw new Error(
      `no agent-trainer server answers at ${url} (${why}): start one with "npm run cli -- serve", or point the CLI at one with --url or AGENT_TRAINER_URL`,
    );
  }
}

export function serviceClient(config: Config, flags: { url?: string; key?: string }): ServiceClient {
  const url = (
    flags.url ??
    process.env.AGENT_TRAINER_URL ??
    process.env.SERVICE_URL ??
    `http://${config.host === '0.0.0.0' ? '127.0.0.1' : config.host}:${config.port}`
  ).replace(/\/$/, '');
  const keyFile = path.join(config.dataDir, BOOTSTRAP_KEY_FILE);
  const key =
    flags.key ?? process.env.API_KEY ?? (fs.existsSync(keyFile) ? fs.readFileSync(keyFile, 'utf8').trim() : undefined);
  if (!key) throw new Error(`no API key: pass --key, set API_KEY, or run where ${keyFile} exists`);
  return {
    url,
    key,
    fetch: (route, init) => reach(url, route, init),
    async json<T>(method: string, route: string, body?: unknown): Promise<T> {
      const response = await reach(url, route, {
        method,
        headers: {
          authorization: `Bearer ${key}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await response.text();
      if (!response.ok) throw new Error(`${method} ${route} answered ${response.status}: ${text}`);
      return JSON.parse(text) as T;
    },
  };
}

/** A model id, or a name (`entity/project/name`, or `project/name` of the key's own entity) resolved to one. */
export async function resolveModelId(client: ServiceClient, idOrName: string): Promise<string> {
  if (!idOrName.includes('/')) return idOrName;
  // `project/name` is the served name (api/model-name.ts) with the key's own entity left out; a model, not a checkpoint.
  const own = async () => (await client.json<IdentityResponse>('GET', '/v1/preview/me')).entity;
  const full = idOrName.split('/').length === 2 ? `${await own()}/${idOrName}` : idOrName;
  const parsed = parseServedModelName(full);
  if (!parsed || parsed.artifact || parsed.step !== null)
    throw new Error(`${idOrName}: expected a model id, entity/project/name or project/name`);
  const route = `/v1/preview/models/by-name/${[parsed.entity, parsed.project, parsed.name].map(encodeURIComponent).join('/')}`;
  return (await client.json<ModelResponse>('GET', route)).id;
}
