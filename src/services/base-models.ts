/** The base models this server can load: configured ids mapped to HF-format folders on disk, and the built-in ones. */
import fs from 'node:fs';
import path from 'node:path';
import type { ToolParserName } from '../conversation/tool-calls/index.ts';
import type { EngineSupport, Implementation } from '../engine/protocol.ts';
import { repoRoot } from '../repo-root.ts';

export interface BaseModelSpec {
  id: string;
  path: string;
  /** The tool-call parser named for this base in `TOOL_CALL_PARSERS`; absent: detected from its chat template. */
  toolCallParser?: ToolParserName;
  /**
   * Other names clients may give this base wherever they name one (its Hugging Face repository first, which
   * tokenizer lookups can fetch): built in, and added by `BASE_MODEL_ALIASES`. What is stored is always `id`.
   */
  aliases?: string[];
}

/** SmolLM2-135M-Instruct, converted from its GGUF by `scripts/install.sh`: what `npm start` serves by default. */
export const SMOLLM2_BASE_MODEL: BaseModelSpec = {
  id: 'builtin/smollm2-135m-instruct',
  path: path.join(repoRoot, 'models', 'smollm2-135m-instruct'),
  aliases: ['HuggingFaceTB/SmolLM2-135M-Instruct'],
};

/** The 2M-parameter synthetic model built from `models/recipe/`: what the tests run on, for speed. */
export const BUILTIN_BASE_MODEL: BaseModelSpec = {
  id: 'builtin/tiny-chat',
  path: path.join(repoRoot, 'models', 'tiny-chat'),
};

/** The base models served when `BASE_MODELS` is unset; the first is the default. */
export const BUILTIN_BASE_MODELS: readonly BaseModelSpec[] = [SMOLLM2_BASE_MODEL, BUILTIN_BASE_MODEL];

/** The RoPE scaling type a config.json asks for (`default`: none): `rope_scaling`, or transformers 5's `rope_parameters`. */
function ropeType(config: Record<string, unknown>): string {
  const rope = (config.rope_parameters ?? config.rope_scaling ?? null) as Record<string, unknown> | null;
  if (rope === null || typeof rope !== 'object') return 'default';
  if (
    !('rope_theta' in rope) &&
    Object.values(rope).length > 0 &&
    Object.values(rope).every((v) => v && typeof v === 'object')
  )
    return [...new Set(Object.values(rope).map((v) => String((v as Record<string, unknown>).rope_type ?? 'default')))]
      .sort()
      .join(',');
  return String(rope.rope_type ?? rope.type ?? 'default');
}

/** Why our own implementation cannot run this config.json, or null when it can. */
function oursProblem(config: Record<string, unknown>, support: EngineSupport): string | null {
  const modelType = config.model_type;
  if (typeof modelType !== 'string' || !support.model_types.includes(modelType))
    return `model_type ${JSON.stringify(modelType ?? null)} is not one of ours (${support.model_types.join(', ')})`;
  const architectures = Array.isArray(config.architectures) ? (config.architectures as unknown[]) : [];
  const unknown = architectures.filter((name) => typeof name !== 'string' || !support.architectures.includes(name));
  if (unknown.length > 0) return `architecture ${JSON.stringify(unknown)} is not one of ours`;
  const rope = ropeType(config);
  if (!support.rope_types.includes(rope))
    return `rope_scaling type ${JSON.stringify(rope)} is not one of ours (${support.rope_types.join(', ')})`;
  return null;
}

/** Why transformers' modeling code on our engine cannot run this config.json, or null when it can. */
function transformersProblem(config: Record<string, unknown>, support: EngineSupport): string {
  const theirs = support.transformers;
  if (!theirs) return 'the engine has no transformers to fall back on';
  const modelType = String(config.model_type ?? null);
  const causal = theirs.causal_lm[modelType];
  if (!causal) return `model_type ${JSON.stringify(modelType)} is not a causal LM transformers ${theirs.version} knows`;
  const other = (Array.isArray(config.architectures) ? config.architectures : []).filter((name) => name !== causal);
  if (other.length > 0) return `architecture ${JSON.stringify(other)} is not ${causal}, the causal LM of ${modelType}`;
  const text = (config.text_config ?? config) as Record<string, unknown>;
  const layers = Array.isArray(text.layer_types) ? (text.layer_types as unknown[]) : [];
  const recurrent = [...new Set(layers.filter((kind) => !theirs.attention_layer_types.includes(String(kind))))];
  if (recurrent.length > 0)
    return `its layer types ${JSON.stringify(recurrent)} keep a recurrent state, which this engine's KV cache cannot hold`;
  const unknownRope = ropeType(text)
    .split(',')
    .filter((kind) => !theirs.rope_types.includes(kind));
  if (unknownRope.length > 0)
    return `rope_scaling types ${JSON.stringify(unknownRope)} are not ones transformers ${theirs.version} knows`;
  return '';
}

