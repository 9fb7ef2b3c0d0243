/**
 * Environment → typed configuration. Every bad variable is reported in one error,
 * so an operator fixes a deployment in one pass instead of one variable per restart.
 */
import path from 'node:path';
import { parseEngineTopology, parseServingLimits } from './config-engines.ts';
import { isToolParserName, TOOL_PARSER_NAMES } from './conversation/tool-calls/index.ts';
import type { EngineTopology, ServingLimits } from './engine/settings.ts';
import { parseVllmConfig, type VllmConfig } from './engine/vllm/config.ts';
import { type BaseModelSpec, BUILTIN_BASE_MODELS, SMOLLM2_BASE_MODEL } from './services/base-models.ts';
import { checkPolicy, type RetentionPolicy } from './services/retention-policy.ts';

export { repoRoot } from './repo-root.ts';
// The catalogue of built-in bases and the checkout's root have homes of their own; they are re-exported here because
// tests and benches configure a server with them beside loadConfig.
export { BUILTIN_BASE_MODEL, SMOLLM2_BASE_MODEL } from './services/base-models.ts';

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

export interface Config {
  port: number;
  host: string;
  dataDir: string;
  databaseUrl: string | null;
  bootstrapApiKey: string | null;
  bodyLimitBytes: number;
  logLevel: LogLevel;
  baseModels: BaseModelSpec[];
  defaultBaseModel: string;
  enginePython: string | null;
  engineEnabled: boolean;
  /** Chat requests that leave `logprobs` unset get them (as `token_id:<id>`), because ART trains only on those. */
  logprobsByDefault: boolean;
  /** Most tokens a chat completion generates when the request sets no max_tokens. */
  maxCompletionTokens: number;
  /** A running job whose worker has not renewed its lease for this long is failed by the reaper. */
  jobLeaseMs: number;
  /** Largest file an artifact upload may hold. */
  artifactMaxFileBytes: number;
  /** Chat requests in flight beyond which new ones get 429 with retry-after. */
  maxInFlightChat: number;
  /** A request's headers must all arrive within this long (408 otherwise). */
  headersTimeoutMs: number;
  /** A request whose body stops arriving for this long is answered 408 and closed; a body that keeps coming is never cut. */
  bodyIdleTimeoutMs: number;
  /** The whole request must arrive within this long (0: no limit); bounds a body trickled a byte at a time. */
  requestTimeoutMs: number;
  /** An idle keep-alive connection is closed after this long. */
  keepAliveTimeoutMs: number;
  /** Open connections beyond which new ones are closed at once. */
  maxConnections: number;
  /** Open connections one client address may hold. */
  maxConnectionsPerClient: number;
  /** A `chat_template` in a chat request is user code: rendered (in a budgeted worker) only when the operator trusts it. */
  trustRequestChatTemplate: boolean;
  /** Which engine processes serve and train, and where they run. */
  engines: EngineTopology;
  /** vLLM-named limits every sampling engine started by this server runs with. */
  serving: ServingLimits;
  /** Which sampler engine kind serves each base, and the vLLM servers (src/engine/vllm/config.ts). */
  vllm: VllmConfig;
  /** Checkpoint retention of models that set none (RETENTION_KEEP_LAST, RETENTION_KEEP_BEST, RETENTION_BEST_METRIC, RETENTION_BEST_MODE). */
  retention: RetentionPolicy;
  /** `/metrics` answers without an API key (for a Prometheus that scrapes without one); off by default. */
  metricsPublic: boolean;
}

/** What a slow or hostile client may hold (src/http/transport.ts enforces them). */
export type HttpLimits = Pick<
  Config,
  | 'headersTimeoutMs'
  | 'bodyIdleTimeoutMs'
  | 'requestTimeoutMs'
  | 'keepAliveTimeoutMs'
  | 'maxConnections'
  | 'maxConnectionsPerClient'
