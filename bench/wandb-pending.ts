/**
 * One key creating W&B artifacts it never commits, as fast as it can (aliased createArtifact mutations, as many as
 * a document may select), against the real server in its own process: how many are refused past the per-entity
 * cap, and the server's resident memory before, at the cap and after the rest (25,000 by default) were refused.
 * Exits 1 if a request got a 5xx or none was refused. Usage: npx tsx bench/wandb-pending.ts [--artifacts 25000]
 * (DATABASE_URL runs it on PostgreSQL.)
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { MAX_PENDING_PER_ENTITY } from '../src/wandb/artifacts.ts';
import { rssBytes, serverEnv, spawnListening } from '../test/helpers/server-process.ts';

const { values } = parseArgs({ options: { artifacts: { type: 'string', default: '25000' } } });
const TOTAL = Number(values.artifacts);
const PER_REQUEST = 80; // 3 fields each: 240 of the 250 a document may select
const KEY = `sk-${'pend'.repeat(8)}`;

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'wandb-pending-'));
const env = await serverEnv({
  dataDir,
  key: KEY,
  databaseUrl: process.env.DATABASE_URL ?? null,
  env: { ENGINE: 'off' },
});
const { child, url } = await spawnListening(env);
const mib = () => `${((rssBytes(child.pid!) ?? 0) / 2 ** 20).toFixed(0)} MiB`;
const authorization = `Basic ${Buffer.from(`api:${KEY}`).toString('base64')}`;

let created = 0;
let refused = 0;
let serverErrors = 0;
let refusal = '';
const started = performance.now();
const before = mib();
let atCap = '';
for (let from = 0; from < TOTAL; from += PER_REQUEST) {
  const aliases = Array.from({ length: Math.min(PER_REQUEST, TOTAL - from) }, (_, i) => {
    const input = `{artifactTypeName: "dataset", artifactCollectionName: "pending-${from + i}", entityName: "local", projectName: "bench", digest: "${'0'.repeat(32)}"}`;
    return `a${i}: createArtifact(input: ${input}) { artifact { id } }`;
  });
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { authorization, 'content-type': 'application/json' },
    body: JSON.stringify({ query: `mutation Flood { ${aliases.join(' ')} }` }),
  });
  if (response.status >= 500) serverErrors += 1;
  const answer = (await response.json()) as { data?: Record<string, unknown>; errors?: { message: string }[] };
  const failed = answer.errors?.length ?? 0;
  refused += failed;
  created += aliases.length - failed;
  refusal ||= answer.errors?.[0]?.message ?? '';
  if (!atCap && created >= MAX_PENDING_PER_ENTITY) atCap = mib();
}
const seconds = (performance.now() - started) / 1000;
console.log(
  `${TOTAL} createArtifact in ${seconds.toFixed(0)} s: ${created} pending (the cap is ${MAX_PENDING_PER_ENTITY}), ${refused} refused, ${serverErrors} × 5xx`,
);
console.log(`refusal: ${refusal}`);
console.log(`server RSS: ${before} before, ${atCap || 'n/a'} at the cap, ${mib()} after the rest were refused`);
child.kill('SIGTERM');
await new Promise((resolve) => child.once('exit', resolve));
fs.rmSync(dataDir, { recursive: true, force: true });
process.exit(serverErrors > 0 || refused === 0 ? 1 : 0);
