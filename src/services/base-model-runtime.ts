/**
 * What it takes to use a base model: its tokenizer and chat template (cached per folder) and its weights
 * loaded in the engines (once per base and engine role, on first use). Chat and training both go through
 * here: chat samples on the sampler engine, jobs train on the trainer engine (the same one in single mode).
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { type MarkerSyntax, markerSyntax } from '../constraints/lark.ts';
import { type ChatTokenizer, loadTokenizer } from '../conversation/tokenizer.ts';
import {
  detectToolParser,
  TOOL_CALL_FORMATS,
  type ToolCallFormat,
  type ToolParserName,
} from '../conversation/tool-calls/index.ts';
import { EngineError } from '../engine/errors.ts';
import type { Engine, SamplerEngine } from '../engine/ops.ts';
import type { Dtype, EngineSupport, LoadBaseReply, LoadBaseRequest } from '../engine/protocol.ts';
import { AppError } from '../errors.ts';
import type { BaseModelRegistry, BaseModelSpec } from './base-models.ts';

/** Sampling defaults a model ships in `generation_config.json` (used when a request leaves them unset). */
export interface GenerationDefaults {
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  repetition_penalty?: number;
  /** Every end-of-sequence id the model may emit (the tokenizer's EOS among them). */
  eos_token_ids: number[];
}

export interface LoadedBase {
  id: string;
  path: string;
  tokenizer: ChatTokenizer;
  template: string | undefined;
  engine: LoadBaseReply;
  generation: GenerationDefaults;
  /** How this base writes tool calls: the parser for its output and the format forced calls are constrained to. */
  toolFormat: ToolCallFormat;
  /** How a forced call's grammar writes marker texts for this tokenizer (special tokens by id). */
  markers: MarkerSyntax;
  /** The projections an adapter on this base may target, as the trainer announced them (set by loadForTraining). */
  loraTargets?: Record<string, 'attention' | 'mlp'>;
}

async function readGenerationDefaults(folder: string, tokenizer: ChatTokenizer): Promise<GenerationDefaults> {
  let raw: Record<string, unknown> = {};
  try {
    raw = JSON.parse(await readFile(path.join(folder, 'generation_config.json'), 'utf8')) as Record<string, unknown>;
  } catch {
    // No generation_config.json: neutral defaults.
  }
  const number = (key: string) => (typeof raw[key] === 'number' ? (raw[key] as number) : undefined);
  const eos = raw.eos_token_id;
  const eosIds = (Array.isArray(eos) ? eos : eos === undefined ? [] : [eos]).filter((id): id is number =>
    Number.isInteger(id),
  );
  if (tokenizer.eosTokenId !== undefined && !eosIds.includes(tokenizer.eosTokenId))
    eosIds.unshift(tokenizer.eosTokenId);
  return {
    temperature: number('temperature'),
    top_p: number('top_p'),
    top_k: number('top_k'),
    min_p: number('min_p'),
    repetition_penalty: number('repetition_penalty'),
    eos_token_ids: eosIds,
  };
}

/** The engines by role; one object may hold both. */
export interface RuntimeEngines {
  sampler: SamplerEngine;
  trainer: Engine;
  /** What the engines announced they can run; absent for stand-ins that announce nothing. */
  support?: () => Promise<EngineSupport>;
  /** Throws when the sampler cannot serve this base (engine/roles.ts); absent: every base can be sampled. */
  checkSampler?(baseId: string): Promise<void>;
}

export class BaseModelRuntime {
  private readonly loading = new Map<string, Promise<LoadedBase>>();
  private readonly trainerLoading = new Map<string, Promise<LoadedBase>>();

  constructor(
    private readonly registry: BaseModelRegistry,
    private readonly engines: RuntimeEngines | null,
    private readonly dtype: Dtype | null = null,
  ) {}

  /** The engine that serves chat, or a clear 503 when this server runs without engines. */
  sampler(): SamplerEngine {
    return this.requireEngines().sampler;
  }

  /** A 400 naming why when this base's sampler cannot serve it (a vLLM that cannot load it); a 503 when it is down. */
  async checkSampler(baseId: string): Promise<void> {
    try {
      await this.engines?.checkSampler?.(baseId);
    } catch (error) {
      if (!(error instanceof EngineError)) throw error;
      throw new AppError(error.code === 'engine_unavailable' ? 'engine_unavailable' : 'bad_request', error.message);
    }
  }

