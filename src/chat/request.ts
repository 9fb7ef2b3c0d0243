/**
 * A chat completion request, read and checked before its model is known: vLLM's validation rules and
 * messages (400 with the offending `param`), into a `ChatRequest` that keeps what the request left unset
 * as null. Checks and defaults that need the model (vocabulary, context length, generation_config.json)
 * belong to the plan (plan.ts).
 */

import type { ChatCompletionBody } from '../api/chat.ts';
import { ConstraintRequestError } from '../constraints/constraint-error.ts';
import { jsonSizeProblem } from '../constraints/limits.ts';
import { type RequestedConstraint, requestedConstraint } from '../constraints/request.ts';
import { contentPartProblem } from '../conversation/messages.ts';
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
/** Nesting of the data a chat template renders; deeper data would overflow the renderer's stack. */
const MAX_TEMPLATE_DATA_DEPTH = 64;

/** Data a template walks (messages after normalisation, tools, documents, kwargs) must not nest deeper than it can render. */
export function checkTemplateData(fields: Record<string, unknown>): void {
  for (const [field, value] of Object.entries(fields)) {
    const problem = jsonSizeProblem(value, { depth: MAX_TEMPLATE_DATA_DEPTH, nodes: Infinity });
    if (problem) throw badRequest(`${field}: ${problem}, more than a chat template can render`, field);
  }
}

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

/** What the request asks for, checked; the plan (plan.ts) adds what the model decides. */
export interface ChatRequest {
  modelName: string | null;
  messages: Record<string, unknown>[];
  tools: Record<string, unknown>[] | null;
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
  addGenerationPrompt: boolean;
  continueFinalMessage: boolean;
  addSpecialTokens: boolean;
  chatTemplate: string | null;
  templateKwargs: Record<string, unknown>;
  documents: Record<string, string>[] | null;
  toolChoice: ToolChoice;
  /** What decoding must produce (response_format, structured_outputs, or a forced tool call), still to compile; null for free text. */
  constraint: RequestedConstraint | null;
  includeReasoning: boolean;
  parallelToolCalls: boolean;
  requestedMaxTokens: number | null;
  maxTokensParam: 'max_tokens' | 'max_completion_tokens';
  truncatePromptTokens: number | null;
  repetitionDetection: { minPatternSize: number; maxPatternSize: number; minCount: number } | null;
  requestId: string | null;
}

const isTruthyObject = (value: unknown) => value !== null && typeof value === 'object' && Object.keys(value).length > 0;

function parseToolChoice(body: ChatCompletionBody): ToolChoice {
  const tools = body.tools;
  if (tools && tools.length === 0) {
    throw badRequest(
      '`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.',
      'tools',
    );
  }
  const choice = body.tool_choice;
  if (choice === undefined || choice === null) return tools ? 'auto' : 'none';
  if (choice === 'none') return 'none';
  if (!tools) throw badRequest('When using `tool_choice`, `tools` must be set.', 'tool_choice');
  if (typeof choice === 'string') {
    if (choice === 'auto' || choice === 'required') return choice;
    throw badRequest(
      `Invalid value for \`tool_choice\`: ${choice}! Only named tools, "none", "auto" or "required" are supported.`,
      'tool_choice',
    );
  }
  const fn = (choice as { function?: unknown }).function;
  const usage = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`';
  if (!fn || typeof fn !== 'object')
    throw badRequest(
      `Invalid value for \`function\`: \`${JSON.stringify(fn ?? null)}\` in \`tool_choice\`! ${usage}`,
      'tool_choice',
    );
  if (!('name' in fn))
    throw badRequest(`Expected field \`name\` in \`function\` in \`tool_choice\`! ${usage}`, 'tool_choice');
  const name = (fn as { name: unknown }).name;
  if (typeof name !== 'string' || name === '')
    throw badRequest(
      `Invalid \`name\` in \`function\`: \`${JSON.stringify(name)}\` in \`tool_choice\`! ${usage}`,
      'tool_choice',
    );
  if (!tools.some((tool) => tool.function.name === name))
    throw badRequest('The tool specified in `tool_choice` does not match any of the specified `tools`', 'tool_choice');
  return { name };
}

function checkRange(ok: boolean, message: string, param: string): void {
  if (!ok) throw badRequest(message, param);
}

