/** The base models this server can load: configured ids mapped to HF-format folders on disk, and the built-in ones. */
import fs from 'node:fs';
import path from 'node:path';
import type { ToolParserName } from '../conversation/tool-calls/index.ts';
import type { EngineSupport } from '../engine/protocol.ts';
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

/** Why an engine announcing `support` cannot run a model with this config.json, or null when it can. */
export function architectureProblem(config: Record<string, unknown>, support: EngineSupport): string | null {
  const supported = `supported: model_type ${support.model_types.join(', ')} (${support.architectures.join(', ')})`;
  const modelType = config.model_type;
  if (typeof modelType !== 'string' || !support.model_types.includes(modelType)) {
    return `its architecture (model_type ${JSON.stringify(modelType ?? null)}) is not supported; ${supported}`;
  }
  const architectures = Array.isArray(config.architectures) ? (config.architectures as unknown[]) : [];
  const unknown = architectures.filter((name) => typeof name !== 'string' || !support.architectures.includes(name));
  if (unknown.length > 0) return `its architecture ${JSON.stringify(unknown)} is not supported; ${supported}`;
  const rope = (config.rope_scaling ?? null) as { rope_type?: unknown; type?: unknown } | null;
  const ropeType = rope === null ? 'default' : (rope.rope_type ?? rope.type ?? 'default');
  if (typeof ropeType !== 'string' || !support.rope_types.includes(ropeType)) {
    return `its rope_scaling type ${JSON.stringify(ropeType)} is not supported; supported: ${support.rope_types.join(', ')}`;
  }
  return null;
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