  /** The vocabulary size from the tokenizer alone (no engine needed), or null when it cannot be read. */
  async vocabularySize(baseId: string): Promise<number | null> {
    return (await this.tokenizerOnly(baseId))?.vocabSize ?? null;
  }

  /** The tool-call parser a base model's answers go through (no engine needed), or null when its tokenizer cannot be read. */
  async toolCallParser(baseId: string): Promise<ToolParserName | null> {
    const spec = this.registry.find(baseId);
    const tokenizer = await this.tokenizerOnly(baseId);
    return spec && tokenizer ? toolFormatOf(spec, tokenizer).name : null;
  }

  /**
   * Reads every loadable base's tokenizer now. Building one (SmolLM2's: 0.3–1.6 s) holds the event loop, so the
   * first request that needed it (a `/v1/models` listing, say) would otherwise stall every other request, health
   * included.
   */
  async readTokenizers(): Promise<void> {
    for (const id of this.registry.loadableIds()) await this.tokenizerOnly(id);
  }

  private async tokenizerOnly(baseId: string): Promise<ChatTokenizer | null> {
    const spec = this.registry.find(baseId);
    if (!spec) return null;
    try {
      return await loadTokenizer(spec.path);
    } catch {
      return null; // whatever needs the model reports the unreadable tokenizer
    }
  }

  /** The engine that trains and saves adapters. */
  trainer(): Engine {
    return this.requireEngines().trainer;
  }

  /** The base, loaded on the sampler; what serving needs. */
  load(baseId: string): Promise<LoadedBase> {
    return cached(this.loading, baseId, () => this.loadOnce(baseId));
  }

  /** The base, loaded on the sampler (its tokenizer and limits) and on the trainer. */
  loadForTraining(baseId: string): Promise<LoadedBase> {
    return cached(this.trainerLoading, baseId, async () => {
      const base = await this.load(baseId);
      const { sampler, trainer } = this.requireEngines();
      const reply =
        trainer !== sampler ? await trainer.request('load_base', this.loadRequest(base.id, base.path)) : base.engine;
      return { ...base, loraTargets: reply.lora_targets ?? {} };
    });
  }

  private requireEngines(): RuntimeEngines {
    if (!this.engines)
      throw new AppError(
        'engine_unavailable',
        'This server runs without an engine (ENGINE=off): chat completions and training are unavailable',
      );
    return this.engines;
  }

  private loadRequest(base: string, folder: string): LoadBaseRequest {
    return { base, path: folder, ...(this.dtype ? { dtype: this.dtype } : {}) };
  }

  private async loadOnce(baseId: string): Promise<LoadedBase> {
    const spec = this.registry.find(baseId);
    if (!spec) throw new AppError('not_found', `Base model ${baseId} is not available on this server`);
    const engine = this.sampler();
    const tokenizer = await loadTokenizer(spec.path);
    const toolFormat = toolFormatOf(spec, tokenizer);
    const loaded = await engine.request('load_base', this.loadRequest(spec.id, spec.path));
    const generation = await readGenerationDefaults(spec.path, tokenizer);
    const markers = markerSyntax((marker) => tokenizer.addedTokenIds.get(marker));
    return {
      id: spec.id,
      path: spec.path,
      tokenizer,
      template: tokenizer.chatTemplate,
      engine: loaded,
      generation,
      toolFormat,
      markers,
    };
  }
}

/** One promise per key; a failed one is forgotten so the next call tries again. */
function cached<T>(map: Map<string, Promise<T>>, key: string, make: () => Promise<T>): Promise<T> {
  let entry = map.get(key);
  if (!entry) {
    entry = make();
    map.set(key, entry);
    entry.catch(() => map.delete(key));
  }
  return entry;
}

/** The operator's choice for the base (TOOL_CALL_PARSERS), else what its chat template writes. */
function toolFormatOf(spec: BaseModelSpec, tokenizer: ChatTokenizer): ToolCallFormat {
  return TOOL_CALL_FORMATS[spec.toolCallParser ?? detectToolParser(tokenizer.chatTemplate)];
}
