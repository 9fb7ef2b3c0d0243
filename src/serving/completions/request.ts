/**
 * A completion request (`POST /v1/completions`), checked with vLLM's rules and messages before its model is known:
 * its prompts (a text, token ids, or a list of either; at most MAX_COMPLETION_PROMPTS), completions-style integer
 * `logprobs`, `echo` (with `max_tokens: 0`, the prompt alone), structured outputs, and the shared sampling fields
 * (../request.ts). vLLM's defaults: 16 tokens unless told, special tokens (a BOS) added to text prompts. When the
 * operator turned evidence on by default (LOGPROBS_BY_DEFAULT), an unset `logprobs` is 0 as `token_id:<id>` tokens
 * and an unset `return_token_ids` is true, so ART can train on exactly the sampled tokens.
 */
import type { CompletionBody } from '../../api/completions.ts';
import { ConstraintRequestError } from '../../constraints/constraint-error.ts';
import { requestedConstraint } from '../../constraints/request.ts';
import { badRequest } from '../../errors.ts';
import {
  checkGenerationRefused,
  checkPromptLogprobs,
  checkRange,
  checkSchedulingOptions,
  type GenerationRequest,
  MAX_LOGPROBS,
  outputSwitches,
  type ParseOptions,
  samplingPlan,
} from '../request.ts';

/** vLLM's VLLM_MAX_COMPLETION_PROMPTS: each prompt is a generation of its own. */
export const MAX_COMPLETION_PROMPTS = 1024;
/** OpenAI's and vLLM's budget when a completion request sets none. */
const DEFAULT_MAX_TOKENS = 16;

export type PromptInput = { text: string } | { ids: number[] };

export interface CompletionRequest extends GenerationRequest {
  prompts: PromptInput[];
  /** `echo` with `max_tokens: 0`: the prompt (and its logprobs) alone, no generated token. */
  echoOnly: boolean;
}

/** A completion has no chat template to bring: the other options are the chat doors'. */
type CompletionParseOptions = Pick<ParseOptions, 'logprobsByDefault' | 'requestIdHeader'>;

const isTokenList = (value: unknown): value is number[] =>
  Array.isArray(value) && value.every((item) => typeof item === 'number');

/** The request's prompts: one text, one token list, or a list of either, none empty. */
function promptsOf(prompt: CompletionBody['prompt']): PromptInput[] {
  const empty = 'Either prompt or prompt_embeds must be provided and non-empty.';
  if (typeof prompt === 'string') {
    if (prompt === '') throw badRequest(empty, 'prompt');
    return [{ text: prompt }];
  }
  if (prompt.length === 0) throw badRequest(empty, 'prompt');
  if (isTokenList(prompt)) return [{ ids: prompt }];
  if (prompt.length > MAX_COMPLETION_PROMPTS)
    throw badRequest(
      `prompt list length ${prompt.length} exceeds the maximum allowed count of ${MAX_COMPLETION_PROMPTS}.`,
      'prompt',
    );
  return (prompt as (string | number[])[]).map((item, index) => {
    if (item.length === 0) throw badRequest(`prompt.${index}: a prompt must not be empty`, `prompt.${index}`);
    return typeof item === 'string' ? { text: item } : { ids: item };
  });
}

/** Completions-style `logprobs` (the number of top alternatives) and the token format. */
function logprobsPlan(body: CompletionBody, options: CompletionParseOptions) {
  const requested = body.logprobs ?? null;
  if (requested !== null) {
    checkRange(requested >= 0 || requested === -1, '`logprobs` must be a positive value or -1.', 'logprobs');
    checkRange(
      requested !== -1 && requested <= MAX_LOGPROBS,
      `Requested sample logprobs of ${requested === -1 ? 'the whole vocabulary' : requested}, which is greater than max allowed: ${MAX_LOGPROBS}`,
      'logprobs',
    );
  }
  const top = requested ?? (options.logprobsByDefault ? 0 : null);
  const asTokenIds = body.return_tokens_as_token_ids ?? (requested === null && options.logprobsByDefault);
  const promptLogprobs = checkPromptLogprobs(body) ?? (body.echo && top !== null ? top : null);
  return { logprobs: top === null ? null : { top, asTokenIds }, promptLogprobs };
}

function constraintOf(body: CompletionBody): GenerationRequest['constraint'] {
  try {
    return requestedConstraint(body, 'none', true);
  } catch (error) {
    if (error instanceof ConstraintRequestError) throw badRequest(error.message, error.param);
    throw error;
  }
}

/** The request checked in vLLM's order, as the plan reads it. */
export function parseCompletionRequest(body: CompletionBody, options: CompletionParseOptions): CompletionRequest {
  checkGenerationRefused(body);
  if (body.suffix) throw badRequest('suffix is not supported: the served models do not fill in the middle', 'suffix');
  const prompts = promptsOf(body.prompt);
  const logprobs = logprobsPlan(body, options);
  const constraint = constraintOf(body);
  checkSchedulingOptions(body);
  const echo = body.echo ?? false;
  const budget = body.max_tokens ?? DEFAULT_MAX_TOKENS;
  const echoOnly = echo && budget === 0;
  // The prompt alone still decodes one token, which the answer leaves out (vLLM does the same).
  const sampling = samplingPlan(body, { value: echoOnly ? 1 : budget, param: 'max_tokens' });
  return {
    ...outputSwitches(body, options.requestIdHeader),
    ...logprobs,
    ...sampling,
    constraint,
    prompts,
    echo,
    echoOnly,
    returnTokenIds: body.return_token_ids ?? options.logprobsByDefault,
    addSpecialTokens: body.add_special_tokens ?? true,
  };
}
