/**
 * The engine protocol's op table as the server uses it: `OPS` (each op's role, streaming and fan-out) and
 * `OpTypes` (its request and reply types) come from engine/protocol.json through the generated protocol.ts. The
 * client sends any op through one `request`, the supervisor wraps that once, and roles.ts routes by the role
 * column; an engine of another kind (a vLLM sampler) implements `SamplerEngine`, the sampler's share of this
 * table. Adding an op is its entry in engine/protocol.json and its handler in engine/server.py.
 */
import type { GenerateStream } from './generate-stream.ts';
import { GENERATE_DEFAULTS, type GenerateRequest, OPS, type OpName, type OpTypes } from './protocol.ts';

export { OPS, type OpInfo, type OpName, type OpTypes } from './protocol.ts';

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

/** A generate request whose every field with a protocol default is filled in. */
export type CompleteGenerateRequest = GenerateRequest & Required<Pick<GenerateRequest, keyof typeof GENERATE_DEFAULTS>>;

/**
 * The request with every field its caller left out (or set to undefined) at the protocol's default
 * (`GENERATE_DEFAULTS`, from engine/protocol.json): the one place they are filled in, by our engine's client and the
 * vLLM sampler alike, so callers (chat, Tinker, training) pass only what they choose.
 */
export function withGenerateDefaults(request: GenerateRequest): CompleteGenerateRequest {
  const given = Object.fromEntries(Object.entries(request).filter((entry) => entry[1] !== undefined));
  return { ...GENERATE_DEFAULTS, ...given } as unknown as CompleteGenerateRequest;
}

/** Whether a sampler serves `op` (narrows it), for routers that take op names at run time. */
export function isSamplerOp(op: UnaryOp): op is SamplerOp {
  return OPS[op].role !== 'trainer';
}
