/**
 * Job payloads: what a training job's file holds between its submission and its run. One casing for RL and SFT
 * (the wire's snake_case), a `version` in each, and one schema per kind that is checked when the payload is
 * written (job-service.ts, through `rlPayloadText` / `sftPayload`) and again when a runner reads it back (`readRlPayload`
 * / `readSftPayload`, through session.ts `openJob`): a file that changed under us, or that a later build wrote, fails
 * its job with `unreadable_payload` instead of running under a type it does not have.
 *
 * Version 0 is what builds before versions wrote: no `version` field, and an RL config in camelCase. It is read by
 * renaming its keys and filling each key it lacks with the default a job that left it out gets today.
 */
import { type Static, type TSchema, Type } from '@sinclair/typebox';
import { type TypeCheck, TypeCompiler } from '@sinclair/typebox/compiler';
import { type FullTrajectoryGroup, TrainingGroup, withGroupDefaults } from '../api/models.ts';
import { LearningRate, SftMetricLogging } from '../api/training-jobs.ts';
import { JobError } from '../errors.ts';
import { parseRlConfig, RlConfig } from './rl/config.ts';

export const PAYLOAD_VERSION = 1;

const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

export const RlJobPayload = Type.Object(
  { version: Type.Literal(PAYLOAD_VERSION), trajectory_groups: Type.Array(TrainingGroup), config: RlConfig },
  { additionalProperties: false },
);
/** An RL payload as runners see it: the groups with ART's defaults in place. */
export type RlJobPayload = Omit<Static<typeof RlJobPayload>, 'trajectory_groups'> & {
  trajectory_groups: FullTrajectoryGroup[];
};

export const SftJobPayload = Type.Object(
  {
    version: Type.Literal(PAYLOAD_VERSION),
    artifact: Type.Object({ key: Type.String(), file: Type.String() }, { additionalProperties: false }),
    batch_size: Type.Integer({ minimum: 1 }),
    /** One rate for every batch, or one per batch. */
    learning_rate: Type.Union([LearningRate, Type.Array(LearningRate, { minItems: 1 })]),
    num_conversations: Type.Integer({ minimum: 0 }),
    /** Which assistant spans of each conversation are trained. */
    assistant_turns: Type.Union([Type.Literal('all'), Type.Literal('last')]),
    chat_template_kwargs: Nullable(Type.Record(Type.String(), Type.Unknown())),
    /** ART's `config.metric_logging` as sent (null: logged at the step the job writes). */
    metric_logging: Nullable(SftMetricLogging),
  },
  { additionalProperties: false },
);
export type SftJobPayload = Static<typeof SftJobPayload>;

const checkRl = TypeCompiler.Compile(RlJobPayload);
const checkSft = TypeCompiler.Compile(SftJobPayload);

/** Why `value` does not match `check`'s schema (its first error), or null when it does. */
function mismatch<T extends TSchema>(check: TypeCheck<T>, value: unknown): string | null {
  if (check.Check(value)) return null;
  const first = check.Errors(value).First();
  return `${first?.path || '/'}: ${first?.message ?? 'does not match'}`;
}

/** A payload about to be written: a mismatch is this server's own bug, so it is thrown, never stored. */
function written<T>(check: TypeCheck<TSchema>, payload: T, kind: string): T {
  const problem = mismatch(check, payload);
  if (problem) throw new Error(`the ${kind} job payload this server built breaks its own schema at ${problem}`);
  return payload;
}

/** A payload read back: one that matches no version this server knows fails its job, named. */
function read<T extends TSchema>(check: TypeCheck<T>, value: unknown, kind: string): Static<T> {
  if (check.Check(value)) return value;
  throw new JobError(
    'unreadable_payload',
    `The ${kind} job's stored request matches no payload version this server reads (${mismatch(check, value)})`,
  );
}

const checkRlGroups = TypeCompiler.Compile(Type.Array(TrainingGroup));

/** The groups of an RL payload as the JSON its file holds, checked against the payload's schema first. */
export function rlGroupsJson(groups: FullTrajectoryGroup[]): string {
  return JSON.stringify(written(checkRlGroups, groups, 'RL'));
}

/**
 * An RL payload's JSON text from its groups' (rlGroupsJson, made where the request was parsed, perhaps on a worker
 * thread) and its configuration, which is checked here with the rest of the payload's schema.
 */
export function rlPayloadText(groupsJson: string, config: RlJobPayload['config']): string {
  const { trajectory_groups: _empty, ...checked } = written(
    checkRl,
    { version: PAYLOAD_VERSION, trajectory_groups: [], config },
    'RL',
  );
  return `${JSON.stringify(checked).slice(0, -1)},"trajectory_groups":${groupsJson}}`;
}

export function sftPayload(fields: Omit<SftJobPayload, 'version'>): SftJobPayload {
  return written(checkSft, { version: PAYLOAD_VERSION, ...fields }, 'SFT');
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const snakeCase = (key: string) => key.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);

/** A version-0 RL config (camelCase, possibly older than some keys) in today's names, each key it lacks at its default. */
function rlConfigFromVersion0(config: Record<string, unknown>): Record<string, unknown> {
  const renamed = Object.fromEntries(Object.entries(config).map(([key, value]) => [snakeCase(key), value]));
  const reference = renamed.kl_reference;
  if (isRecord(reference)) renamed.kl_reference = { model_id: reference.modelId, step: reference.step };
  const rate = typeof renamed.learning_rate === 'number' ? renamed.learning_rate : NaN;
  return { ...parseRlConfig({}, rate).config, ...renamed };
}

/** Version 0: no `version` field. */
const isVersion0 = (raw: unknown): raw is Record<string, unknown> => isRecord(raw) && raw.version === undefined;

export function readRlPayload(raw: unknown): RlJobPayload {
  const current =
    isVersion0(raw) && isRecord(raw.config)
      ? { ...raw, version: PAYLOAD_VERSION, config: rlConfigFromVersion0(raw.config) }
      : raw;
  const payload = read(checkRl, current, 'RL');
  return { ...payload, trajectory_groups: payload.trajectory_groups.map(withGroupDefaults) };
}

/** Version 0 of an SFT payload was already snake_case; the keys added since read as their defaults. */
export function readSftPayload(raw: unknown): SftJobPayload {
  const current = isVersion0(raw)
    ? { assistant_turns: 'all', chat_template_kwargs: null, metric_logging: null, ...raw, version: PAYLOAD_VERSION }
    : raw;
  return read(checkSft, current, 'SFT');
}

/** What the dashboard shows of a job's request: its configuration as the job reads it and, for RL, how much data it got. */
export interface PayloadView {
  config: Record<string, unknown>;
  num_trajectory_groups: number | null;
  num_trajectories: number | null;
}

/** The view of a stored payload, read (and checked) as its runner reads it; null when it matches no version. */
export function payloadView(type: 'rl' | 'sft', raw: unknown): PayloadView | null {
  try {
    if (type === 'sft') {
      const { version: _version, artifact: _artifact, ...config } = readSftPayload(raw);
      return { config, num_trajectory_groups: null, num_trajectories: null };
    }
    const { config, trajectory_groups: groups } = readRlPayload(raw);
    return {
      config,
      num_trajectory_groups: groups.length,
      num_trajectories: groups.reduce((sum, group) => sum + group.trajectories.length, 0),
    };
  } catch (error) {
    if (error instanceof JobError) return null;
    throw error;
  }
}
