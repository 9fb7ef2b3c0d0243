/**
 * Answer parts the OpenAI-style doors (chat completions, completions) shape alike, as vLLM does: usage with cached
 * prompt tokens, and prompt logprobs (the actual token with its rank, and the top alternatives, per position).
 */
import type { PromptLogprobs, Usage } from '../api/generation.ts';
import type { PromptLogprobsEvent } from '../engine/protocol.ts';
import type { ChoiceOutput } from './output.ts';
import type { GenerationPlan } from './plan.ts';

const LOGPROB_FLOOR = -9999;

export function usageOf(promptTokens: number, completionTokens: number, cachedTokens: number): Usage {
  return {
    prompt_tokens: promptTokens,
    total_tokens: promptTokens + completionTokens,
    completion_tokens: completionTokens,
    prompt_tokens_details: { cached_tokens: cachedTokens },
  };
}

export const completionTokens = (outputs: readonly ChoiceOutput[]) =>
  outputs.reduce((sum, output) => sum + output.completionTokens, 0);

/** vLLM's prompt logprobs: the actual token (with its rank) and the top alternatives at each prompt position. */
export function promptLogprobs(
  plan: GenerationPlan,
  event: PromptLogprobsEvent | null | undefined,
): typeof PromptLogprobs.static {
  if (!event) return null;
  const tokenizer = plan.model.tokenizer;
  const decode = (id: number) => new TextDecoder().decode(tokenizer.tokenBytes(id) ?? new Uint8Array());
  return event.prompt_logprobs.map((entry, position) => {
    if (!entry) return null;
    const actual = plan.promptIds[position];
    const result: Record<string, { logprob: number; rank: number; decoded_token: string }> = {};
    const rankOf = entry.top.findIndex(([id]) => id === actual);
    result[String(actual)] = {
      logprob: Math.max(LOGPROB_FLOOR, entry.logprob),
      rank: rankOf === -1 ? entry.top.length + 1 : rankOf + 1,
      decoded_token: decode(actual),
    };
    entry.top.forEach(([id, logprob], rank) => {
      if (!(String(id) in result))
        result[String(id)] = { logprob: Math.max(LOGPROB_FLOOR, logprob), rank: rank + 1, decoded_token: decode(id) };
    });
    return result;
  });
}
