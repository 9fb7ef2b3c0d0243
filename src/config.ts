/**
 * Environment → typed configuration. Every bad variable is reported in one error,
 * so an operator fixes a deployment in one pass instead of one variable per restart.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { isToolParserName, TOOL_PARSER_NAMES, type ToolParserName } from './chat/tool-calls/index.ts';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

export interface BaseModelSpec {
  id: string;
  path: string;
  /** The tool-call parser named for this base in `TOOL_CALL_PARSERS`; absent: detected from its chat template. */
  toolCallParser?: ToolParserName;
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
}

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
  applyToolCallParsers(read('TOOL_CALL_PARSERS'), baseModels, problems);
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
  const engine = read('ENGINE') ?? 'on';
  if (engine !== 'on' && engine !== 'off') problems.push(`ENGINE=${JSON.stringify(engine)}: expected on or off`);

  if (problems.length > 0) throw new ConfigError(problems);
  return {
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
  };
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

/** `TOOL_CALL_PARSERS` is a comma-separated list of `base-id=parser`, overriding what the chat template suggests. */
function applyToolCallParsers(raw: string | undefined, models: BaseModelSpec[], problems: string[]): void {
  for (const entry of (raw ?? '').split(',').map((part) => part.trim()).filter(Boolean)) {
    const separator = entry.lastIndexOf('=');
    const [id, parser] = [entry.slice(0, separator), entry.slice(separator + 1)];
    const model = models.find((candidate) => candidate.id === id);
    if (separator <= 0 || !isToolParserName(parser)) {
      problems.push(`TOOL_CALL_PARSERS entry ${JSON.stringify(entry)}: expected base-id=parser with parser one of ${TOOL_PARSER_NAMES.join(', ')}`);
    } else if (!model) {
      problems.push(`TOOL_CALL_PARSERS entry ${JSON.stringify(entry)}: ${JSON.stringify(id)} is not one of BASE_MODELS`);
    } else {
      model.toolCallParser = parser;
    }
  }
}
