/**
 * The one way a conversation becomes a prompt, for chat completions and training rows alike
 * (training-rows.md §1): vLLM's message normalisation, the template context transformers builds
 * (named special tokens, then chat_template_kwargs on top), and tokenization without a second BOS.
 */
import { normaliseMessages } from './messages.ts';
import { type RenderOptions, renderChat } from './template.ts';
import type { ChatTokenizer } from './tokenizer.ts';

export interface PromptInput {
  template: string;
  /** OpenAI-shaped messages as clients send them (normalised here). */
  messages: readonly Record<string, unknown>[];
  tools?: unknown[] | null;
  documents?: unknown[] | null;
  addGenerationPrompt: boolean;
  continueFinalMessage?: boolean;
  /** chat_template_kwargs (`enable_thinking`, ...). */
  kwargs?: Record<string, unknown>;
}

/** What the template renderer gets (messages normalised, special tokens under the kwargs); throws TemplateError for unrenderable messages. */
export function promptRenderOptions(tokenizer: ChatTokenizer, input: PromptInput): RenderOptions {
  return {
    template: input.template,
    messages: normaliseMessages(input.messages),
    tools: input.tools,
    documents: input.documents,
    addGenerationPrompt: input.addGenerationPrompt,
    continueFinalMessage: input.continueFinalMessage,
    kwargs: { ...tokenizer.templateTokens, ...input.kwargs },
  };
}

/** The prompt text; throws TemplateError (the caller's 400) when the messages cannot be rendered. */
export function renderPromptText(tokenizer: ChatTokenizer, input: PromptInput): string {
  return renderChat(promptRenderOptions(tokenizer, input));
}

/**
 * Token ids of rendered prompt text. Templates write their own BOS (Llama 3's `{{ bos_token }}`), so the
 * text is encoded without special tokens; a tokenizer that wants a BOS the template did not write gets it once.
 */
export function encodePrompt(
  tokenizer: ChatTokenizer,
  text: string,
  options: { addSpecialTokens?: boolean } = {},
): number[] {
  const ids = tokenizer.encode(text, { addSpecialTokens: options.addSpecialTokens ?? false });
  const bos = tokenizer.bosTokenId;
  if (tokenizer.addBosToken && bos !== undefined && ids[0] !== bos) ids.unshift(bos);
  return ids;
}

export function renderPrompt(
  tokenizer: ChatTokenizer,
  input: PromptInput,
  options: { addSpecialTokens?: boolean } = {},
): { text: string; ids: number[] } {
  const text = renderPromptText(tokenizer, input);
  return { text, ids: encodePrompt(tokenizer, text, options) };
}
