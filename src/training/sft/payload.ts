/**
 * An SFT job's payload (the rule all kinds keep is ../payloads.ts's): the training data's artifact file, how many
 * conversations it holds, and the parsed configuration (config.ts), stored side by side. Version 0 was already
 * snake_case; the keys added since read as their defaults.
 */
import { type Static, Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { isVersion0, PAYLOAD_VERSION, read, written } from '../payloads.ts';
import { SFT_CONFIG_DEFAULTS, SftConfig } from './config.ts';

export const SftJobPayload = Type.Object(
  {
    version: Type.Literal(PAYLOAD_VERSION),
    artifact: Type.Object({ key: Type.String(), file: Type.String() }, { additionalProperties: false }),
    num_conversations: Type.Integer({ minimum: 0 }),
    ...SftConfig.properties,
  },
  { additionalProperties: false },
);
export type SftJobPayload = Static<typeof SftJobPayload>;

const check = TypeCompiler.Compile(SftJobPayload);

export function sftPayload(fields: Omit<SftJobPayload, 'version'>): SftJobPayload {
  return written(check, { version: PAYLOAD_VERSION, ...fields }, 'SFT');
}

export function readSftPayload(raw: unknown): SftJobPayload {
  const current = isVersion0(raw) ? { ...SFT_CONFIG_DEFAULTS, ...raw, version: PAYLOAD_VERSION } : raw;
  return read(check, current, 'SFT');
}
