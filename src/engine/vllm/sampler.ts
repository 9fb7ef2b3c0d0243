/**
 * One vLLM server as a sampler engine: the sampler's share of the op table (ops.ts `SamplerEngine`) —
 * load a base (check it is served and read its limits), check a constraint, hold adapters, generate — answered by
 * vLLM's OpenAI server with token ids in and out (wire.ts), on a server we start or one the operator runs
 * (endpoint.ts). `forward` is refused: our engine (the trainer) runs it. Generation streams vLLM's chunks as our events; cancelling aborts the HTTP request,
 * which vLLM answers by dropping the request.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { EngineError } from '../errors.ts';
import type { GenerateStream } from '../generate-stream.ts';
import type { EngineLogger } from '../logger.ts';
import type { OpReply, OpRequest, SamplerEngine, SamplerOp } from '../ops.ts';
import {
  type CheckConstraintReply,
  type CheckConstraintRequest,
  CONSTRAINT_KINDS,
  type DropAdapterReply,
  type DropAdapterRequest,
  type EnsureAdapterReply,
  type EnsureAdapterRequest,
  type GenerateEvent,
  type GenerateRequest,
  type LoadBaseReply,
  type LoadBaseRequest,
  type ReadyEvent,
  type StatsReply,
} from '../protocol.ts';
import { VllmAdapters } from './adapters.ts';
import { VllmEndpoint, type VllmState } from './endpoint.ts';
import type { VllmHttp } from './http.ts';
import type { VllmLaunchSpec } from './launcher.ts';
import { choiceEvents, completionBody, doneEvent, promptEvent, type VllmChoice, type VllmUsage } from './wire.ts';

export interface VllmSamplerOptions {
  name: string;
  /** A server the operator runs; null: start `launch`. */
  url: string | null;
  launch: VllmLaunchSpec | null;
  apiKey: string | null;
  maxAdapters: number;
  /** The most sequences one request may ask for (our MAX_NUM_SEQS; a vLLM we start runs with it). */
  maxNumSeqs: number;
  logger: EngineLogger;
  requestWaitMs?: number;
}

/** What the system check shows of it, in the shape of our engines' health. */
export interface VllmHealth {
  state: VllmState;
  pid: number | null;
  url: string | null;
  restarts: number;
  engine: ReadyEvent | null;
  lastExit: VllmEndpoint['lastExit'];
  inFlight: number;
  error: string | null;
}

interface Completion {
  choices: VllmChoice[];
  usage?: VllmUsage | null;
}

export class VllmSampler implements SamplerEngine {
  readonly endpoint: VllmEndpoint;
  private readonly adapters: VllmAdapters;
  private inFlight = 0;

  constructor(private readonly options: VllmSamplerOptions) {
    this.adapters = new VllmAdapters(options.maxAdapters, options.logger);
    this.endpoint = new VllmEndpoint({
      name: options.name,
      url: options.url,
      launch: options.launch,
      apiKey: options.apiKey,
      logger: options.logger,
      restore: (http) => this.adapters.restore(http),
      requestWaitMs: options.requestWaitMs,
    });
  }

  get name(): string {
    return this.options.name;
  }

  start(): void {
    this.endpoint.start();
  }

  stop(): Promise<void> {
    return this.endpoint.stop();
  }

  /** Resolves once it serves; at once for a child nobody has needed yet (it starts at the first request). */
  async waitUntilReady(): Promise<void> {
    if (this.endpoint.state === 'idle') return;
    await this.endpoint.ready();
  }

  /** Starts a child nobody has needed yet, without waiting for it (a model was just created on its base). */
  wake(): void {
    this.endpoint.wake();
  }

  probe(): Promise<void> {
    return this.endpoint.probe();
  }

  health(): VllmHealth {
    const { state, pid, url, restarts, lastExit, error } = this.endpoint;
    return { state, pid, url, restarts, engine: null, lastExit, inFlight: this.inFlight, error };
  }

