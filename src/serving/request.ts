/**
 * The one internal request every door parses its wire shape into, and the checks of the fields the OpenAI-style
 * doors share (api/generation.ts): vLLM's validation rules and messages (400 with the offending `param`), in vLLM's
 * order, keeping what the request left unset as null. `GenerationRequest` is what decides the tokens, whatever the
 * prompt; `ChatRequest` adds the conversation that renders into the prompt (chat/request.ts parses it). Checks that
 * need the model (vocabulary, context length, generation_config.json) belong to the plan (plan.ts).
 */
import type { GenerationFields } from '../api/generation.ts';
import type { RequestedConstraint } from '../constraints/request.ts';
import {
  boundText,
  GREEDY_TEMPERATURE_BELOW,
  SAMPLING_BOUNDS,
  type SamplingBoundName,
  withinBound,
} from '../engine/bounds.ts';
import { GENERATE_DEFAULTS } from '../engine/protocol.ts';
import { badRequest } from '../errors.ts';

export const MAX_LOGPROBS = 20;

export type ToolChoice = 'none' | 'auto' | 'required' | { name: string };

/** The request's own sampling parameters; null where it left one to the model or the engine defaults (sampling.ts). */
export interface RequestedSampling {
  temperature: number | null;
  top_p: number | null;
  top_k: number | null;
  min_p: number | null;
  presence_penalty: number | null;
  frequency_penalty: number | null;
  repetition_penalty: number | null;
  seed: number | null;
  min_tokens: number;
  ignore_eos: boolean;
  stop_token_ids: number[];
  logit_bias: Record<string, number>;
  allowed_token_ids: number[] | null;
}

/** What decides the tokens, whatever the door and the prompt; the plan (plan.ts) adds what the model decides. */
export interface GenerationRequest {
  modelName: string | null;
  stream: boolean;
  includeUsage: boolean;
  continuousUsage: boolean;
  n: number;
  sampling: RequestedSampling;
  badWords: string[];
  stop: string[];
  includeStopStr: boolean;
  skipSpecialTokens: boolean;
  /** null: no logprobs; otherwise the number of top alternatives and the token format. */
  logprobs: { top: number; asTokenIds: boolean } | null;
  promptLogprobs: number | null;
  returnTokenIds: boolean;
  echo: boolean;
  addSpecialTokens: boolean;
  /** What decoding must produce (response_format, structured_outputs, or a forced tool call), still to compile; null for free text. */
  constraint: RequestedConstraint | null;
  requestedMaxTokens: number | null;
  /** The field the request's token budget came in, for the errors that name it. */
  maxTokensParam: string;
  truncatePromptTokens: number | null;
  repetitionDetection: { minPatternSize: number; maxPatternSize: number; minCount: number } | null;
  requestId: string | null;
}

/** A conversation to render with a chat template, and how its answer is read (tool calls, reasoning). */
export interface ChatRequest extends GenerationRequest {
  messages: Record<string, unknown>[];
  tools: Record<string, unknown>[] | null;
  toolChoice: ToolChoice;
  parallelToolCalls: boolean;
  includeReasoning: boolean;
  addGenerationPrompt: boolean;
  continueFinalMessage: boolean;
  chatTemplate: string | null;
  templateKwargs: Record<string, unknown>;
  documents: Record<string, string>[] | null;
}

/** How a chat-shaped door checks a request on this server: its defaults and what the operator allows. */
export interface ParseOptions {
  logprobsByDefault: boolean;
  requestIdHeader: string | undefined;
  /** Whether the operator lets requests bring their own `chat_template` (user code the server would run). */
  requestTemplatesAllowed: boolean;
}

export const isTruthyObject = (value: unknown) =>
  value !== null && typeof value === 'object' && Object.keys(value).length > 0;

export function checkRange(ok: boolean, message: string, param: string): void {
  if (!ok) throw badRequest(message, param);
}

/** A sampling parameter within the engine's bound (engine/bounds.json), so the engine never refuses what passes here. */
function checkBound(name: SamplingBoundName, value: number): void {
  checkRange(withinBound(name, value), `${name} must be in ${boundText(name)}, got ${value}.`, name);
}

