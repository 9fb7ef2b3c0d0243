/**
 * Every call the dashboard makes: the public API and the read-only /v1/dashboard endpoints, with the
 * API key from sessionStorage (this tab only) as a bearer token. A 401 signs the tab out.
 */
const KEY_STORAGE = 'agent-trainer.api-key';

export function apiKey(): string | null {
  return sessionStorage.getItem(KEY_STORAGE);
}

export function setApiKey(key: string | null): void {
  if (key === null) sessionStorage.removeItem(KEY_STORAGE);
  else sessionStorage.setItem(KEY_STORAGE, key);
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

let onUnauthorized: () => void = () => {};
export function handleUnauthorized(callback: () => void): void {
  onUnauthorized = callback;
}

/** The human message inside any of the service's error bodies (FastAPI `detail` or OpenAI `error`). */
export function errorMessage(status: number, body: unknown): string {
  const value = body as { detail?: unknown; error?: { message?: unknown } } | null;
  if (typeof value?.detail === 'string') return value.detail;
  if (Array.isArray(value?.detail)) {
    return value.detail.map((problem: { loc?: unknown[]; msg?: string }) => `${(problem.loc ?? []).join('.')}: ${problem.msg ?? ''}`).join('; ');
  }
  if (typeof value?.error?.message === 'string') return value.error.message;
  return `Request failed with status ${status}`;
}

export function authHeaders(key = apiKey()): Record<string, string> {
  return key ? { authorization: `Bearer ${key}` } : {};
}

export async function request<T>(method: string, path: string, body?: unknown, options: { signal?: AbortSignal; key?: string } = {}): Promise<T> {
  const response = await fetch(path, {
    method,
    headers: { ...authHeaders(options.key ?? apiKey()), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: options.signal,
  });
  const text = await response.text();
  let parsed: unknown = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = text;
  }
  if (!response.ok) {
    if (response.status === 401 && options.key === undefined) onUnauthorized();
    throw new ApiError(response.status, errorMessage(response.status, parsed));
  }
  return parsed as T;
}

export const get = <T>(path: string, signal?: AbortSignal) => request<T>('GET', path, undefined, { signal });

export interface ListPage<T> {
  object: 'list';
  data: T[];
  has_more: boolean;
  first_id: string;
  last_id: string;
}

export function query(params: Record<string, string | number | undefined | null>): string {
  const entries = Object.entries(params).filter((entry): entry is [string, string | number] => entry[1] !== undefined && entry[1] !== null && entry[1] !== '');
  return entries.length === 0 ? '' : `?${new URLSearchParams(entries.map(([k, v]) => [k, String(v)])).toString()}`;
}

/** Follows `after` cursors until the list ends (for bounded lists: a run's metrics, a model's checkpoints). */
export async function getAll<T>(path: string, params: Record<string, string | number | undefined>, signal?: AbortSignal): Promise<T[]> {
  const items: T[] = [];
  let after: string | undefined;
  for (;;) {
    const page = await get<ListPage<T>>(`${path}${query({ ...params, after })}`, signal);
    items.push(...page.data);
    if (!page.has_more || page.data.length === 0) return items;
    after = page.last_id;
  }
}

// Wire types of what the dashboard reads.

export interface Me {
  entity: string;
  entities: string[];
}

export interface Overview extends Me {
  base_models: string[];
  default_base_model: string;
}

export interface RewardPoint {
  value: number;
  std_dev: number | null;
  step: number;
}

export interface ModelSummary {
  id: string;
  entity: string;
  project: string;
  name: string;
  base_model: string;
  run_id: string;
  created_at: string;
  inference_name: string;
  latest_step: number | null;
  checkpoint_count: number;
  last_reward: (RewardPoint & { split: string }) | null;
  rewards: Record<string, RewardPoint>;
  last_job: { id: string; status: string } | null;
}

export interface Checkpoint {
  id: string;
  step: number;
  metrics: Record<string, unknown>;
  created_at: string;
}

export interface MetricRow {
  id: string;
  step: number;
  source: string;
  split: string;
  metrics: Record<string, unknown>;
  created_at: string;
}

export interface TrajectorySummary {
  id: string;
  split: string;
  step: number;
  group_index: number;
  trajectory_index: number;
  reward: number | null;
  created_at: string;
  num_messages: number;
  num_tool_calls: number;
  has_reasoning: boolean;
  prompt_preview: string;
  response_preview: string;
  response_chars: number;
  completion_tokens: number | null;
  finish_reason: string | null;
  metrics: Record<string, number>;
}

export interface TrajectoryDetail {
  id: string;
  split: string;
  step: number;
  group_index: number;
  trajectory_index: number;
  reward: number | null;
  created_at: string;
  data: Record<string, unknown>;
  /** Null when the trajectory was not trained or fell beyond its job's cap. */
  trained_tokens: TrainedTokens | null;
}

/** Parallel arrays over a trajectory's trained tokens; trainer_logprobs: after the job's last step. */
export interface TrainedTokens {
  advantage: number;
  token_ids: number[];
  sampler_logprobs: (number | null)[];
  trainer_logprobs: number[];
}

export interface TrajectorySteps {
  splits: { split: string; count: number; steps: { step: number; count: number }[] }[];
}

export interface Job {
  id: string;
  object: 'training_job';
  type: string;
  model_id: string;
  status: string;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  error: { code: string; message: string } | null;
  checkpoint_step: number | null;
  num_sequences: number | null;
  metrics: Record<string, number>;
}

export interface JobConfig {
  job_id: string;
  type: string;
  config: Record<string, unknown> | null;
  num_trajectory_groups: number | null;
  num_trajectories: number | null;
}

export interface JobListItem extends Job {
  completed_steps: number;
  model: { id: string; entity: string; project: string; name: string };
}

export interface JobEvent {
  id: string;
  type: string;
  created_at: string;
  data: Record<string, unknown>;
}

export interface Model {
  id: string;
  entity: string;
  project: string;
  name: string;
  base_model: string;
  run_id: string;
}

export const TERMINAL_STATUSES = ['COMPLETED', 'FAILED', 'CANCELLED'];
export const isActive = (status: string) => status === 'QUEUED' || status === 'RUNNING';
