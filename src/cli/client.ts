/**
 * The CLI's HTTP client: the service URL and API key from flags, the environment (SERVICE_URL, API_KEY)
 * or the local data folder's bootstrap key, and JSON calls that turn error bodies into readable errors.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Config } from '../config.ts';
import { BOOTSTRAP_KEY_FILE } from '../services/auth-service.ts';

export interface ServiceClient {
  url: string;
  key: string;
  json<T>(method: string, route: string, body?: unknown): Promise<T>;
}

export function serviceClient(config: Config, flags: { url?: string; key?: string }): ServiceClient {
  const url = (flags.url ?? process.env.SERVICE_URL ?? `http://${config.host === '0.0.0.0' ? '127.0.0.1' : config.host}:${config.port}`).replace(/\/$/, '');
  const keyFile = path.join(config.dataDir, BOOTSTRAP_KEY_FILE);
  const key = flags.key ?? process.env.API_KEY ?? (fs.existsSync(keyFile) ? fs.readFileSync(keyFile, 'utf8').trim() : undefined);
  if (!key) throw new Error(`no API key: pass --key, set API_KEY, or run where ${keyFile} exists`);
  return {
    url,
    key,
    async json<T>(method: string, route: string, body?: unknown): Promise<T> {
      const response = await fetch(`${url}${route}`, {
        method,
        headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await response.text();
      if (!response.ok) throw new Error(`${method} ${route} answered ${response.status}: ${text}`);
      return JSON.parse(text) as T;
    },
  };
}