>;

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n  ${problems.join('\n  ')}`);
  }
}

const LOG_LEVELS: LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
const API_KEY_PATTERN = /^sk-[A-Za-z0-9_-]{20,}$/;

type Env = Record<string, string | undefined>;

/** Reads variables, collecting every problem (so one error names them all) and answering the fallback for a bad one. */
function envReader(env: Env, problems: string[]) {
  const read = (name: string): string | undefined => {
    const value = env[name];
    return value === undefined || value === '' ? undefined : value;
  };
  const integer = (name: string, fallback: number, min: number, max: number): number => {
    const raw = read(name);
    if (raw === undefined) return fallback;
    const value = Number(raw);
    if (!Number.isInteger(value) || value < min || value > max) {
      problems.push(`${name}=${JSON.stringify(raw)}: expected an integer from ${min} to ${max}`);
      return fallback;
    }
    return value;
  };
  const onOff = (name: string, fallback: 'on' | 'off'): boolean => {
    const value = read(name) ?? fallback;
    if (value !== 'on' && value !== 'off') problems.push(`${name}=${JSON.stringify(value)}: expected on or off`);
    return value === 'on';
  };
  return { read, integer, onOff, problems };
}

type EnvReader = ReturnType<typeof envReader>;

function readServer({
  read,
  integer,
  problems,
}: EnvReader): Pick<
  Config,
  'port' | 'host' | 'dataDir' | 'bodyLimitBytes' | 'logLevel' | 'databaseUrl' | 'bootstrapApiKey'
> {
  const port = integer('PORT', 8000, 0, 65535);
  // JSON.parse of the body holds the event loop: 80 MB held it ~0.9 s under load (fuzz), so 64 MiB keeps health under 1 s.
  const bodyLimitBytes = integer('BODY_LIMIT_BYTES', 64 * 1024 * 1024, 1024, 8 * 1024 * 1024 * 1024);
  const logLevel = (read('LOG_LEVEL') ?? 'info') as LogLevel;
  if (!LOG_LEVELS.includes(logLevel)) {
    problems.push(`LOG_LEVEL=${JSON.stringify(logLevel)}: expected one of ${LOG_LEVELS.join(', ')}`);
  }
  const databaseUrl = read('DATABASE_URL') ?? null;
  if (databaseUrl !== null && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    problems.push(`DATABASE_URL: expected a postgres:// or postgresql:// URL (leave it unset for SQLite)`);
  }
  const bootstrapApiKey = read('BOOTSTRAP_API_KEY') ?? null;
  if (bootstrapApiKey !== null && !API_KEY_PATTERN.test(bootstrapApiKey)) {
    problems.push('BOOTSTRAP_API_KEY: expected "sk-" followed by at least 20 letters, digits, "-" or "_"');
  }
  return {
    port,
    host: read('HOST') ?? '127.0.0.1',
    dataDir: path.resolve(read('DATA_DIR') ?? './data'),
    bodyLimitBytes,
    logLevel,
    databaseUrl,
    bootstrapApiKey,
  };
}

function readBaseModels({ read, problems }: EnvReader): Pick<Config, 'baseModels' | 'defaultBaseModel'> {
  const baseModels = parseBaseModels(read('BASE_MODELS'), problems);
  applyToolCallParsers(read('TOOL_CALL_PARSERS'), baseModels, problems);
  applyBaseModelAliases(read('BASE_MODEL_ALIASES'), baseModels, problems);
  const defaultBaseModel = read('DEFAULT_BASE_MODEL') ?? baseModels[0]?.id ?? SMOLLM2_BASE_MODEL.id;
  if (!baseModels.some((model) => model.id === defaultBaseModel)) {
    problems.push(`DEFAULT_BASE_MODEL=${JSON.stringify(defaultBaseModel)}: not one of BASE_MODELS`);
  }
  return { baseModels, defaultBaseModel };
}

