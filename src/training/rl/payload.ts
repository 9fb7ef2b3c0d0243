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

export function rlPayload(fields: Omit<RlJobPayload, 'version'>): RlJobPayload {
  return written(check, { version: PAYLOAD_VERSION, ...fields }, 'RL');
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
