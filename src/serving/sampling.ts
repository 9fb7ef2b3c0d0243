/**
 * The sampling parameters a chat completion decodes with, chosen once: the request's own, else the model's
 * `generation_config.json`, else left out, which means the protocol's default (the engine client fills it in).
 * Owns that chain; refuses to know how a request is validated (request.ts).
 */

import type { ChatTokenizer } from '../conversation/tokenizer.ts';
import type { GenerateRequest } from '../engine/protocol.ts';
import type { GenerationDefaults } from '../services/base-model-runtime.ts';
import type { GenerationRequest } from './request.ts';

export type SamplingParams = Omit<GenerateRequest, 'base' | 'adapter' | 'adapter_path' | 'prompt' | 'constraint'> & {
  stop_token_ids: number[];
};

/** The engine's sampling parameters for this request on this model. */
export function samplingParams(
  request: GenerationRequest,
  model: { generation: GenerationDefaults; tokenizer: ChatTokenizer },
  maxTokens: number,
): SamplingParams {
  const { sampling } = request;
  const { generation, tokenizer } = model;
  const extraEos = sampling.ignore_eos ? [] : generation.eos_token_ids.filter((id) => id !== tokenizer.eosTokenId);
  const badWordsIds = request.badWords
    .flatMap((word) => [tokenizer.encode(word), tokenizer.encode(` ${word.trimStart()}`)])
    .filter((ids) => ids.length > 0);
  return {
    n: request.n,
    max_tokens: maxTokens,
    min_tokens: sampling.min_tokens,
    ignore_eos: sampling.ignore_eos,
    stop_token_ids: [...sampling.stop_token_ids, ...extraEos],
    temperature: sampling.temperature ?? generation.temperature,
    top_p: sampling.top_p ?? generation.top_p,
    top_k: sampling.top_k ?? generation.top_k,
    min_p: sampling.min_p ?? generation.min_p,
    presence_penalty: sampling.presence_penalty ?? undefined,
    frequency_penalty: sampling.frequency_penalty ?? undefined,
    repetition_penalty: sampling.repetition_penalty ?? generation.repetition_penalty,
    logit_bias: sampling.logit_bias,
    allowed_token_ids: sampling.allowed_token_ids,
    bad_words_ids: badWordsIds,
    seed: sampling.seed,
    logprobs: request.logprobs ? request.logprobs.top : null,
    prompt_logprobs: request.promptLogprobs,
  };
}
