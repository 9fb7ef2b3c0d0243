/** Rollouts through the real API: sample choices with chat completions and wrap them as ART trajectory groups. */
import type { Trajectory as ApiTrajectory } from '../../src/api/models.ts';
import { waitFor } from './poll.ts';
import type { E2eServer } from './server.ts';

/** The API's trajectory as sampled here: always scored. */
export type Trajectory = ApiTrajectory & { reward: number };

export async function sampleChoice(e2e: E2eServer, model: string, prompt: string, seed: number, maxTokens = 6): Promise<Record<string, unknown>> {
  const response = await e2e.api('POST', '/v1/chat/completions', { model, messages: [{ role: 'user', content: prompt }], max_tokens: maxTokens, seed });
  if (response.status !== 200) throw new Error(`chat failed: ${response.status} ${JSON.stringify(response.body)}`);
  return response.body.choices[0];
}

/** A group of `size` sampled answers to one prompt, scored by `reward`. */
export async function sampleGroup(e2e: E2eServer, model: string, prompt: string, size: number, reward: (choice: Record<string, unknown>, index: number) => number, seed = 0) {
  const trajectories: Trajectory[] = [];
  for (let index = 0; index < size; index += 1) {
    const choice = await sampleChoice(e2e, model, prompt, seed + index);
    trajectories.push({ messages_and_choices: [{ role: 'user', content: prompt }, choice], reward: reward(choice, index), tools: null, metrics: {}, metadata: {}, logs: [] });
  }
  return { trajectories };
}

const ENDED = ['COMPLETED', 'FAILED', 'CANCELLED'];

/** The job once it has ended (completed, failed or cancelled), polled every 100 ms. */
export async function waitForJob(e2e: E2eServer, jobId: string, timeoutMs = 60_000): Promise<Record<string, any>> {
  let status = 'unseen';
  return waitFor(() => `job ${jobId} to end (still ${status})`, async () => {
    const job = await e2e.api('GET', `/v1/preview/training-jobs/${jobId}`);
    status = job.body.status;
    return ENDED.includes(status) ? (job.body as Record<string, any>) : null;
  }, { timeoutMs, intervalMs: 100 });
}

export async function allEvents(e2e: E2eServer, jobId: string): Promise<{ id: string; type: string; data: Record<string, unknown> }[]> {
  const events = [];
  let after = '';
  for (;;) {
    const page = await e2e.api('GET', `/v1/preview/training-jobs/${jobId}/events?limit=100${after ? `&after=${after}` : ''}`);
    events.push(...page.body.data);
    if (!page.body.has_more) return events;
    after = page.body.last_id;
  }
}
