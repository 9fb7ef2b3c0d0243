/**
 * The vLLM samplers of one server and the sampler that routes by base model: a base whose sampler
 * kind is vLLM (SAMPLER_ENGINE, SAMPLER_ENGINES) is served by a vLLM we start for it when it is first needed, or by
 * the operator's vLLM (SAMPLER_URLS `vllm+http://…`) that serves it under our base id; every other base by our own
 * samplers. Ops without a base (dropping an adapter, a cancel) go to every sampler.
 */

import { EngineError } from '../errors.ts';
import type { GenerateStream } from '../generate-stream.ts';
import type { EngineLogger } from '../logger.ts';
import type { OpReply, OpRequest, SamplerEngine, SamplerOp } from '../ops.ts';
import type { GenerateRequest, LoadBaseReply, LoadBaseRequest } from '../protocol.ts';
import type { ServingLimits } from '../settings.ts';
import { type SamplerEngineKind, samplerKindOf, type VllmConfig } from './config.ts';
import { VllmSampler } from './sampler.ts';

/** A base model as vLLM needs it: the id it is served under and its HF folder. */
export interface VllmBase {
  id: string;
  path: string;
}

export interface VllmSetup {
  config: VllmConfig;
  bases: VllmBase[];
  serving: ServingLimits;
}

/** The vLLM samplers: `all` of them, and `byBase` those started for one base each. */
export interface VllmSamplers {
  all: VllmSampler[];
  byBase: Map<string, VllmSampler>;
}

/** One sampler per operator's URL, else one child per base served by vLLM; none when no base is. */
export function createVllmSamplers({ config, bases, serving }: VllmSetup, logger: EngineLogger): VllmSamplers {
  const served = bases.filter((base) => samplerKindOf(config, base.id) === 'vllm');
  const common = { apiKey: config.apiKey, maxAdapters: config.maxAdapters, maxNumSeqs: serving.maxNumSeqs };
  const byBase = new Map<string, VllmSampler>();
  if (served.length === 0) return { all: [], byBase };
  if (config.urls.length > 0) {
    return {
      all: config.urls.map(
        (url) => new VllmSampler({ ...common, name: `the vLLM sampler at ${url}`, url, launch: null, logger }),
      ),
      byBase,
    };
  }
  for (const base of served) {
    const launch = {
      python: config.python,
      model: base.path,
      servedName: base.id,
      // fp32 unless DTYPE says otherwise: on CPU its logprobs then match our engine's (and the trainer's).
      dtype: serving.dtype ?? 'float32',
      maxModelLen: serving.maxModelLen,
      maxNumSeqs: serving.maxNumSeqs,
      maxLoraRank: config.maxLoraRank,
      maxLoras: config.maxLoras,
      maxAdapters: config.maxAdapters,
      kvCacheMemoryBytes: serving.kvCacheMemoryBytes,
      apiKey: config.apiKey,
      extraArgs: config.extraArgs,
    };
    byBase.set(
      base.id,
      new VllmSampler({ ...common, name: `the vLLM sampler for ${base.id}`, url: null, launch, logger }),
    );
  }
  return { all: [...byBase.values()], byBase };
}

/** The sampler every service sees: each base's op goes to the engine kind that serves it. */
export class SamplerByBase implements SamplerEngine {
  /** Base → the vLLM sampler that serves it (a child's from the start; an operator's once it was found serving it). */
  private readonly assigned = new Map<string, VllmSampler>();
  private readonly vllm: VllmSampler[];

  constructor(
    samplers: VllmSamplers,
    private readonly ours: SamplerEngine | null,
    private readonly setup: VllmSetup,
  ) {
    this.vllm = samplers.all;
    for (const [base, sampler] of samplers.byBase) this.assigned.set(base, sampler);
  }

  kindOf(base: string): SamplerEngineKind {
    return samplerKindOf(this.setup.config, base);
  }

  /**
   * Whether a model on this base can be sampled, for model creation: a vLLM that failed to start for it, or a running
   * vLLM that does not serve it, is a clear error now. A vLLM still starting is given the benefit of the doubt.
   */
  async check(base: string): Promise<void> {
    if (this.kindOf(base) !== 'vllm') return;
    const candidates = this.assigned.has(base) ? [this.assigned.get(base)!] : this.vllm;
    // A model on this base will be sampled soon: its vLLM starts now, and creation does not wait for it.
    for (const sampler of candidates) sampler.wake();
    const failed = candidates.find((sampler) => sampler.health().state === 'failed');
    if (failed) throw new EngineError('bad_request', `vLLM cannot serve base model ${base}: ${failed.health().error}`);
    if (candidates.every((sampler) => sampler.health().state !== 'ready')) return;
    const spec = this.setup.bases.find((candidate) => candidate.id === base);
    await this.loadBase({ base, path: spec?.path ?? '' }).catch((error: EngineError) => {
      throw new EngineError(
        error.code === 'engine_unavailable' ? error.code : 'bad_request',
        `vLLM cannot serve base model ${base}: ${error.message}`,
      );
    });
  }

  /** An op with a base goes to that base's engine; `stats` to ours (or the first vLLM); the rest to every sampler. */
  async request<O extends SamplerOp>(op: O, body: OpRequest<O>): Promise<OpReply<O>> {
    if (op === 'load_base') return (await this.loadBase(body as LoadBaseRequest)) as OpReply<O>;
    const base = (body as { base?: unknown }).base;
    if (typeof base === 'string') return this.engineFor(base).request(op, body);
    // A vLLM nobody has needed yet holds nothing to drop or cancel, and is not started for that.
    const running = this.vllm.filter((sampler) => sampler.health().state !== 'idle');
    if (op === 'stats') {
      const answering = this.ours ?? running[0];
      if (!answering)
        throw new EngineError(
          'engine_unavailable',
          'no sampler has started yet (vLLM starts when a base is first used)',
        );
      return answering.request(op, body);
    }
    const engines: SamplerEngine[] = [...(this.ours ? [this.ours] : []), ...running];
    // Nothing runs yet (every base on a vLLM not yet needed): nothing was loaded to drop, nothing runs to cancel.
    if (engines.length === 0 && op === 'drop_adapter') return { dropped: false } as OpReply<O>;
    if (engines.length === 0 && op === 'cancel') return { cancelled: false } as OpReply<O>;
    const replies = (await Promise.all(engines.map((engine) => engine.request(op, body)))) as Record<string, unknown>[];
    const merged = { ...replies[0] };
    for (const [field, value] of Object.entries(merged))
      if (typeof value === 'boolean') merged[field] = replies.some((reply) => reply[field] === true);
    return merged as unknown as OpReply<O>;
  }

  async loadBase(request: LoadBaseRequest): Promise<LoadBaseReply> {
    if (this.kindOf(request.base) === 'ours' || this.assigned.has(request.base))
      return this.engineFor(request.base).request('load_base', request);
    let firstError: unknown;
    for (const sampler of this.vllm) {
      try {
        const reply = await sampler.loadBase(request);
        this.assigned.set(request.base, sampler);
        return reply;
      } catch (error) {
        firstError ??= error;
      }
    }
    throw firstError;
  }

  generate(request: GenerateRequest): GenerateStream {
    return this.engineFor(request.base).generate(request);
  }

  private engineFor(base: string): SamplerEngine {
    if (this.kindOf(base) === 'vllm') return this.assigned.get(base) ?? this.vllm[0];
    if (!this.ours) throw new EngineError('engine_unavailable', `no sampler of ours runs for ${base}`);
    return this.ours;
  }
}