  /** vLLM reports neither memory nor rates by op: requests running and waiting come from its `/metrics`. */
  async stats(): Promise<StatsReply> {
    const http = await this.endpoint.ready();
    const metrics = String(await http.json('GET', '/metrics', undefined, { timeoutMs: 5000 }));
    const gauge = (name: string) =>
      [...metrics.matchAll(new RegExp(`^vllm:${name}\\{[^}]*\\} ([0-9.eE+-]+)$`, 'gm'))].reduce(
        (sum, match) => sum + Number(match[1]),
        0,
      );
    const models = await this.servedModels(http);
    return {
      device: 'vllm',
      dtype: this.options.launch?.dtype ?? 'unknown',
      matmul_gflops: 0,
      bases: models.filter((model) => !model.parent).map((model) => model.id),
      adapters: this.adapters.names,
      max_adapters: this.options.maxAdapters,
      running: gauge('num_requests_running'),
      waiting: gauge('num_requests_waiting'),
      tokens_per_second: 0,
      rss_bytes: 0,
      memory: { weights_bytes: 0, kv_cache_bytes: 0, prefix_cache_bytes: 0, adapters_bytes: 0 },
    };
  }

  /** The base must be one the server serves under our id; its limits are vLLM's, its vocabulary the model's. */
  async loadBase(request: LoadBaseRequest): Promise<LoadBaseReply> {
    const http = await this.endpoint.ready();
    const models = await this.servedModels(http);
    const card = models.find((model) => model.id === request.base && !model.parent);
    if (!card) {
      const served = models.filter((model) => !model.parent).map((model) => model.id);
      throw new EngineError(
        'not_found',
        `${this.options.name} does not serve ${request.base} (it serves ${served.join(', ') || 'nothing'}; start it with --served-model-name ${request.base})`,
      );
    }
    const config = readModelConfig(request.path);
    const eos = config.eos_token_id;
    return {
      vocab_size: Number(config.vocab_size),
      context_length: card.max_model_len ?? Number(config.max_position_embeddings),
      eos_token_ids: (Array.isArray(eos) ? eos : eos === undefined || eos === null ? [] : [eos]).map(Number),
      num_parameters: 0, // vLLM does not say; nothing reads it for serving
      max_num_seqs: this.options.maxNumSeqs,
      constraint_kinds: [...CONSTRAINT_KINDS],
    };
  }

  /** vLLM compiles a constraint when a request carries it: a one-token request on the base shows whether it can. */
  async checkConstraint(request: CheckConstraintRequest): Promise<CheckConstraintReply> {
    const http = await this.endpoint.ready();
    const body = completionBody(
      { base: request.base, adapter: null, prompt: [0], max_tokens: 1, temperature: 0, constraint: request.constraint },
      request.base,
      false,
    );
    await http.json('POST', '/v1/completions', body, { timeoutMs: 120_000 });
    return { ok: true };
  }

  async ensureAdapter(request: EnsureAdapterRequest): Promise<EnsureAdapterReply> {
    if (!request.path)
      throw new EngineError(
        'bad_request',
        `${this.options.name} loads saved adapters only (a PEFT folder): ${request.adapter} has none`,
      );
    const http = await this.endpoint.ready();
    return { loaded: await this.adapters.ensure(http, request.adapter, request.base, request.path) };
  }

  async dropAdapter(request: DropAdapterRequest): Promise<DropAdapterReply> {
    const http = await this.endpoint.ready();
    return { dropped: await this.adapters.drop(http, request.adapter) };
  }

  generate(request: GenerateRequest): GenerateStream {
    return new VllmStream((signal) => this.run(request, signal));
  }

  /** The sampler's ops of the table (ops.ts); a stream is cancelled by aborting its HTTP request, not by `cancel`. */
  request<O extends SamplerOp>(op: O, body: OpRequest<O>): Promise<OpReply<O>> {
    const handlers: { [K in SamplerOp]: (body: OpRequest<K>) => Promise<OpReply<K>> } = {
      stats: () => this.stats(),
      load_base: (request) => this.loadBase(request),
      check_constraint: (request) => this.checkConstraint(request),
      ensure_adapter: (request) => this.ensureAdapter(request),
      drop_adapter: (request) => this.dropAdapter(request),
      cancel: async () => ({ cancelled: false }),
      forward: () =>
        Promise.reject(
          new EngineError('bad_request', 'the vLLM sampler does not run forward: our engine (the trainer) does'),
        ),
    };
    return (handlers[op] as (body: OpRequest<O>) => Promise<OpReply<O>>)(body);
  }

