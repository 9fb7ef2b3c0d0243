/**
 * Chat templates: renders a conversation to prompt text with the model's Jinja template
 * (`@huggingface/jinja`), compiled once per template text. Knows nothing of tokens or the engine.
 */
import { Template } from '@huggingface/jinja';

export interface RenderOptions {
  template: string;
  messages: Record<string, unknown>[];
  tools?: unknown[] | null;
  documents?: unknown[] | null;
  addGenerationPrompt: boolean;
  /** Leave the last message open (prefill): the text ends right after its content. */
  continueFinalMessage?: boolean;
  kwargs?: Record<string, unknown>;
  specialTokens?: Record<string, string | undefined>;
}

export class TemplateError extends Error {}

const compiled = new Map<string, Template>();

function compile(template: string): Template {
  let entry = compiled.get(template);
  if (!entry) {
    try {
      entry = new Template(template);
    } catch (error) {
      throw new TemplateError(`chat template does not compile: ${(error as Error).message}`);
    }
    compiled.set(template, entry);
  }
  return entry;
}

function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content.map((part) => (part && typeof part === 'object' && (part as { type?: unknown }).type === 'text' ? String((part as { text?: unknown }).text ?? '') : '')).join('');
  }
  return '';
}

export function renderChat(options: RenderOptions): string {
  const final = contentText(options.messages.at(-1)?.content);
  if (options.continueFinalMessage && final === '') {
    // An empty message to continue is just the generation prompt of its role.
    return renderChat({ ...options, messages: options.messages.slice(0, -1), addGenerationPrompt: true, continueFinalMessage: false });
  }
  const template = compile(options.template);
  let text: string;
  try {
    text = template.render({
      ...options.kwargs,
      ...options.specialTokens,
      messages: options.messages,
      tools: options.tools ?? undefined,
      documents: options.documents ?? undefined,
      add_generation_prompt: options.addGenerationPrompt,
    });
  } catch (error) {
    throw new TemplateError(`chat template failed to render: ${(error as Error).message}`);
  }
  if (!options.continueFinalMessage) return text;
  // As vLLM does: cut the rendering right after the final message's content, so the model continues it.
  const at = text.lastIndexOf(final);
  if (at === -1) throw new TemplateError('continue_final_message: the final message content was not found in the rendered prompt');
  return text.slice(0, at + final.length);
}
