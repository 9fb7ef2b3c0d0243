/**
 * What it takes to use a base model: its tokenizer and chat template (cached per folder) and its weights
 * loaded in the engine (once per base, on first use). Chat and training both go through here.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { AppError } from '../errors.ts';
import type { Engine } from '../engine/client.ts';
import type { LoadBaseReply } from '../engine/protocol.ts';
import { loadTokenizer, type ChatTokenizer } from '../chat/tokenizer.ts';
import { constraintTokenBytes } from '../chat/constraints/vocabulary.ts';
import type { BaseModelRegistry } from './base-models.ts';

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
  const eosIds = (Array.isArray(eos) ? eos : eos === undefined ? [] : [eos]).filter((id): id is number => Number.isInteger(id));
  if (tokenizer.eosTokenId !== undefined && !eosIds.includes(tokenizer.eosTokenId)) eosIds.unshift(tokenizer.eosTokenId);
  return {
    temperature: number('temperature'),
    top_p: number('top_p'),
    top_k: number('top_k'),
    min_p: number('min_p'),
    repetition_penalty: number('repetition_penalty'),
    eos_token_ids: eosIds,
  };
}

export class BaseModelRuntime {
  private readonly loading = new Map<string, Promise<LoadedBase>>();

  constructor(
    private readonly registry: BaseModelRegistry,
    private readonly engine: Engine | null,
  ) {}

  /** The engine, or a clear 503 when this server runs without one. */
  requireEngine(): Engine {
    if (!this.engine) throw new AppError('engine_unavailable', 'This server runs without an engine (ENGINE=off): chat completions and training are unavailable');
    return this.engine;
  }

  /** The vocabulary size from the tokenizer alone (no engine needed), or null when it cannot be read. */
  async vocabularySize(baseId: string): Promise<number | null> {
    const spec = this.registry.find(baseId);
    if (!spec) return null;
    try {
      return (await loadTokenizer(spec.path)).vocabSize;
    } catch {
      return null; // the job reports the unreadable tokenizer when it runs
    }
  }

  load(baseId: string): Promise<LoadedBase> {
    let entry = this.loading.get(baseId);
    if (!entry) {
      entry = this.loadOnce(baseId);
      this.loading.set(baseId, entry);
      entry.catch(() => this.loading.delete(baseId));
    }
    return entry;
  }

  private async loadOnce(baseId: string): Promise<LoadedBase> {
    const spec = this.registry.find(baseId);
    if (!spec) throw new AppError('not_found', `Base model ${baseId} is not available on this server`);
    const engine = this.requireEngine();
    // The engine needs the token bytes to apply constraints; the supervisor re-sends them after a restart.
    const tokenizer = await loadTokenizer(spec.path);
    const loaded = await engine.loadBase({ base: spec.id, path: spec.path, token_bytes: constraintTokenBytes(tokenizer) });
    const generation = await readGenerationDefaults(spec.path, tokenizer);
    return { id: spec.id, path: spec.path, tokenizer, template: tokenizer.chatTemplate, engine: loaded, generation };
  }
}
