/** /v1/health and /v1/system-check answers (decisions.md § Health). */
import { type Static, Type } from '@sinclair/typebox';

export const HealthResponse = Type.Object({ status: Type.Literal('ok') });

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) => Type.Union([schema, Type.Null()]);
/** An engine's memory by kind in bytes, as its `stats` reports it (engine/protocol.json `EngineMemory`). */
const Memory = Type.Record(Type.String(), Type.Number());

/** One rank of a trainer's process group: its process, and its memory as of its last op. */
export const RankReport = Type.Object({
  rank: Type.Integer(),
  pid: Type.Integer(),
  host: Type.String(),
  device: Type.String(),
  rss_bytes: Type.Optional(Type.Integer()),
  memory: Type.Optional(Memory),
});

/** One engine in the system check: its role, kind, process, state and memory (a trainer's per rank). */
export const EngineReport = Type.Object(
  {
    role: Type.String(),
    kind: Type.String(),
    state: Type.String(),
    pid: Nullable(Type.Integer()),
    url: Nullable(Type.String()),
    restarts: Type.Integer(),
    device: Nullable(Type.String()),
    dtype: Nullable(Type.String()),
    limits: Nullable(Type.Object({}, { additionalProperties: true })),
    ok: Type.Boolean(),
    rss_bytes: Type.Optional(Type.Integer()),
    memory: Type.Optional(Memory),
    ranks: Type.Optional(Type.Array(RankReport)),
    error: Type.Optional(Type.String()),
  },
  { additionalProperties: true },
);
export type EngineReport = Static<typeof EngineReport>;

/** A probe may report more beside success (the engine probe lists its engines, their roles, state and limits). */
const Probe = Type.Object(
  {
    success: Type.Boolean(),
    duration_ms: Type.Number(),
    error: Type.Optional(Type.String()),
    engines: Type.Optional(Type.Array(EngineReport)),
  },
  { additionalProperties: true },
);

/** 200 when every probe succeeds, 503 (same shape) otherwise. */
export const SystemCheckResponse = Type.Object({ api: Probe, database: Probe, engine: Probe, queue: Probe });
export type SystemCheckResponse = Static<typeof SystemCheckResponse>;
