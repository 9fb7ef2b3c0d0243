/** /v1/health and /v1/system-check answers (decisions.md § Health). */
import { Type } from '@sinclair/typebox';

export const HealthResponse = Type.Object({ status: Type.Literal('ok') });

/** A probe may report more beside success (the engine probe lists its engines, their roles, state and limits). */
const Probe = Type.Object(
  {
    success: Type.Boolean(),
    duration_ms: Type.Number(),
    error: Type.Optional(Type.String()),
    engines: Type.Optional(Type.Array(Type.Object({ role: Type.String() }, { additionalProperties: true }))),
  },
  { additionalProperties: true },
);

/** 200 when every probe succeeds, 503 (same shape) otherwise. */
export const SystemCheckResponse = Type.Object({ api: Probe, database: Probe, engine: Probe, queue: Probe });
