/**
 * Tinker sampling: sampling sessions (a base model, or a `tinker://` checkpoint of one of our models) and
 * `asample` on the sampler engine's `generate` — prompt token ids in; per sample the tokens, their logprobs and
 * why it stopped out; optionally the prompt's logprobs. Sampling never waits for a model's training queue.
 */
import type { Clock } from '../clock.ts';
import { servingAdapterKey } from '../engine/adapter-keys.ts';
import type { GenerateRequest } from '../engine/protocol.ts';
import { AppError, excerpt, notFound } from '../errors.ts';
import { newId } from '../ids.ts';
import { canActFor, type Principal } from '../services/auth-service.ts';
import type { BaseModelRuntime, LoadedBase } from '../services/base-model-runtime.ts';
import type { BaseModelRegistry } from '../services/base-models.ts';
import type { TinkerRepository } from '../store/tinker-repository.ts';
import type { TinkerFutures } from './futures.ts';
import type { TinkerModels } from './models.ts';
import type { TinkerProvenance } from './provenance.ts';
import type { CreateSamplingSessionBody, SampleBody, SamplingParams, UntypedFuture } from './schemas.ts';

/** Tokens a sample may take when the client sets no max_tokens. */
const DEFAULT_MAX_TOKENS = 128;

export interface SampledSequence {
  stop_reason: 'stop' | 'length';
  tokens: number[];
  logprobs: number[];
}

/** The future's stored result; retrieve answers it as protobuf (what the SDK asks for) or JSON. */
export interface SampleResult {
  type: 'sample';
  sequences: SampledSequence[];
  prompt_logprobs: (number | null)[] | null;
}

interface Target {
  base: string;
  adapter: Pick<GenerateRequest, 'adapter' | 'adapter_path'>;
  modelPath: string | null;
}

export class TinkerSampling {
  constructor(
    private readonly repository: TinkerRepository,
    private readonly tinkerModels: TinkerModels,
    private readonly baseModels: BaseModelRegistry,
    private readonly runtime: BaseModelRuntime,
    private readonly futures: TinkerFutures,
    private readonly provenance: TinkerProvenance,
    private readonly clock: Clock,
  ) {}

  async createSession(
    principal: Principal,
    body: CreateSamplingSessionBody,
  ): Promise<{ type: 'create_sampling_session'; sampling_session_id: string }> {
    await this.tinkerModels.ownedSession(principal, body.session_id);
    const target = await this.target(principal, body.model_path ?? null, body.base_model ?? null);
    return {
      type: 'create_sampling_session',
      sampling_session_id: await this.createSessionFor(principal, target.base, target.modelPath),
    };
  }

  async createSessionFor(principal: Principal, base: string, modelPath: string | null): Promise<string> {
    const id = newId();
    await this.repository.insertSamplingSession({
      id,
      entity_id: principal.entityId,
      base_model: base,
      model_path: modelPath,
      created_at: this.clock.now().toISOString(),
    });
    return id;
  }

  async describeSession(
    principal: Principal,
    id: string,
  ): Promise<{ sampler_id: string; base_model: string; model_path: string | null }> {
    const session = await this.repository.findSamplingSession(id);
    if (!session || !canActFor(principal, session.entity_id)) throw notFound(`Sampler ${JSON.stringify(excerpt(id))}`);
    return { sampler_id: session.id, base_model: session.base_model, model_path: session.model_path };
  }

  /** Checks the request at once (a 400 for bad input), then samples as a future outside every training queue. */
  async sample(principal: Principal, body: SampleBody): Promise<UntypedFuture> {
    let modelPath = body.model_path ?? null;
    let baseModel = body.base_model ?? null;
    if (body.sampling_session_id)
      ({ model_path: modelPath, base_model: baseModel } = await this.describeSession(
        principal,
        body.sampling_session_id,
      ));
    const target = await this.target(principal, modelPath, baseModel);
    const base = await this.runtime.load(target.base);
    const request = generateRequest(base, target, body);
    const wantPrompt = body.prompt_logprobs === true;
    const lastN = promptLogprobsLastN(body);
    const sequenceIds = (requestId: string) =>
      Array.from({ length: request.n ?? 1 }, (_, index) => `${requestId}:${index}`);
    const requestId = await this.futures.submit(principal, 'sample', null, async (id) => {
      const result = await this.run(base, request, body.sampling_params.stop ?? null, wantPrompt);
      // Only the last N are scored: the earlier entries are null, as the SDK documents.
      if (lastN !== null && result.prompt_logprobs)
        result.prompt_logprobs = result.prompt_logprobs.map((value, index, all) =>
          index < all.length - lastN ? null : value,
        );
      if (body.record_stability_info === true)
        await this.provenance.record(
          principal,
          sequenceIds(id).map((sequenceId, index) => ({
            id: sequenceId,
            prompt: request.prompt,
            ...result.sequences[index],
          })),
        );
      return result;
    });
    return { request_id: requestId, sample_sequence_ids: sequenceIds(requestId) };
  }