export function loadConfig(env: Env = process.env): Config {
  const problems: string[] = [];
  const reader = envReader(env, problems);
  const { read, integer, onOff } = reader;
  const server = readServer(reader);
  const models = readBaseModels(reader);
  const limits = {
    maxCompletionTokens: integer('MAX_COMPLETION_TOKENS', 4096, 1, 1 << 24),
    jobLeaseMs: integer('JOB_LEASE_MS', 20_000, 1000, 3_600_000),
    maxInFlightChat: integer('MAX_INFLIGHT_CHAT', 256, 1, 100_000),
    artifactMaxFileBytes: integer('ARTIFACT_MAX_FILE_BYTES', 1024 * 1024 * 1024, 1, Number.MAX_SAFE_INTEGER),
  };
  const switches = {
    logprobsByDefault: onOff('LOGPROBS_BY_DEFAULT', 'on'),
    trustRequestChatTemplate: onOff('TRUST_REQUEST_CHAT_TEMPLATE', 'off'),
    metricsPublic: onOff('METRICS_PUBLIC', 'off'),
    engineEnabled: onOff('ENGINE', 'on'),
  };
  const httpLimits = readHttpLimits(integer, problems);
  const engines = parseEngineTopology(read, integer, problems);
  const serving = parseServingLimits(read, integer, problems);
  const retention = readRetention(read, integer, problems);
  const vllm = parseVllmConfig(read, integer, problems);
  for (const id of Object.keys(vllm.perBase))
    if (!models.baseModels.some((model) => model.id === id))
      problems.push(`SAMPLER_ENGINES: ${JSON.stringify(id)} is not one of BASE_MODELS`);
  if (problems.length > 0) throw new ConfigError(problems);
  return {
    ...httpLimits,
    ...server,
    ...models,
    ...limits,
    ...switches,
    enginePython: read('ENGINE_PYTHON') ?? null,
    engines,
    serving,
    retention,
    vllm,
  };
}

/** `serve` flags that stand for an environment variable (a flag wins over the variable). */
export const SERVE_FLAGS = {
  engines: 'ENGINES',
  samplers: 'SAMPLERS',
  'max-model-len': 'MAX_MODEL_LEN',
  'max-num-seqs': 'MAX_NUM_SEQS',
  'max-num-batched-tokens': 'MAX_NUM_BATCHED_TOKENS',
  'kv-cache-memory-bytes': 'KV_CACHE_MEMORY_BYTES',
  dtype: 'DTYPE',
} as const;

/** The environment with the given `serve` flags applied over it. */
export function withServeFlags(env: Env, flags: Partial<Record<keyof typeof SERVE_FLAGS, string>>): Env {
  const applied = { ...env };
  for (const [flag, name] of Object.entries(SERVE_FLAGS)) {
    const value = flags[flag as keyof typeof SERVE_FLAGS];
    if (value !== undefined) applied[name] = value;
  }
  return applied;
}

/** The server's default retention policy; unset variables keep every checkpoint. */
function readRetention(
  read: (name: string) => string | undefined,
  integer: (name: string, fallback: number, min: number, max: number) => number,
  problems: string[],
): RetentionPolicy {
  const optional = (name: string) => (read(name) === undefined ? null : integer(name, 1, 0, 1_000_000));
  const mode = read('RETENTION_BEST_MODE') ?? 'max';
  if (mode !== 'max' && mode !== 'min')
    problems.push(`RETENTION_BEST_MODE=${JSON.stringify(mode)}: expected max or min`);
  const policy: RetentionPolicy = {
    keep_last: optional('RETENTION_KEEP_LAST'),
    keep_best: optional('RETENTION_KEEP_BEST'),
    best_metric: read('RETENTION_BEST_METRIC') ?? null,
    best_mode: mode === 'min' ? 'min' : 'max',
  };
  for (const problem of checkPolicy(policy, []))
    problems.push(`RETENTION_${String(problem.loc[0]).toUpperCase()}: ${problem.msg}`);
  return policy;
}