/** Request shapes vLLM refuses, in either door, before looking at anything else. */
export function checkGenerationRefused(body: GenerationFields): void {
  if (body.use_beam_search)
    throw badRequest('use_beam_search is not supported by this server: it samples only', 'use_beam_search');
  if (isTruthyObject(body.kv_transfer_params))
    throw badRequest(
      'kv_transfer_params is not supported: this server does not do disaggregated serving',
      'kv_transfer_params',
    );
  const responseFormat = body.response_format;
  if (responseFormat && responseFormat.type === 'json_schema' && !responseFormat.json_schema) {
    throw badRequest(
      "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
      'response_format',
    );
  }
  if (body.stream_options && isTruthyObject(body.stream_options) && !body.stream)
    throw badRequest('Stream options can only be defined when `stream=True`.', 'stream_options');
}

/** `prompt_logprobs` in vLLM's range; streams carry none. */
export function checkPromptLogprobs(body: GenerationFields): number | null {
  const promptLogprobs = body.prompt_logprobs ?? null;
  if (promptLogprobs === null) return null;
  if (body.stream && (promptLogprobs > 0 || promptLogprobs === -1))
    throw badRequest('`prompt_logprobs` are not available when `stream=True`.', 'prompt_logprobs');
  checkRange(
    promptLogprobs >= 0 || promptLogprobs === -1,
    '`prompt_logprobs` must be a positive value or -1.',
    'prompt_logprobs',
  );
  const wanted = promptLogprobs === -1 ? Infinity : promptLogprobs;
  checkRange(
    wanted <= MAX_LOGPROBS,
    `Requested prompt logprobs of ${promptLogprobs === -1 ? 'the whole vocabulary' : promptLogprobs}, which is greater than max allowed: ${MAX_LOGPROBS}`,
    'prompt_logprobs',
  );
  return promptLogprobs;
}

/** `cache_salt` and `priority` as vLLM checks them. */
export function checkSchedulingOptions(body: GenerationFields): void {
  if (body.cache_salt !== undefined && body.cache_salt !== null && body.cache_salt === '')
    throw badRequest("Parameter 'cache_salt' must be a non-empty string if provided.", 'cache_salt');
  if ((body.priority ?? 0) !== 0)
    throw badRequest(
      'priority: the served model does not use priority scheduling, so only priority 0 is accepted',
      'priority',
    );
}

/** n, temperature, penalties and the truncations of the distribution, in vLLM's ranges. */
function distributionPlan(body: GenerationFields) {
  const n = body.n ?? GENERATE_DEFAULTS.n;
  checkBound('n', n);
  const temperature = body.temperature ?? null;
  if (temperature !== null) checkBound('temperature', temperature);
  if (n > 1 && temperature !== null && temperature < GREEDY_TEMPERATURE_BELOW)
    throw badRequest(`n must be 1 when using greedy sampling, got ${n}.`, 'n');
  const presence = body.presence_penalty ?? null;
  const frequency = body.frequency_penalty ?? null;
  if (presence !== null) checkBound('presence_penalty', presence);
  if (frequency !== null) checkBound('frequency_penalty', frequency);
  const repetition = body.repetition_penalty ?? null;
  if (repetition !== null) checkBound('repetition_penalty', repetition);
  const topP = body.top_p ?? null;
  if (topP !== null) checkBound('top_p', topP);
  const topK = body.top_k ?? null;
  // 0 and -1 both disable top-k (vLLM's two spellings of it).
  if (topK !== null)
    checkRange(
      withinBound('top_k', topK),
      `top_k must be 0 or -1 (disable), or in [1, ${SAMPLING_BOUNDS.top_k.max}], got ${topK}.`,
      'top_k',
    );
  const minP = body.min_p ?? null;
  if (minP !== null) checkBound('min_p', minP);
  return {
    n,
    temperature,
    top_p: topP,
    top_k: topK === 0 ? -1 : topK,
    min_p: minP,
    presence_penalty: presence,
    frequency_penalty: frequency,
    repetition_penalty: repetition,
  };
}

/** The token budget (`max_tokens`, or the field a door names instead) and `min_tokens`. */
function tokenLimits(body: GenerationFields, maxTokens: { value: number | null; param: string }) {
  const requestedMaxTokens = maxTokens.value;
  if (requestedMaxTokens !== null)
    checkRange(requestedMaxTokens >= 1, `max_tokens must be at least 1, got ${requestedMaxTokens}.`, maxTokens.param);
  const minTokens = body.min_tokens ?? GENERATE_DEFAULTS.min_tokens;
  checkRange(minTokens >= 0, `min_tokens must be greater than or equal to 0, got ${minTokens}.`, 'min_tokens');
  if (requestedMaxTokens !== null)
    checkRange(
      minTokens <= requestedMaxTokens,
      `min_tokens must be less than or equal to max_tokens=${requestedMaxTokens}, got ${minTokens}.`,
      'min_tokens',
    );
  return { requestedMaxTokens, maxTokensParam: maxTokens.param, minTokens };
}

