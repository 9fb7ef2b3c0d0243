/**
 * Training through the real API: rollouts sampled with chat completions and wrapped as ART trajectory groups, SFT
 * jobs on uploaded question-answer conversations, and waiting for a job and reading its events.
 */
import assert from 'node:assert/strict';
import type { LegacyTrajectory } from '../../src/api/models.ts';
import { uploadArtifact } from './artifacts.ts';
import { waitFor } from './poll.ts';
import type { E2eServer } from './server.ts';

/** The API's trajectory as sampled here: always scored. */
export type Trajectory = LegacyTrajectory & { reward: number };

export async function sampleChoice(
  e2e: E2eServer,
  model: string,
  prompt: string,
  seed: number,
  maxTokens = 6,
): Promise<Record<string, unknown>> {
  const response = await e2e.api('POST', '/v1/chat/completions', {
    model,
    messages: [{ role: 'user', content: prompt }],
    max_tokens: maxTokens,
    seed,
  });
  if (response.status !== 200) throw new Error(`chat failed: ${response.status} ${JSON.stringify(response.body)}`);
  return response.body.choices[0];
}

/** A group of `size` sampled answers to one prompt, scored by `reward`. */
export async function sampleGroup(
  e2e: E2eServer,
  model: string,
  prompt: string,
  size: number,
  reward: (choice: Record<string, unknown>, index: number) => number,
  seed = 0,
) {
  const trajectories: Trajectory[] = [];
  for (let index = 0; index < size; index += 1) {
    const choice = await sampleChoice(e2e, model, prompt, seed + index);
    trajectories.push({
      messages_and_choices: [{ role: 'user', content: prompt }, choice],
      reward: reward(choice, index),
      tools: null,
      metrics: {},
      metadata: {},
      logs: [],
    });
  }
  return { trajectories };
}

const ENDED = ['COMPLETED', 'FAILED', 'CANCELLED'];

/** The job once it has ended (completed, failed or cancelled), polled every 100 ms. */
export async function waitForJob(e2e: E2eServer, jobId: string, timeoutMs = 60_000): Promise<Record<string, any>> {
  let status = 'unseen';
  return waitFor(
    () => `job ${jobId} to end (still ${status})`,
    async () => {
      const job = await e2e.api('GET', `/v1/preview/training-jobs/${jobId}`);
      status = job.body.status;
      return ENDED.includes(status) ? (job.body as Record<string, any>) : null;
    },
    { timeoutMs, intervalMs: 100 },
  );
}

/** Submits an RL job on `groups` with `experimentalConfig`: its id (a refused submission fails the test). */
export async function submitRl(
  e2e: E2eServer,
  modelId: string,
  groups: { trajectories: unknown[] }[],
  experimentalConfig: Record<string, unknown> = {},
): Promise<string> {
  const submitted = await e2e.api('POST', '/v1/preview/training-jobs', {
    model_id: modelId,
    trajectory_groups: groups,
    experimental_config: experimentalConfig,
  });
  assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
  return submitted.body.id as string;
}

/** Trains an RL job on `groups` with `experimentalConfig` and waits for it to complete (anything else fails the test). */
export async function trainRl(
  e2e: E2eServer,
  modelId: string,
  groups: { trajectories: unknown[] }[],
  experimentalConfig: Record<string, unknown>,
  timeoutMs = 60_000,
) {
  const id = await submitRl(e2e, modelId, groups, experimentalConfig);
  const job = await waitForJob(e2e, id, timeoutMs);
  assert.equal(job.status, 'COMPLETED', JSON.stringify(job.error));
  return { id, job };
}

/**
 * Uploads `[question, answer]` conversations as train.jsonl to `artifactPath`, trains an SFT job on them with `config`
 * and waits for it to complete (anything else fails the test): the job's id and the ended job.
 */
export async function trainSft(
  e2e: E2eServer,
  modelId: string,
  artifactPath: string,
  pairs: [string, string][],
  config: Record<string, unknown>,
  timeoutMs = 60_000,
) {
  const lines = pairs.map(([question, answer]) =>
    JSON.stringify({
      messages: [
        { role: 'user', content: question },
        { role: 'assistant', content: answer },
      ],
    }),
  );
  const artifact = await uploadArtifact(e2e, artifactPath, { 'train.jsonl': `${lines.join('\n')}\n` });
  const submitted = await e2e.api('POST', '/v1/preview/sft-training-jobs', {
    model_id: modelId,
    training_data_url: artifact.url,
    config,
  });
  assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
  const job = await waitForJob(e2e, submitted.body.id, timeoutMs);
  assert.equal(job.status, 'COMPLETED', JSON.stringify(job.error));
  return { id: submitted.body.id as string, job };
}

export async function allEvents(
  e2e: E2eServer,
  jobId: string,
): Promise<{ id: string; type: string; data: Record<string, unknown> }[]> {
  const events = [];
  let after = '';
  for (;;) {
    const page = await e2e.api(
      'GET',
      `/v1/preview/training-jobs/${jobId}/events?limit=100${after ? `&after=${after}` : ''}`,
    );
    events.push(...page.body.data);
    if (!page.body.has_more) return events;
    after = page.body.last_id;
  }
}

/** Submits an RL job and resolves with its id once it has taken its first gradient step (to interrupt it mid-way). */
export async function jobAtItsFirstStep(
  e2e: E2eServer,
  modelId: string,
  groups: { trajectories: unknown[] }[],
  experimentalConfig: Record<string, unknown>,
): Promise<string> {
  const id = await submitRl(e2e, modelId, groups, experimentalConfig);
  await waitFor(
    'a gradient step',
    async () => (await allEvents(e2e, id)).some((event) => event.type === 'gradient_step'),
    { timeoutMs: 120_000, intervalMs: 20 },
  );
  return id;
}
