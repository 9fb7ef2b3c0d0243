/**
 * Environment → typed configuration. Every bad variable is reported in one error,
 * so an operator fixes a deployment in one pass instead of one variable per restart.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkPolicy, type RetentionPolicy } from './services/retention.ts';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

export interface BaseModelSpec {
  id: string;
  path: string;
}

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
  /** Checkpoint retention of models that set none (RETENTION_KEEP_LAST, RETENTION_KEEP_BEST, RETENTION_BEST_METRIC, RETENTION_BEST_MODE). */
  retention: RetentionPolicy;
  /** `/metrics` answers without an API key (for a Prometheus that scrapes without one); off by default. */
  metricsPublic: boolean;
}

type HttpLimits = Pick<Config, 'headersTimeoutMs' | 'bodyIdleTimeoutMs' | 'requestTimeoutMs' | 'keepAliveTimeoutMs' | 'maxConnections' | 'maxConnectionsPerClient'>;

export const BUILTIN_BASE_MODEL: BaseModelSpec = {
  id: 'builtin/tiny-chat',
  path: path.join(repoRoot, 'models', 'tiny-chat'),
};

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n  ${problems.join('\n  ')}`);
  }
}

const LOG_LEVELS: LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
const API_KEY_PATTERN = /^sk-[A-Za-z0-9_-]{20,}$/;

type Env = Record<string, string | undefined>;

export function loadConfig(env: Env = process.env): Config {
  const problems: string[] = [];
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

  const port = integer('PORT', 8000, 0, 65535);
  const bodyLimitBytes = integer('BODY_LIMIT_BYTES', 256 * 1024 * 1024, 1024, 8 * 1024 * 1024 * 1024);

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

  const baseModels = parseBaseModels(read('BASE_MODELS'), problems);
  const defaultBaseModel = read('DEFAULT_BASE_MODEL') ?? baseModels[0]?.id ?? BUILTIN_BASE_MODEL.id;
  if (!baseModels.some((model) => model.id === defaultBaseModel)) {
    problems.push(`DEFAULT_BASE_MODEL=${JSON.stringify(defaultBaseModel)}: not one of BASE_MODELS`);
  }

  const maxCompletionTokens = integer('MAX_COMPLETION_TOKENS', 4096, 1, 1 << 24);
  const jobLeaseMs = integer('JOB_LEASE_MS', 20_000, 1000, 3_600_000);
  const maxInFlightChat = integer('MAX_INFLIGHT_CHAT', 256, 1, 100_000);
  const artifactMaxFileBytes = integer('ARTIFACT_MAX_FILE_BYTES', 1024 * 1024 * 1024, 1, Number.MAX_SAFE_INTEGER);
  const logprobsByDefault = read('LOGPROBS_BY_DEFAULT') ?? 'on';
  if (logprobsByDefault !== 'on' && logprobsByDefault !== 'off') problems.push(`LOGPROBS_BY_DEFAULT=${JSON.stringify(logprobsByDefault)}: expected on or off`);
  const metricsPublic = read('METRICS_PUBLIC') ?? 'off';
  if (metricsPublic !== 'on' && metricsPublic !== 'off') problems.push(`METRICS_PUBLIC=${JSON.stringify(metricsPublic)}: expected on or off`);
  const engine = read('ENGINE') ?? 'on';
  if (engine !== 'on' && engine !== 'off') problems.push(`ENGINE=${JSON.stringify(engine)}: expected on or off`);

  const httpLimits = readHttpLimits(integer, problems);
  const retention = readRetention(read, integer, problems);

  if (problems.length > 0) throw new ConfigError(problems);
  return {
    ...httpLimits,
    port,
    host: read('HOST') ?? '127.0.0.1',
    dataDir: path.resolve(read('DATA_DIR') ?? './data'),
    databaseUrl,
    bootstrapApiKey,
    bodyLimitBytes,
    logLevel,
    baseModels,
    defaultBaseModel,
    enginePython: read('ENGINE_PYTHON') ?? null,
    engineEnabled: engine === 'on',
    logprobsByDefault: logprobsByDefault === 'on',
    maxCompletionTokens,
    jobLeaseMs,
    artifactMaxFileBytes,
    maxInFlightChat,
    metricsPublic: metricsPublic === 'on',
    retention,
  };
}

/** The server's default retention policy; unset variables keep every checkpoint. */
function readRetention(read: (name: string) => string | undefined, integer: (name: string, fallback: number, min: number, max: number) => number, problems: string[]): RetentionPolicy {
  const optional = (name: string) => (read(name) === undefined ? null : integer(name, 1, 0, 1_000_000));
  const mode = read('RETENTION_BEST_MODE') ?? 'max';
  if (mode !== 'max' && mode !== 'min') problems.push(`RETENTION_BEST_MODE=${JSON.stringify(mode)}: expected max or min`);
  const policy: RetentionPolicy = { keep_last: optional('RETENTION_KEEP_LAST'), keep_best: optional('RETENTION_KEEP_BEST'), best_metric: read('RETENTION_BEST_METRIC') ?? null, best_mode: mode === 'min' ? 'min' : 'max' };
  for (const problem of checkPolicy(policy, [])) problems.push(`RETENTION_${String(problem.loc[0]).toUpperCase()}: ${problem.msg}`);
  return policy;
}

/** Timeouts and connection caps: what keeps slow or hostile clients from holding sockets and file descriptors. */
function readHttpLimits(integer: (name: string, fallback: number, min: number, max: number) => number, problems: string[]): HttpLimits {
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
    problems.push(`REQUEST_TIMEOUT_MS=${limits.requestTimeoutMs}: must be 0 or at least HEADERS_TIMEOUT_MS (${limits.headersTimeoutMs})`);
  }
  return limits;
}

/** `BASE_MODELS` is a comma-separated list of `id=folder`; absent means the built-in tiny model alone. */
function parseBaseModels(raw: string | undefined, problems: string[]): BaseModelSpec[] {
  if (raw === undefined) return [BUILTIN_BASE_MODEL];
  const models: BaseModelSpec[] = [];
  for (const entry of raw.split(',').map((part) => part.trim()).filter(Boolean)) {
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