  private async servedModels(
    http: VllmHttp,
  ): Promise<{ id: string; parent?: string | null; max_model_len?: number }[]> {
    return (
      await http.json<{ data: { id: string; parent?: string | null; max_model_len?: number }[] }>(
        'GET',
        '/v1/models',
        undefined,
        { timeoutMs: 10_000 },
      )
    ).data;
  }

  /**
   * The request's events. An adapter is loaded first if vLLM does not hold it (evicted, or vLLM restarted behind our
   * back: then its 404 reloads it once). With prompt logprobs the answer comes whole (vLLM streams them only at k 0).
   */
  private async *run(request: GenerateRequest, signal: AbortSignal): AsyncGenerator<GenerateEvent> {
    this.inFlight += 1;
    let release = () => {};
    try {
      const http = await this.endpoint.ready();
      for (let attempt = 0; ; attempt += 1) {
        if (request.adapter) await this.holdAdapter(http, request);
        release = request.adapter ? this.adapters.use(request.adapter) : () => {};
        let emitted = false;
        try {
          for await (const event of this.events(http, request, signal)) {
            emitted = true;
            yield event;
          }
          return;
        } catch (error) {
          release();
          release = () => {};
          const lost =
            error instanceof EngineError && error.code === 'not_found' && request.adapter && !emitted && attempt === 0;
          if (!lost) throw error;
          this.adapters.forget(request.adapter!);
        }
      }
    } catch (error) {
      if (signal.aborted) throw new EngineError('cancelled', 'cancelled');
      throw error;
    } finally {
      release();
      this.inFlight -= 1;
    }
  }

  private async holdAdapter(http: VllmHttp, request: GenerateRequest): Promise<void> {
    if (!request.adapter_path) {
      if (!this.adapters.names.includes(request.adapter!))
        throw new EngineError('not_found', `adapter ${request.adapter} is not loaded in ${this.options.name}`);
      return;
    }
    await this.adapters.ensure(http, request.adapter!, request.base, request.adapter_path);
  }

  private async *events(http: VllmHttp, request: GenerateRequest, signal: AbortSignal): AsyncGenerator<GenerateEvent> {
    const model = request.adapter ?? request.base;
    const k = request.logprobs ?? null;
    if (request.prompt_logprobs !== null && request.prompt_logprobs !== undefined) {
      const answer = await http.json<Completion>('POST', '/v1/completions', completionBody(request, model, false), {
        signal,
      });
      const choices = [...answer.choices].sort((a, b) => a.index - b.index);
      if (choices[0]?.prompt_logprobs)
        yield promptEvent(choices[0].prompt_logprobs, request.prompt, request.prompt_logprobs);
      for (const choice of choices) yield* choiceEvents(choice, k);
      yield doneEvent(answer.usage, request.prompt.length);
      return;
    }
    let usage: VllmUsage | null = null;
    for await (const chunk of http.events('/v1/completions', completionBody(request, model, true), signal)) {
      if (chunk.usage) usage = chunk.usage as VllmUsage;
      for (const choice of (chunk.choices as VllmChoice[] | undefined) ?? []) yield* choiceEvents(choice, k);
    }
    yield doneEvent(usage, request.prompt.length);
  }
}

/** A generate request on vLLM: iterating runs it; cancelling (or leaving the loop early) aborts its HTTP request. */
class VllmStream implements GenerateStream {
  private readonly controller = new AbortController();
  private readonly source: AsyncGenerator<GenerateEvent>;

  constructor(run: (signal: AbortSignal) => AsyncGenerator<GenerateEvent>) {
    this.source = run(this.controller.signal);
  }

  async cancel(): Promise<void> {
    this.controller.abort(new EngineError('cancelled', 'cancelled'));
  }

  [Symbol.asyncIterator](): AsyncIterator<GenerateEvent> {
    return {
      next: () => this.source.next(),
      return: async () => {
        this.controller.abort(new EngineError('cancelled', 'cancelled'));
        await this.source.return(undefined).catch(() => undefined);
        return { value: undefined, done: true };
      },
    };
  }
}

function readModelConfig(folder: string): Record<string, unknown> {
  try {
    return JSON.parse(readFileSync(path.join(folder, 'config.json'), 'utf8')) as Record<string, unknown>;
  } catch (error) {
    throw new EngineError('not_found', `cannot read ${path.join(folder, 'config.json')}: ${(error as Error).message}`);
  }
}