/** Stop strings, bad words, logit bias (clamped to ±100, as OpenAI does) and the allowed-token list. */
function tokenRules(body: GenerationFields) {
  const stop =
    body.stop === undefined || body.stop === null ? [] : typeof body.stop === 'string' ? [body.stop] : body.stop;
  if (stop.includes('')) throw badRequest('stop cannot contain an empty string.', 'stop');
  const badWords = body.bad_words ?? [];
  if (badWords.some((word) => word.trim() === ''))
    throw badRequest('bad_words cannot contain an empty string.', 'bad_words');
  const logitBias: Record<string, number> = {};
  for (const [key, value] of Object.entries(body.logit_bias ?? {})) {
    if (!/^-?\d+$/.test(key))
      throw badRequest(`logit_bias keys must be token ids, got ${JSON.stringify(key)}.`, 'logit_bias');
    logitBias[key] = Math.min(100, Math.max(-100, value));
  }
  const allowed = body.allowed_token_ids ?? null;
  if (allowed !== null && allowed.length === 0)
    throw badRequest('allowed_token_ids is not None and empty!', 'allowed_token_ids');
  return { stop, badWords, logitBias, allowed };
}

function repetitionDetectionPlan(body: GenerationFields): GenerationRequest['repetitionDetection'] {
  const detection = body.repetition_detection ?? null;
  if (!detection) return null;
  const minPatternSize = detection.min_pattern_size ?? 0;
  const maxPatternSize = detection.max_pattern_size ?? 0;
  const minCount = detection.min_count ?? 0;
  checkRange(
    minPatternSize >= 0 && maxPatternSize >= 0 && minPatternSize <= maxPatternSize,
    'repetition_detection: pattern sizes must be >= 0 with min_pattern_size <= max_pattern_size.',
    'repetition_detection',
  );
  if (maxPatternSize > 0)
    checkRange(
      minCount >= 2,
      'repetition_detection: min_count must be >= 2 when max_pattern_size > 0.',
      'repetition_detection',
    );
  return maxPatternSize > 0 ? { minPatternSize: Math.max(1, minPatternSize), maxPatternSize, minCount } : null;
}

/** Everything that decides which tokens are sampled, checked in vLLM's order; `maxTokens` is the door's budget field. */
export function samplingPlan(body: GenerationFields, maxTokens: { value: number | null; param: string }) {
  const { n, ...distribution } = distributionPlan(body);
  const limits = tokenLimits(body, maxTokens);
  const { stop, badWords, logitBias, allowed } = tokenRules(body);
  const repetitionDetection = repetitionDetectionPlan(body);
  const seed = body.seed === undefined || body.seed === null || body.seed === -1 ? null : body.seed;
  const sampling: RequestedSampling = {
    ...distribution,
    seed,
    min_tokens: limits.minTokens,
    ignore_eos: body.ignore_eos ?? GENERATE_DEFAULTS.ignore_eos,
    stop_token_ids: body.stop_token_ids ?? [...GENERATE_DEFAULTS.stop_token_ids],
    logit_bias: logitBias,
    allowed_token_ids: allowed,
  };
  return {
    n,
    sampling,
    requestedMaxTokens: limits.requestedMaxTokens,
    maxTokensParam: limits.maxTokensParam,
    stop,
    badWords,
    repetitionDetection,
  };
}

/** The stream and output switches both OpenAI-style doors read the same way. */
export function outputSwitches(body: GenerationFields, requestIdHeader: string | undefined) {
  const stream = body.stream ?? false;
  return {
    modelName: body.model ? body.model : null,
    stream,
    includeUsage: stream && (body.stream_options?.include_usage ?? false),
    continuousUsage:
      stream && (body.stream_options?.include_usage ?? false) && (body.stream_options?.continuous_usage_stats ?? false),
    includeStopStr: body.include_stop_str_in_output ?? false,
    skipSpecialTokens: body.skip_special_tokens ?? true,
    truncatePromptTokens: body.truncate_prompt_tokens ?? null,
    requestId: requestIdHeader ?? body.request_id ?? null,
  };
}
