/**
 * The vLLM sampler's configuration, read from the environment beside config.ts's engine topology:
 * which sampler engine kind serves each base model, the vLLM servers the operator runs, and how a vLLM we start
 * is started. It knows nothing of the other engine variables.
 */

export type SamplerEngineKind = 'ours' | 'vllm';

export interface VllmConfig {
  /** `SAMPLER_ENGINE`: the sampler of bases without an override (ours unless a vLLM URL is given). */
  defaultEngine: SamplerEngineKind;
  /** `SAMPLER_ENGINES=base-id=vllm,other=ours`: per-base overrides. */
  perBase: Record<string, SamplerEngineKind>;
  /** The `vllm+http(s)://host:port` entries of `SAMPLER_URLS`, as plain http(s) URLs: vLLM servers the operator runs. */
  urls: string[];
  /** `VLLM_API_KEY`: the key those servers (and the ones we start) want as a bearer token. */
  apiKey: string | null;
  /** `VLLM_PYTHON`: the Python whose vllm we start (default: the repository's `.venv-vllm`). */
  python: string | null;
  /** `VLLM_MAX_LORA_RANK`: the largest adapter rank a vLLM we start accepts. */
  maxLoraRank: number;
  /** `VLLM_MAX_LORAS`: adapters in one batch of a vLLM we start. */
  maxLoras: number;
  /** `VLLM_MAX_ADAPTERS`: adapters kept loaded per vLLM server (our LRU; ours keeps 32 per engine). */
  maxAdapters: number;
  /** `VLLM_ARGS`: further command-line arguments for a vLLM we start (space-separated; later ones win). */
  extraArgs: string[];
}

const KINDS: SamplerEngineKind[] = ['ours', 'vllm'];
const VLLM_URL_PATTERN = /^vllm\+(https?:\/\/[^\s/]+(:\d{1,5})?)\/?$/;
const LORA_RANKS = [1, 8, 16, 32, 64, 128, 256, 320, 512];

/** A `SAMPLER_URLS` entry that names a vLLM server (the rest are our engines' `tcp://` URLs). */
export const isVllmUrl = (url: string) => url.startsWith('vllm+');

type Read = (name: string) => string | undefined;
type ReadInteger = (name: string, fallback: number, min: number, max: number) => number;

export function parseVllmConfig(read: Read, integer: ReadInteger, problems: string[]): VllmConfig {
  const urls: string[] = [];
  for (const entry of (read('SAMPLER_URLS') ?? '')
    .split(',')
    .map((part) => part.trim())
    .filter(isVllmUrl)) {
    const match = VLLM_URL_PATTERN.exec(entry);
    if (match) urls.push(match[1]);
    else problems.push(`SAMPLER_URLS: ${JSON.stringify(entry)} is not vllm+http://host:port`);
  }
  const kind = (name: string, value: string): SamplerEngineKind => {
    if (!KINDS.includes(value as SamplerEngineKind))
      problems.push(`${name}=${JSON.stringify(value)}: expected ours or vllm`);
    return value === 'vllm' ? 'vllm' : 'ours';
  };
  const defaultEngine = kind('SAMPLER_ENGINE', read('SAMPLER_ENGINE') ?? (urls.length > 0 ? 'vllm' : 'ours'));
  const perBase: Record<string, SamplerEngineKind> = {};
  for (const entry of (read('SAMPLER_ENGINES') ?? '')
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean)) {
    const separator = entry.lastIndexOf('=');
    if (separator <= 0)
      problems.push(`SAMPLER_ENGINES entry ${JSON.stringify(entry)}: expected base-id=ours or base-id=vllm`);
    else
      perBase[entry.slice(0, separator)] = kind(
        `SAMPLER_ENGINES entry ${entry.slice(0, separator)}`,
        entry.slice(separator + 1),
      );
  }
  const maxLoraRank = integer('VLLM_MAX_LORA_RANK', 64, 1, 512);
  if (!LORA_RANKS.includes(maxLoraRank))
    problems.push(`VLLM_MAX_LORA_RANK=${maxLoraRank}: vLLM accepts ${LORA_RANKS.join(', ')}`);
  const maxAdapters = integer('VLLM_MAX_ADAPTERS', 32, 1, 4096);
  return {
    defaultEngine,
    perBase,
    urls,
    apiKey: read('VLLM_API_KEY') ?? null,
    python: read('VLLM_PYTHON') ?? null,
    maxLoraRank,
    maxLoras: Math.min(integer('VLLM_MAX_LORAS', 4, 1, 256), maxAdapters),
    maxAdapters,
    extraArgs: (read('VLLM_ARGS') ?? '').split(/\s+/).filter(Boolean),
  };
}

/** The sampler engine kind that serves a base. */
export function samplerKindOf(config: VllmConfig, baseId: string): SamplerEngineKind {
  return config.perBase[baseId] ?? config.defaultEngine;
}
