/**
 * How training renders a conversation: exactly as chat completions render a prompt (same template context,
 * same message normalisation, same tokenization), with a trajectory's tools and chat template kwargs bound.
 * Both RL rows (rl/tokens.ts) and SFT rows (sft/tokens.ts) render through this and nothing else.
 */

import { encodePrompt, renderPromptText } from '../conversation/prompt.ts';
import type { ChatTokenizer } from '../conversation/tokenizer.ts';

/** A rendered row before packing: what RL and SFT both train on. */
export interface TrainingSequence {
  tokens: number[];
  /** 1 where the token is trained on (sampled by the policy), else 0. */
  mask: number[];
  /** The sampler's logprob per token, null where unknown. */
  logprobs: (number | null)[];
}

export interface TrainingRenderer {
  tokenizer: ChatTokenizer;
  /** The prompt text of `messages` (choices already turned into assistant messages). */
  text(messages: Record<string, unknown>[], addGenerationPrompt: boolean): string;
  /** The ids of a whole rendering, tokenized as a chat prompt is. */
  ids(text: string): number[];
}

export interface RenderTarget {
  tokenizer: ChatTokenizer;
  template: string;
}

export function trainingRenderer(
  base: RenderTarget,
  tools: unknown[] | null | undefined,
  kwargs: Record<string, unknown> | null | undefined,
): TrainingRenderer {
  return {
    tokenizer: base.tokenizer,
    text: (messages, addGenerationPrompt) =>
      renderPromptText(base.tokenizer, {
        template: base.template,
        messages,
        tools,
        addGenerationPrompt,
        kwargs: kwargs ?? undefined,
      }),
    ids: (text) => encodePrompt(base.tokenizer, text),
  };
}
