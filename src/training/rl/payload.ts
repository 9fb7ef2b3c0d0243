/**
 * An RL job's payload (the rule all kinds keep is ../payloads.ts's): the trajectory groups and the parsed
 * configuration (config.ts). Version 0 stored the configuration in camelCase; it is read by renaming its keys and
 * filling each key it lacks with its default.
 */
import { type Static, Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { type FullTrajectoryGroup, TrainingGroup, withGroupDefaults } from '../../api/models.ts';
import { isRecord, isVersion0, PAYLOAD_VERSION, read, written } from '../payloads.ts';
import { parseRlConfig, RlConfig } from './config.ts';

export const RlJobPayload = Type.Object(
  { version: Type.Literal(PAYLOAD_VERSION), trajectory_groups: Type.Array(TrainingGroup), config: RlConfig },
  { additionalProperties: false },
);
/** An RL payload as runners see it: the groups with ART's defaults in place. */
export type RlJobPayload = Omit<Static<typeof RlJobPayload>, 'trajectory_groups'> & {
  trajectory_groups: FullTrajectoryGroup[];
};

const check = TypeCompiler.Compile(RlJobPayload);

const checkGroups = TypeCompiler.Compile(Type.Array(TrainingGroup));

/** The groups of an RL payload as the JSON its file holds, checked against the payload's schema first. */
export function rlGroupsJson(groups: FullTrajectoryGroup[]): string {
  return JSON.stringify(written(checkGroups, groups, 'RL'));
}

/**
 * An RL payload's JSON text from its groups' (rlGroupsJson, made where the request was parsed, perhaps on a worker
 * thread) and its configuration, which is checked here with the rest of the payload's schema.
 */
export function rlPayloadText(groupsJson: string, config: RlJobPayload['config']): string {
  const { trajectory_groups: _empty, ...checked } = written(
    check,
    { version: PAYLOAD_VERSION, trajectory_groups: [], config },
    'RL',
  );
  return `${JSON.stringify(checked).slice(0, -1)},"trajectory_groups":${groupsJson}}`;
}

const snakeCase = (key: string) => key.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);

/** A version-0 RL config (camelCase, possibly older than some keys) in today's names, each key it lacks at its default. */
function configFromVersion0(config: Record<string, unknown>): Record<string, unknown> {
  const renamed = Object.fromEntries(Object.entries(config).map(([key, value]) => [snakeCase(key), value]));
  const reference = renamed.kl_reference;
  if (isRecord(reference)) renamed.kl_reference = { model_id: reference.modelId, step: reference.step };
  // Every version-0 config has its rate; one without reads as no rate at all, and fails the check below.
  const rate = typeof renamed.learning_rate === 'number' ? renamed.learning_rate : NaN;
  return { ...parseRlConfig({}, () => rate).config, ...renamed };
}

export function readRlPayload(raw: unknown): RlJobPayload {
  const current =
    isVersion0(raw) && isRecord(raw.config)
      ? { ...raw, version: PAYLOAD_VERSION, config: configFromVersion0(raw.config) }
      : raw;
  const payload = read(check, current, 'RL');
  return { ...payload, trajectory_groups: payload.trajectory_groups.map(withGroupDefaults) };
}
