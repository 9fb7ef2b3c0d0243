/**
 * The data the fuzzer aims at: two entities, each with a model, logged trajectories, a finished RL job (so a
 * checkpoint past step 0), an artifact and (for B) an SFT job, all made through the public API. And the
 * snapshot of one entity's data, read through the API with its own key, that must not change while the other
 * entity's key is thrown at the server.
 */
import crypto from 'node:crypto';
import { type Api, httpApi } from '../helpers/api.ts';
import { sampleGroup, waitForJob } from '../helpers/rollouts.ts';
import type { E2eServer } from '../helpers/server.ts';
import type { SeededUpload } from './wandb.ts';

export const PROJECT = 'fz';
/** Every artifact name the fuzzer's paths use, so the snapshot can read them all. */
export const ARTIFACT_NAMES = ['data', 'fresh', 'x'];
export const BASE_MODEL = 'builtin/tiny-chat';

export interface Entity {
  name: string;
  key: string;
  modelIds: string[];
  /** Models the fuzzer made and may delete; the seeded ones stay. */
  disposableModelIds: string[];
  inferenceName: string;
  jobIds: string[];
  checkpointIds: string[];
  trajectoryIds: string[];
  artifactUrl: string;
  /** The latest checkpoint as a PEFT adapter tar (its export), the valid body of an import. */
  adapterTar: Buffer;
  /** A sampled group with logprobs: what a valid RL submission carries. */
  group: { trajectories: Record<string, unknown>[] };
  /** Models whose weights the run made NaN, infinite or huge on disk (probes.ts); chats may aim at them. */
  injected: string[];
  /** Upload URLs of a pending W&B artifact (wandb.ts, seeded by run.ts), real ones to send bytes to or tamper with. */
  uploads: SeededUpload[];
  /** The latest checkpoint's signed Tinker archive URL, as its parts, for the fuzzer to write otherwise. */
  archive: { modelId: string; step: string; expires: string; signature: string };
}

export interface World {
  url: string;
  a: Entity;
  b: Entity;
}

async function must(api: Api, method: string, route: string, body?: unknown): Promise<any> {
  const response = await api(method, route, body);
  if (response.status !== 200)
    throw new Error(`seeding: ${method} ${route} answered ${response.status} ${JSON.stringify(response.body)}`);
  return response.body;
}

async function upload(url: string, key: string, route: string, files: Record<string, string>): Promise<string> {
  const form = new FormData();
  for (const [name, content] of Object.entries(files)) form.append('file', new Blob([content]), name);
  const response = await fetch(`${url}/v1/preview/artifacts/${route}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}` },
    body: form,
  });
  if (response.status !== 200) throw new Error(`seeding upload: ${response.status} ${await response.text()}`);
  return ((await response.json()) as { url: string }).url;
}

const SFT_ROWS = ['a', 'b']
  .map((word) =>
    JSON.stringify({
      messages: [
        { role: 'user', content: `Say ${word}.` },
        { role: 'assistant', content: word },
      ],
    }),
  )
  .join('\n');

/** One entity's model, logs, RL job, artifact and (optionally) SFT job, finished before the fuzzing starts. */
export async function seedEntity(url: string, name: string, key: string, withSft: boolean): Promise<Entity> {
  const api = httpApi(url, key);
  const modelId = (
    await must(api, 'POST', '/v1/preview/models', { project: PROJECT, name: 'main', base_model: BASE_MODEL })
  ).id;
  const inferenceName = `${name}/${PROJECT}/main`;
  const client = { api } as unknown as E2eServer;
  const group = await sampleGroup(client, inferenceName, 'Say a word.', 2, (_, index) => index);
  for (const split of ['train', 'val'])
    await must(api, 'POST', `/v1/preview/models/${modelId}/log`, { split, trajectory_groups: [group, group] });
  const jobIds = [
    (await must(api, 'POST', '/v1/preview/training-jobs', { model_id: modelId, trajectory_groups: [group] })).id,
  ];
  const artifactUrl = await upload(url, key, `${name}/${PROJECT}/data`, { 'train.jsonl': SFT_ROWS });
  if (withSft)
    jobIds.push(
      (
        await must(api, 'POST', '/v1/preview/sft-training-jobs', {
          model_id: modelId,
          training_data_url: artifactUrl,
          config: { batch_size: 1 },
        })
      ).id,
    );
  for (const jobId of jobIds) await waitForJob(client, jobId, 120_000);
  const checkpoints = await must(api, 'GET', `/v1/preview/models/${modelId}/checkpoints?limit=100`);
  const trajectories = await must(api, 'GET', `/v1/dashboard/models/${modelId}/trajectories?split=train&limit=200`);
  const latest = Math.max(...checkpoints.data.map((c: { step: number }) => c.step));
  const exported = await fetch(`${url}/v1/preview/models/${modelId}/checkpoints/${latest}/adapter`, {
    headers: { authorization: `Bearer ${key}` },
  });
  if (exported.status !== 200) throw new Error(`seeding export: ${exported.status} ${await exported.text()}`);
  const redirect = await fetch(
    `${url}/api/v1/training_runs/${modelId}/checkpoints/sampler_weights/step${latest}/archive`,
    { headers: { authorization: `Bearer ${key}` }, redirect: 'manual' },
  );
  const signed = new URL(redirect.headers.get('location') ?? `${url}/x`);
  if (redirect.status !== 302) throw new Error(`seeding archive: ${redirect.status} ${await redirect.text()}`);
  return {
    name,
    key,
    modelIds: [modelId],
    disposableModelIds: [],
    inferenceName,
    jobIds,
    checkpointIds: checkpoints.data.map((c: { id: string }) => c.id),
    trajectoryIds: trajectories.data.map((t: { id: string }) => t.id),
    artifactUrl,
    adapterTar: Buffer.from(await exported.arrayBuffer()),
    group,
    injected: [],
    uploads: [],
    archive: {
      modelId,
      step: signed.pathname.split('/').at(-1) as string,
      expires: signed.searchParams.get('expires') ?? '',
      signature: signed.searchParams.get('signature') ?? '',
    },
  };
}