/** Timeouts and connection caps: what keeps slow or hostile clients from holding sockets and file descriptors. */
function readHttpLimits(
  integer: (name: string, fallback: number, min: number, max: number) => number,
  problems: string[],
): HttpLimits {
  const hour = 3_600_000;
  const limits: HttpLimits = {
    headersTimeoutMs: integer('HEADERS_TIMEOUT_MS', 30_000, 50, hour),
    bodyIdleTimeoutMs: integer('BODY_IDLE_TIMEOUT_MS', 60_000, 50, hour),
    requestTimeoutMs: integer('REQUEST_TIMEOUT_MS', hour, 0, 24 * hour),
    keepAliveTimeoutMs: integer('KEEP_ALIVE_TIMEOUT_MS', 72_000, 50, hour),
    maxConnections: integer('MAX_CONNECTIONS', 10_000, 1, 1_000_000),
    maxConnectionsPerClient: integer('MAX_CONNECTIONS_PER_CLIENT', 1_000, 1, 1_000_000),
  };
  // Node refuses a headers timeout longer than the whole-request timeout.
  if (limits.requestTimeoutMs > 0 && limits.requestTimeoutMs < limits.headersTimeoutMs) {
    problems.push(
      `REQUEST_TIMEOUT_MS=${limits.requestTimeoutMs}: must be 0 or at least HEADERS_TIMEOUT_MS (${limits.headersTimeoutMs})`,
    );
  }
  return limits;
}

/** `BASE_MODELS` is a comma-separated list of `id=folder`; absent means the built-in models. */
function parseBaseModels(raw: string | undefined, problems: string[]): BaseModelSpec[] {
  // Copies: the settings below add to each spec, and the built-in ones are shared constants.
  if (raw === undefined) return BUILTIN_BASE_MODELS.map((model) => ({ ...model }));
  const models: BaseModelSpec[] = [];
  for (const entry of raw
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean)) {
    const separator = entry.indexOf('=');
    if (separator <= 0 || separator === entry.length - 1) {
      problems.push(`BASE_MODELS entry ${JSON.stringify(entry)}: expected id=folder`);
      continue;
    }
    models.push({ id: entry.slice(0, separator), path: path.resolve(entry.slice(separator + 1)) });
  }
  if (models.length === 0) problems.push('BASE_MODELS: no entries');
  return models;
}

/**
 * `BASE_MODEL_ALIASES` is a comma-separated list of `base-id=name|name…`: more names a base answers to (its Hugging
 * Face repository, say, which clients such as tinker-cookbook's recipes name a model by), beside the ones built in.
 */
function applyBaseModelAliases(raw: string | undefined, models: BaseModelSpec[], problems: string[]): void {
  for (const entry of (raw ?? '')
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean)) {
    const separator = entry.indexOf('=');
    const model = models.find((candidate) => candidate.id === entry.slice(0, separator));
    const names = entry
      .slice(separator + 1)
      .split('|')
      .map((name) => name.trim())
      .filter(Boolean);
    if (separator <= 0 || names.length === 0)
      problems.push(`BASE_MODEL_ALIASES entry ${JSON.stringify(entry)}: expected base-id=name|name…`);
    else if (!model)
      problems.push(
        `BASE_MODEL_ALIASES entry ${JSON.stringify(entry)}: ${JSON.stringify(entry.slice(0, separator))} is not one of BASE_MODELS`,
      );
    else model.aliases = [...(model.aliases ?? []), ...names];
  }
  const seen = new Map<string, string>();
  for (const model of models)
    for (const name of [model.id, ...(model.aliases ?? [])]) {
      const other = seen.get(name);
      if (other !== undefined && other !== model.id)
        problems.push(`BASE_MODEL_ALIASES: ${JSON.stringify(name)} names both ${other} and ${model.id}`);
      seen.set(name, model.id);
    }
}

/** `TOOL_CALL_PARSERS` is a comma-separated list of `base-id=parser`, overriding what the chat template suggests. */
function applyToolCallParsers(raw: string | undefined, models: BaseModelSpec[], problems: string[]): void {
  for (const entry of (raw ?? '')
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean)) {
    const separator = entry.lastIndexOf('=');
    const [id, parser] = [entry.slice(0, separator), entry.slice(separator + 1)];
    const model = models.find((candidate) => candidate.id === id);
    if (separator <= 0 || !isToolParserName(parser)) {
      problems.push(
        `TOOL_CALL_PARSERS entry ${JSON.stringify(entry)}: expected base-id=parser with parser one of ${TOOL_PARSER_NAMES.join(', ')}`,
      );
    } else if (!model) {
      problems.push(
        `TOOL_CALL_PARSERS entry ${JSON.stringify(entry)}: ${JSON.stringify(id)} is not one of BASE_MODELS`,
      );
    } else {
      model.toolCallParser = parser;
    }
  }
}
