/**
 * Job payloads: what a training job's file holds between its submission and its run. The rule every kind keeps:
 * one casing (the wire's snake_case), a `version` in each, and one schema per kind (rl/payload.ts,
 * sft/payload.ts) that is checked when the payload is written (job-service.ts) and again when its runner reads it
 * back (through session.ts `openJob`): a file that changed under us, or that a later build wrote, fails its job
 * with `unreadable_payload` instead of running under a type it does not have.
 *
 * Version 0 is what builds before versions wrote: no `version` field. Each kind reads it by filling in what it
 * lacks with the default a job that left it out gets today.
 */
import type { Static, TSchema } from '@sinclair/typebox';
import type { TypeCheck } from '@sinclair/typebox/compiler';
import { JobError } from '../errors.ts';

export const PAYLOAD_VERSION = 1;

/** Why `value` does not match `check`'s schema (its first error), or null when it does. */
function mismatch<T extends TSchema>(check: TypeCheck<T>, value: unknown): string | null {
  if (check.Check(value)) return null;
  const first = check.Errors(value).First();
  return `${first?.path || '/'}: ${first?.message ?? 'does not match'}`;
}

/** A payload about to be written: a mismatch is this server's own bug, so it is thrown, never stored. */
export function written<T>(check: TypeCheck<TSchema>, payload: T, kind: string): T {
  const problem = mismatch(check, payload);
  if (problem) throw new Error(`the ${kind} job payload this server built breaks its own schema at ${problem}`);
  return payload;
}

/** A payload read back: one that matches no version this server knows fails its job, named. */
export function read<T extends TSchema>(check: TypeCheck<T>, value: unknown, kind: string): Static<T> {
  if (check.Check(value)) return value;
  throw new JobError(
    'unreadable_payload',
    `The ${kind} job's stored request matches no payload version this server reads (${mismatch(check, value)})`,
  );
}

export const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** Version 0: no `version` field. */
export const isVersion0 = (raw: unknown): raw is Record<string, unknown> => isRecord(raw) && raw.version === undefined;
