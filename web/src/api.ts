/**
 * Every call the dashboard makes: the public API and the read-only /v1/dashboard endpoints, with the
 * API key from sessionStorage (this tab only) as a bearer token. A 401 signs the tab out.
 */
import type { ListPage } from '../../src/api/lists.ts';
import type { TrainedTokensView } from '../../src/api/trained-tokens.ts';
import type { TrainingJob } from '../../src/api/training-jobs.ts';
import { isActiveJobStatus, type JobStatus, TERMINAL_JOB_STATUSES } from '../../src/api/training-vocabulary.ts';

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
    return value.detail
      .map((problem: { loc?: unknown[]; msg?: string }) => `${(problem.loc ?? []).join('.')}: ${problem.msg ?? ''}`)
      .join('; ');
  }
  if (typeof value?.error?.message === 'string') return value.error.message;
  return `Request failed with status ${status}`;
}

export function authHeaders(key = apiKey()): Record<string, string> {
  return key ? { authorization: `Bearer ${key}` } : {};
}

export async function request<T>(
  method: string,
  path: string,
  body?: unknown,
  options: { signal?: AbortSignal; key?: string } = {},
): Promise<T> {
  const response = await fetch(path, {
    method,
    headers: {
      ...authHeaders(options.key ?? apiKey()),
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
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

export function query(params: Record<string, string | number | undefined | null>): string {
  const entries = Object.entries(params).filter(
    (entry): entry is [string, string | number] => entry[1] !== undefined && entry[1] !== null && entry[1] !== '',
  );
  return entries.length === 0 ? '' : `?${new URLSearchParams(entries.map(([k, v]) => [k, String(v)])).toString()}`;
}

/** Follows `after` cursors until the list ends (for bounded lists: a run's metrics, a model's checkpoints). */
export async function getAll<T>(
  path: string,
  params: Record<string, string | number | undefined>,
  signal?: AbortSignal,
): Promise<T[]> {
  const items: T[] = [];
  let after: string | undefined;
  for (;;) {
    const page = await get<ListPage<T>>(`${path}${query({ ...params, after })}`, signal);
    for (const item of page.data) items.push(item);
    if (!page.has_more || page.data.length === 0) return items;
    after = page.last_id;
  }
}

// Wire types of what the dashboard reads: declared once, beside the server's schemas.
export type {
  JobConfig,
  JobListItem,
  MetricRow,
  ModelSummary,
  Overview,
  RewardPoint,
  TrajectoryDetail,
  TrajectorySteps,
  TrajectorySummary,
} from '../../src/api/dashboard.ts';
export type { EngineReport, SystemCheckResponse } from '../../src/api/health.ts';
export type { IdentityResponse as Me } from '../../src/api/identity.ts';
export type { ListPage } from '../../src/api/lists.ts';
export type { Checkpoint, CheckpointDeleteResponse, ModelResponse as Model } from '../../src/api/models.ts';
export type { TypedTrainingJobEvent as JobEvent } from '../../src/api/training-jobs.ts';
/** A job with its status as one of the statuses (the wire schema says only string). */
export type Job = Omit<TrainingJob, 'status'> & { status: JobStatus };
/** Parallel arrays over a trajectory's trained tokens (a detail without them has `trained_tokens: null`). */
export type TrainedTokens = NonNullable<TrainedTokensView>;

export const TERMINAL_STATUSES: readonly string[] = TERMINAL_JOB_STATUSES;
export const isActive = isActiveJobStatus;