/** Every page of a list endpoint (the `after` cursor), as one array. */
async function allPages(api: Api, route: string): Promise<unknown[]> {
  const items: unknown[] = [];
  let after = '';
  for (;;) {
    const page = await must(api, 'GET', `${route}${route.includes('?') ? '&' : '?'}${after ? `after=${after}` : ''}`);
    items.push(...page.data);
    if (!page.has_more) return items;
    after = page.last_id;
  }
}

async function optional(api: Api, route: string): Promise<unknown> {
  const response = await api('GET', route);
  return response.status === 404 ? 'absent' : response.body;
}

/** Everything of one entity the API shows its own key: models, checkpoints, metrics, trajectories, jobs, events, artifacts. */
export async function snapshot(url: string, entity: Entity): Promise<Record<string, unknown>> {
  const api = httpApi(url, entity.key);
  const shot: Record<string, unknown> = {
    me: await must(api, 'GET', '/v1/preview/me'),
    overview: await must(api, 'GET', '/v1/dashboard/overview'),
  };
  const models = (await allPages(api, '/v1/dashboard/models?limit=500')) as { id: string }[];
  shot.models = models;
  for (const model of models) {
    const base = `/v1/dashboard/models/${model.id}`;
    const steps = await must(api, 'GET', `${base}/trajectory-steps`);
    shot[`model ${model.id}`] = {
      model: await must(api, 'GET', `/v1/preview/models/${model.id}`),
      checkpoints: await allPages(api, `/v1/preview/models/${model.id}/checkpoints?limit=100`),
      metrics: await allPages(api, `${base}/metrics?limit=5000`),
      steps,
      trajectories: await Promise.all(
        steps.splits.map((split: { split: string }) =>
          allPages(api, `${base}/trajectories?split=${split.split}&limit=200`),
        ),
      ),
    };
  }
  const jobs = (await allPages(api, '/v1/dashboard/jobs?limit=200')) as { id: string }[];
  shot.jobs = jobs;
  for (const job of jobs)
    shot[`events ${job.id}`] = await allPages(api, `/v1/preview/training-jobs/${job.id}/events?limit=100`);
  for (const project of [PROJECT, 'other']) {
    for (const name of ARTIFACT_NAMES) {
      const route = `/v1/preview/artifacts/${entity.name}/${project}/${name}`;
      const versions = await optional(api, route);
      shot[`artifact ${project}/${name}`] = versions;
      const file = await fetch(`${url}${route}:latest/files/train.jsonl`, {
        headers: { authorization: `Bearer ${entity.key}` },
      });
      shot[`artifact ${project}/${name} train.jsonl`] = `${file.status} ${crypto
        .createHash('sha256')
        .update(Buffer.from(await file.arrayBuffer()))
        .digest('hex')}`;
    }
  }
  return shot;
}

/** The keys of two snapshots whose values differ. */
export function snapshotChanges(before: Record<string, unknown>, after: Record<string, unknown>): string[] {
  const keys = new Set([...Object.keys(before), ...Object.keys(after)]);
  return [...keys].filter((key) => JSON.stringify(before[key]) !== JSON.stringify(after[key]));
}
