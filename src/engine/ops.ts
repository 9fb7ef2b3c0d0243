/**
 * The engine protocol as one table: every op of docs/engine-protocol.md with its request and reply types
 * (`OpTypes`), the role that serves it and whether it streams (`OPS`). The client sends any op through one
 * `request`, the supervisor wraps that once, and roles.ts routes by the role column; an engine of another
 * kind (a vLLM sampler) implements `SamplerEngine`, the sampler's share of this table. Adding an op is an
 * entry here, an entry in engine/server.py's `OPS` and a row in the doc's op table (a test checks all three).
 */
import type { GenerateStream } from './generate-stream.ts';
import type {
  CancelReply,
  CheckConstraintReply,
  CheckConstraintRequest,
  DropAdapterReply,
  DropAdapterRequest,
  EnsureAdapterReply,
  EnsureAdapterRequest,
  ForwardBackwardReply,
  ForwardBackwardRequest,
  ForwardReply,
  ForwardRequest,
  GenerateEvent,
  GenerateRequest,
  LoadBaseReply,
  LoadBaseRequest,
  LoadStateReply,
  LoadStateRequest,
  OptimStepReply,
  OptimStepRequest,
  SaveAdapterReply,
  SaveAdapterRequest,
  SaveStateReply,
  SaveStateRequest,
  StatsReply,
  TrainStepReply,
  TrainStepRequest,
} from './protocol.ts';

/** Op name → what its request carries and what its (final) reply holds; `generate` streams events. */
export interface OpTypes {
  stats: { request: Record<string, never>; reply: StatsReply };
  load_base: { request: LoadBaseRequest; reply: LoadBaseReply };
  check_constraint: { request: CheckConstraintRequest; reply: CheckConstraintReply };
  ensure_adapter: { request: EnsureAdapterRequest; reply: EnsureAdapterReply };
  save_adapter: { request: SaveAdapterRequest; reply: SaveAdapterReply };
  drop_adapter: { request: DropAdapterRequest; reply: DropAdapterReply };
  generate: { request: GenerateRequest; reply: GenerateEvent };
  cancel: { request: { target: string }; reply: CancelReply };
  forward: { request: ForwardRequest; reply: ForwardReply };
  train_step: { request: TrainStepRequest; reply: TrainStepReply };
  forward_backward: { request: ForwardBackwardRequest; reply: ForwardBackwardReply };
  optim_step: { request: OptimStepRequest; reply: OptimStepReply };
  save_state: { request: SaveStateRequest; reply: SaveStateReply };
  load_state: { request: LoadStateRequest; reply: LoadStateReply };
}

export type OpName = keyof OpTypes;

/**
 * `sampler`: only a sampler serves it; `trainer`: only the trainer; `both`: either. With several samplers,
 * `every` sends the op to each of them (state every sampler must hold, or a cancel whose stream may be on any).
 */
export interface OpInfo {
  role: 'sampler' | 'trainer' | 'both';
  streams: boolean;
  every?: true;
}

export const OPS = {
  stats: { role: 'both', streams: false },
  load_base: { role: 'both', streams: false, every: true },
  check_constraint: { role: 'sampler', streams: false, every: true },
  ensure_adapter: { role: 'both', streams: false, every: true },
  save_adapter: { role: 'trainer', streams: false },
  drop_adapter: { role: 'both', streams: false, every: true },
  generate: { role: 'sampler', streams: true },
  cancel: { role: 'sampler', streams: false, every: true },
  forward: { role: 'both', streams: false },
  train_step: { role: 'trainer', streams: false },
  forward_backward: { role: 'trainer', streams: false },
  optim_step: { role: 'trainer', streams: false },
  save_state: { role: 'trainer', streams: false },
  load_state: { role: 'trainer', streams: false },
} as const satisfies Record<OpName, OpInfo>;

export type OpRequest<O extends OpName> = OpTypes[O]['request'];
export type OpReply<O extends OpName> = OpTypes[O]['reply'];

/** The ops answered by one reply, which `request` sends (`generate` has its own method). */
export type UnaryOp = { [O in OpName]: (typeof OPS)[O]['streams'] extends true ? never : O }[OpName];
/** The unary ops a sampler serves. */
export type SamplerOp = { [O in UnaryOp]: (typeof OPS)[O]['role'] extends 'trainer' ? never : O }[UnaryOp];

/** What serving needs from an engine: the sampler's ops and `generate`. Our engine, a pool of them, or another kind. */
export interface SamplerEngine {
  request<O extends SamplerOp>(op: O, body: OpRequest<O>): Promise<OpReply<O>>;
  generate(request: GenerateRequest): GenerateStream;
}

/** An engine that serves every op: the client, the supervisor, and the trainer of any topology. */
export interface Engine extends SamplerEngine {
  request<O extends UnaryOp>(op: O, body: OpRequest<O>): Promise<OpReply<O>>;
}

/** Whether a sampler serves `op` (narrows it), for routers that take op names at run time. */
export function isSamplerOp(op: UnaryOp): op is SamplerOp {
  return OPS[op].role !== 'trainer';
}
