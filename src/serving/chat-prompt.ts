/**
 * A chat request's conversation as prompt token ids: rendered with the request's template (in the sandbox) or the
 * model's own (here, or on the prompt worker when the data is large), and tokenized. Every chat-shaped door (chat
 * completions, Responses, Messages, and Messages' token count) renders through here; a refusal is a 400 naming
 * its field. Knows nothing of sampling or the engine.
 */
import { jsonSizeProblem } from '../constraints/limits.ts';
import { encodePrompt, promptRenderOptions } from '../conversation/prompt.ts';
import { LARGE_PROMPT_CHARS, type PromptWorker } from '../conversation/prompt-worker.ts';
import { type RenderOptions, renderChat, TemplateError } from '../conversation/template.ts';
import type { TemplateSandbox } from '../conversation/template-sandbox.ts';
import type { ChatTokenizer } from '../conversation/tokenizer.ts';
import { badRequest } from '../errors.ts';
import type { ChatRequest } from './request.ts';

/** Nesting of the data a chat template renders; deeper data would overflow the renderer's stack. */
const MAX_TEMPLATE_DATA_DEPTH = 64;

/** Data a template walks (messages after normalisation, tools, documents, kwargs) must not nest deeper than it can render. */
export function checkTemplateData(fields: Record<string, unknown>): void {
  for (const [field, value] of Object.entries(fields)) {
    const problem = jsonSizeProblem(value, { depth: MAX_TEMPLATE_DATA_DEPTH, nodes: Infinity });
    if (problem) throw badRequest(`${field}: ${problem}, more than a chat template can render`, field);
  }
}

export interface PromptDeps {
  /** Where request-supplied chat templates render; null: the operator does not trust them. */
  requestTemplates: TemplateSandbox | null;
  /** Where large prompts are rendered and tokenized, off the event loop. */
  prompts: PromptWorker;
}

/** What rendering reads of the model. */
export interface PromptModel {
  tokenizer: ChatTokenizer;
  template: string | undefined;
}

/** The prompt rendered with the request's template or the model's, and tokenized; a large one off the event loop. */
export async function chatPromptIds(request: ChatRequest, model: PromptModel, deps: PromptDeps): Promise<number[]> {
  const template = request.chatTemplate ?? model.template;
  if (!template) throw badRequest('This model has no chat template; pass one as `chat_template`.', 'chat_template');
  if (request.documents && !template.includes('documents'))
    throw badRequest("documents: this model's chat template does not use documents", 'documents');
  const fromRequest = request.chatTemplate !== null;
  const encoding = { folder: model.tokenizer.folder, addSpecialTokens: request.addSpecialTokens ?? false };
  let param = 'messages';
  try {
    const options = promptRenderOptions(model.tokenizer, {
      template,
      messages: request.messages,
      tools: request.tools,
      documents: request.documents,
      addGenerationPrompt: request.addGenerationPrompt,
      continueFinalMessage: request.continueFinalMessage,
      kwargs: request.templateKwargs,
    });
    checkTemplateData({
      messages: options.messages,
      tools: options.tools,
      documents: options.documents,
      chat_template_kwargs: options.kwargs,
    });
    if (!fromRequest) {
      // The model's own template is trusted and renders here, or on the prompt worker when the data is large.
      if (isLarge(options)) return await deps.prompts.encode({ ...encoding, options });
      return encodePrompt(model.tokenizer, renderChat(options), encoding);
    }
    // A request's own template is user code and renders in the sandbox (the request was refused when there is none).
    param = 'chat_template';
    const text = await deps.requestTemplates!.render(options);
    return text.length >= LARGE_PROMPT_CHARS
      ? await deps.prompts.encode({ ...encoding, text })
      : encodePrompt(model.tokenizer, text, encoding);
  } catch (error) {
    if (error instanceof TemplateError) throw badRequest(error.message, param);
    throw error;
  }
}

/** Whether rendering and encoding these messages, tools and documents would hold the event loop for long. */
function isLarge(options: RenderOptions): boolean {
  return (
    JSON.stringify([options.messages, options.tools ?? null, options.documents ?? null]).length >= LARGE_PROMPT_CHARS
  );
}