/** A sampling parameter within the engine's bound (engine/bounds.json), so the engine never refuses what passes here. */
function checkBound(name: SamplingBoundName, value: number): void {
  checkRange(withinBound(name, value), `${name} must be in ${boundText(name)}, got ${value}.`, name);
}

/** The first content part that cannot be rendered, as a 400 naming it (messages.ts says what can be). */
function checkContentParts(messages: Record<string, unknown>[]): void {
  messages.forEach((message, index) => {
    if (!Array.isArray(message.content)) return;
    message.content.forEach((part: unknown, at) => {
      const param = `messages.${index}.content.${at}`;
      const problem = contentPartProblem(part);
      if (problem !== null) throw badRequest(`${param}: ${problem}`, param);
    });
  });
}

export interface ParseOptions {
  logprobsByDefault: boolean;
  requestIdHeader: string | undefined;
  /** Whether the operator lets requests bring their own `chat_template` (user code the server would run). */
  requestTemplatesAllowed: boolean;
}

/** Features this server refuses outright, and request shapes vLLM refuses before looking at anything else. */
function checkRefused(body: ChatCompletionBody, options: ParseOptions): void {
  if (typeof body.chat_template === 'string' && !options.requestTemplatesAllowed) {
    throw badRequest(
      "chat_template: this server does not run chat templates sent with a request, because a template is code; send none to use the model's own, or ask the operator to start the server with TRUST_REQUEST_CHAT_TEMPLATE=on",
      'chat_template',
    );
  }
  if (body.use_beam_search)
    throw badRequest('use_beam_search is not supported by this server: it samples only', 'use_beam_search');
  if (isTruthyObject(body.kv_transfer_params))
    throw badRequest(
      'kv_transfer_params is not supported: this server does not do disaggregated serving',
      'kv_transfer_params',
    );
  if (isTruthyObject(body.mm_processor_kwargs))
    throw badRequest('mm_processor_kwargs is not supported: the served models are text-only', 'mm_processor_kwargs');
  checkContentParts(body.messages);
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

/** Sampled and prompt logprobs: how many, in which token format; ART trains only on choices that carry them. */
function logprobsPlan(
  body: ChatCompletionBody,
  options: ParseOptions,
): Pick<ChatRequest, 'logprobs' | 'promptLogprobs'> {
  const promptLogprobs = body.prompt_logprobs ?? null;
  if (promptLogprobs !== null) {
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
  }
  const topLogprobs = body.top_logprobs ?? 0;
  checkRange(topLogprobs >= 0 || topLogprobs === -1, '`top_logprobs` must be a positive value or -1.', 'top_logprobs');
  if ((topLogprobs > 0 || topLogprobs === -1) && body.logprobs !== true)
    throw badRequest('when using `top_logprobs`, `logprobs` must be set to true.', 'top_logprobs');
  checkRange(
    topLogprobs !== -1 && topLogprobs <= MAX_LOGPROBS,
    `Requested sample logprobs of ${topLogprobs === -1 ? 'the whole vocabulary' : topLogprobs}, which is greater than max allowed: ${MAX_LOGPROBS}`,
    'top_logprobs',
  );
  // An unset `logprobs` means "yes, as token ids" when the operator turned logprobs on by default.
  const logprobsOn = body.logprobs ?? options.logprobsByDefault;
  const asTokenIds =
    body.return_tokens_as_token_ids ??
    (body.logprobs === undefined || body.logprobs === null ? options.logprobsByDefault : false);
  return {
    logprobs: logprobsOn ? { top: topLogprobs, asTokenIds } : null,
    promptLogprobs: promptLogprobs ?? (body.echo ? topLogprobs : null),
  };
}

function toolsPlan(body: ChatCompletionBody): Pick<ChatRequest, 'toolChoice' | 'parallelToolCalls' | 'constraint'> {
  const toolChoice = parseToolChoice(body);
  const parallelToolCalls = body.parallel_tool_calls ?? true;
  try {
    return { toolChoice, parallelToolCalls, constraint: requestedConstraint(body, toolChoice, parallelToolCalls) };
  } catch (error) {
    if (error instanceof ConstraintRequestError) throw badRequest(error.message, error.param);
    throw error;
  }
}

function checkPromptOptions(body: ChatCompletionBody): void {
  if ((body.continue_final_message ?? false) && (body.add_generation_prompt ?? true)) {
    throw badRequest(
      'Cannot set both `continue_final_message` and `add_generation_prompt` to True.',
      'continue_final_message',
    );
  }
  if (body.cache_salt !== undefined && body.cache_salt !== null && body.cache_salt === '')
    throw badRequest("Parameter 'cache_salt' must be a non-empty string if provided.", 'cache_salt');
  if ((body.priority ?? 0) !== 0)
    throw badRequest(
      'priority: the served model does not use priority scheduling, so only priority 0 is accepted',
      'priority',
    );
}

/** n, temperature, penalties and the truncations of the distribution, in vLLM's ranges. */
function distributionPlan(body: ChatCompletionBody) {
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

function tokenLimits(
  body: ChatCompletionBody,
): Pick<ChatRequest, 'requestedMaxTokens' | 'maxTokensParam'> & { minTokens: number } {
  const maxTokensParam =
    body.max_completion_tokens !== undefined && body.max_completion_tokens !== null
      ? 'max_completion_tokens'
      : 'max_tokens';
  const requestedMaxTokens = body.max_completion_tokens ?? body.max_tokens ?? null;
  if (requestedMaxTokens !== null)
    checkRange(requestedMaxTokens >= 1, `max_tokens must be at least 1, got ${requestedMaxTokens}.`, maxTokensParam);
  const minTokens = body.min_tokens ?? GENERATE_DEFAULTS.min_tokens;
  checkRange(minTokens >= 0, `min_tokens must be greater than or equal to 0, got ${minTokens}.`, 'min_tokens');
  if (requestedMaxTokens !== null)
    checkRange(
      minTokens <= requestedMaxTokens,
      `min_tokens must be less than or equal to max_tokens=${requestedMaxTokens}, got ${minTokens}.`,
      'min_tokens',
    );
  return { requestedMaxTokens, maxTokensParam, minTokens };
}

/** Stop strings, bad words, logit bias (clamped to ±100, as OpenAI does) and the allowed-token list. */
function tokenRules(body: ChatCompletionBody) {
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

function repetitionDetectionPlan(body: ChatCompletionBody): ChatRequest['repetitionDetection'] {
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

/** Everything that decides which tokens are sampled, checked in vLLM's order. */
function samplingPlan(body: ChatCompletionBody) {
  const { n, ...distribution } = distributionPlan(body);
  const limits = tokenLimits(body);
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

/** The request checked in vLLM's order, as the plan reads it. */
export function parseChatRequest(body: ChatCompletionBody, options: ParseOptions): ChatRequest {
  checkRefused(body, options);
  const logprobs = logprobsPlan(body, options);
  const tools = toolsPlan(body);
  checkPromptOptions(body);
  const sampling = samplingPlan(body);
  const stream = body.stream ?? false;
  const templateKwargs: Record<string, unknown> = { ...(body.chat_template_kwargs ?? {}) };
  if (body.reasoning_effort) templateKwargs.reasoning_effort = body.reasoning_effort;
  return {
    ...logprobs,
    ...tools,
    ...sampling,
    modelName: body.model ? body.model : null,
    messages: body.messages as Record<string, unknown>[],
    tools: (body.tools as Record<string, unknown>[] | null | undefined) ?? null,
    stream,
    includeUsage: stream && (body.stream_options?.include_usage ?? false),
    continuousUsage:
      stream && (body.stream_options?.include_usage ?? false) && (body.stream_options?.continuous_usage_stats ?? false),
    includeStopStr: body.include_stop_str_in_output ?? false,
    skipSpecialTokens: body.skip_special_tokens ?? true,
    returnTokenIds: body.return_token_ids ?? false,
    echo: body.echo ?? false,
    addGenerationPrompt: body.add_generation_prompt ?? true,
    continueFinalMessage: body.continue_final_message ?? false,
    addSpecialTokens: body.add_special_tokens ?? false,
    chatTemplate: body.chat_template ?? null,
    templateKwargs,
    documents: body.documents ?? null,
    includeReasoning: body.include_reasoning ?? true,
    truncatePromptTokens: body.truncate_prompt_tokens ?? null,
    requestId: options.requestIdHeader ?? body.request_id ?? null,
  };
}