  private async target(principal: Principal, modelPath: string | null, baseModel: string | null): Promise<Target> {
    if (modelPath) {
      const { model, checkpoint } = await this.tinkerModels.resolvePath(principal, modelPath);
      const adapter = checkpoint.adapterPath
        ? { adapter: servingAdapterKey(checkpoint.id), adapter_path: checkpoint.adapterPath }
        : { adapter: null };
      return { base: model.base_model, adapter, modelPath };
    }
    if (!baseModel) throw new AppError('bad_request', 'Sampling needs a model_path or a base_model');
    const base = this.baseModels.resolve(baseModel);
    if (!base)
      throw new AppError(
        'not_found',
        `Base model ${JSON.stringify(excerpt(baseModel))} is not available on this server`,
      );
    return { base: base.id, adapter: { adapter: null }, modelPath: null };
  }

  private async run(
    base: LoadedBase,
    request: GenerateRequest,
    stop: SamplingParams['stop'],
    wantPrompt: boolean,
  ): Promise<SampleResult> {
    const sequences: SampledSequence[] = Array.from({ length: request.n ?? 1 }, () => ({
      stop_reason: 'length',
      tokens: [],
      logprobs: [],
    }));
    let promptLogprobs: (number | null)[] | null = null;
    for await (const event of this.runtime.sampler().generate(request)) {
      if (event.type === 'prompt') promptLogprobs = event.prompt_logprobs.map((entry) => entry?.logprob ?? null);
      else if (event.type === 'tokens') {
        sequences[event.seq].tokens.push(...event.tokens);
        sequences[event.seq].logprobs.push(...(event.logprobs ?? []).map((value) => value ?? 0));
      } else if (event.type === 'finish') sequences[event.seq].stop_reason = event.finish_reason;
    }
    const stopStrings =
      typeof stop === 'string'
        ? [stop]
        : Array.isArray(stop) && stop.every((item) => typeof item === 'string')
          ? (stop as string[])
          : [];
    if (stopStrings.length) for (const sequence of sequences) cutAtStopString(sequence, stopStrings, base);
    return { type: 'sample', sequences, prompt_logprobs: wantPrompt ? promptLogprobs : null };
  }
}

/** `prompt_logprobs_last_n`, checked: it needs `prompt_logprobs` and at most every prompt token but the first. */
function promptLogprobsLastN(body: SampleBody): number | null {
  const lastN = body.prompt_logprobs_last_n ?? null;
  if (lastN === null) return null;
  const length = body.prompt.chunks.reduce((sum, chunk) => sum + chunk.tokens.length, 0);
  if (body.prompt_logprobs !== true)
    throw new AppError('bad_request', 'prompt_logprobs_last_n needs prompt_logprobs: true');
  if (lastN > length - 1)
    throw new AppError(
      'bad_request',
      `prompt_logprobs_last_n must be between 1 and ${length - 1} (the prompt's length less one), not ${lastN}`,
    );
  return lastN;
}

function generateRequest(base: LoadedBase, target: Target, body: SampleBody): GenerateRequest {
  const prompt = body.prompt.chunks.flatMap((chunk) => chunk.tokens);
  const vocab = base.engine.vocab_size;
  const context = base.engine.context_length;
  if (!prompt.length) throw new AppError('bad_request', 'The prompt has no tokens');
  const outside = prompt.find((id) => id < 0 || id >= vocab);
  if (outside !== undefined)
    throw new AppError('bad_request', `Prompt token id ${outside} is outside the vocabulary (0..${vocab - 1})`);
  const n = body.num_samples ?? 1;
  if (n > base.engine.max_num_seqs)
    throw new AppError(
      'bad_request',
      `num_samples=${n} exceeds the ${base.engine.max_num_seqs} sequences this server decodes at once`,
    );
  const params = body.sampling_params;
  const maxTokens = params.max_tokens ?? Math.min(DEFAULT_MAX_TOKENS, context - prompt.length);
  if (prompt.length + maxTokens > context)
    throw new AppError(
      'bad_request',
      `The prompt (${prompt.length} tokens) and max_tokens (${maxTokens}) exceed the context length ${context}`,
    );
  const stop = params.stop ?? null;
  const stopIds = Array.isArray(stop) && stop.every((item) => typeof item === 'number') ? (stop as number[]) : [];
  if (stopIds.some((id) => id < 0 || id >= vocab))
    throw new AppError('bad_request', 'A stop token id is outside the vocabulary');
  return {
    ...target.adapter,
    base: base.id,
    prompt,
    n,
    max_tokens: maxTokens,
    // Tinker: no `stop` keeps the model's end-of-sequence ids; any list, even an empty one, replaces them.
    ignore_eos: stop !== null,
    stop_token_ids: stop === null ? base.generation.eos_token_ids : stopIds,
    // Left out, they mean the protocol's defaults, which the engine client fills in.
    temperature: params.temperature ?? undefined,
    top_p: params.top_p ?? undefined,
    top_k: params.top_k ?? undefined,
    seed: params.seed ?? undefined,
    logprobs: 0,
    prompt_logprobs: body.prompt_logprobs ? 0 : null,
  };
}

/** Ends a sample after the token that completes its first stop string (Tinker keeps that token). */
function cutAtStopString(sequence: SampledSequence, stops: string[], base: LoadedBase): void {
  for (let end = 1; end <= sequence.tokens.length; end += 1) {
    const text = base.tokenizer.decode(sequence.tokens.slice(0, end));
    if (stops.some((stop) => stop && text.includes(stop))) {
      sequence.tokens = sequence.tokens.slice(0, end);
      sequence.logprobs = sequence.logprobs.slice(0, end);
      sequence.stop_reason = 'stop';
      return;
    }
  }
}
