/**
 * Chat templates: renders a conversation to prompt text with the model's Jinja template
 * (`@huggingface/jinja`), compiled once per template text, the way `transformers` renders it
 * (reasoning field aliases, `continue_final_message` by a tag). Knows nothing of tokens or the engine.
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
  /** Extra template variables: chat_template_kwargs, over the special token strings (see prompt.ts). */
  kwargs?: Record<string, unknown>;
}

export class TemplateError extends Error {}

const compiled = new Map<string, Template>();
/** transformers marks the spot to cut at with this tag; templates that trim content eat its space. */
const CONTINUE_TAG = 'CONTINUE_FINAL_MESSAGE_TAG ';
const REASONING_FIELDS = ['reasoning_content', 'thinking', 'reasoning'] as const;

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

/** Templates read reasoning under different names (Qwen3: reasoning_content, gpt-oss: thinking); transformers fills both. */
function aliasReasoning(message: Record<string, unknown>): Record<string, unknown> {
  const field = REASONING_FIELDS.find((key) => message[key] !== undefined && message[key] !== null);
  if (field === undefined) return message;
  return { thinking: message[field], ...message, reasoning_content: message[field] };
}

/** The final message with the tag appended to its content (a string after normalisation). */
function tagFinal(messages: Record<string, unknown>[], template: string): Record<string, unknown>[] {
  const final = messages.at(-1);
  if (!final) throw new TemplateError('continue_final_message is set but the conversation is empty');
  if (typeof final.content !== 'string')
    throw new TemplateError('continue_final_message is set but the final message has no "content" to continue');
  if (!template.includes('content'))
    throw new TemplateError(
      'continue_final_message is set to "content" but this is not an accepted field in the chat_template',
    );
  return [...messages.slice(0, -1), { ...final, content: final.content + CONTINUE_TAG }];
}

/** As transformers does: cut at the tag, and drop the whitespace before it when the template trimmed the message. */
function cutAtTag(text: string, final: string): string {
  const tag = CONTINUE_TAG.trim();
  if (!text.includes(final.trim()) || !text.includes(tag)) {
    throw new TemplateError(
      'continue_final_message is set but the final message does not appear in the chat after applying the chat template (the template deletes part of it)',
    );
  }
  const at = text.lastIndexOf(tag);
  return text.slice(at, at + CONTINUE_TAG.length) === CONTINUE_TAG ? text.slice(0, at) : text.slice(0, at).trimEnd();
}

export function renderChat(options: RenderOptions): string {
  const template = compile(options.template);
  let messages = options.messages.map(aliasReasoning);
  if (options.continueFinalMessage) messages = tagFinal(messages, options.template);
  let text: string;
  try {
    text = template.render({
      ...options.kwargs,
      messages,
      tools: options.tools ?? undefined,
      documents: options.documents ?? undefined,
      add_generation_prompt: options.addGenerationPrompt,
    });
  } catch (error) {
    throw new TemplateError(`chat template failed to render: ${(error as Error).message}`);
  }
  return options.continueFinalMessage ? cutAtTag(text, String(options.messages.at(-1)!.content)) : text;
}