/**
 * Which implementation of an engine announcing `support` runs a model with this config.json (ours where we have the
 * family, else transformers' modeling code), or why neither can: the same order engine/server.py's load_model tries.
 */
export function implementationFor(
  config: Record<string, unknown>,
  support: EngineSupport,
): { implementation: Implementation } | { problem: string } {
  const ours = oursProblem(config, support);
  if (ours === null) return { implementation: 'ours' };
  const theirs = transformersProblem(config, support);
  if (theirs === '') return { implementation: 'transformers' };
  return { problem: `no implementation of the engine can load it: ours: ${ours}; transformers: ${theirs}` };
}

/** Why an engine announcing `support` cannot run a model with this config.json, or null when it can. */
export function architectureProblem(config: Record<string, unknown>, support: EngineSupport): string | null {
  const chosen = implementationFor(config, support);
  return 'problem' in chosen ? chosen.problem : null;
}

export class BaseModelRegistry {
  constructor(
    private readonly models: BaseModelSpec[],
    readonly defaultId: string,
    /** What the engine announced it runs; null where no engine runs here (nothing to run a model, nothing to ask). */
    private readonly engineSupport: (() => Promise<EngineSupport>) | null = null,
  ) {}

  /** The ids whose folders hold a loadable model right now. */
  loadableIds(): string[] {
    return this.models.filter((model) => isModelFolder(model.path)).map((model) => model.id);
  }

  find(id: string): BaseModelSpec | undefined {
    const model = this.models.find((candidate) => candidate.id === id);
    return model && isModelFolder(model.path) ? model : undefined;
  }

  /** The loadable base a client's name means: its id or one of its aliases (e.g. its Hugging Face repository). */
  resolve(name: string): BaseModelSpec | undefined {
    const model = this.models.find((candidate) => candidate.id === name || candidate.aliases?.includes(name));
    return model && isModelFolder(model.path) ? model : undefined;
  }

  /** Why the engine could not run this base (its config.json read now), or null when it can (or no engine is here to say). */
  async architectureProblem(model: BaseModelSpec): Promise<string | null> {
    const config = readModelConfig(model.path);
    if (typeof config === 'string') return config;
    return this.engineSupport ? architectureProblem(config, await this.engineSupport()) : null;
  }

  /** Which implementation the engine would run this base with, as its announcement says; null where it cannot say. */
  async implementation(id: string): Promise<Implementation | null> {
    const config = this.modelConfig(id);
    if (!config || !this.engineSupport) return null;
    const chosen = implementationFor(config, await this.engineSupport());
    return 'implementation' in chosen ? chosen.implementation : null;
  }

  /** The HF `config.json` of a loadable base, or null when there is no such base or it cannot be read. */
  modelConfig(id: string): Record<string, unknown> | null {
    const model = this.find(id);
    const config = model ? readModelConfig(model.path) : null;
    return typeof config === 'string' ? null : config;
  }
}

/** A model folder's config.json as an object, or why it cannot be read as one. */
function readModelConfig(folder: string): Record<string, unknown> | string {
  let config: unknown;
  try {
    config = JSON.parse(fs.readFileSync(path.join(folder, 'config.json'), 'utf8'));
  } catch (error) {
    return `its config.json cannot be read: ${(error as Error).message}`;
  }
  if (!config || typeof config !== 'object' || Array.isArray(config)) return 'its config.json is not a JSON object';
  return config as Record<string, unknown>;
}

function isModelFolder(folder: string): boolean {
  return fs.existsSync(path.join(folder, 'config.json'));
}
