/**
 * A chat request on its resolved model → the plan the service runs: the prompt rendered and tokenized, cut to
 * the context; the request's constraint written for this model and compiled by the engine before any token;
 * the token ids the request names checked against the vocabulary; the engine request with its sampling chosen
 * once (sampling.ts). Every refusal is a 400 naming its field. Refuses to know how the model was resolved or
 * loaded (the service passes it in) and how the answer is shaped (response.ts).
 */
import crypto from 'node:crypto';
import { ConstraintRequestError } from '../constraints/constraint-error.ts';
import type { MarkerSyntax } from '../constraints/lark.ts';
import { checkOnEngine, constraintSpec } from '../constraints/request.ts';
import { contentString } from '../conversation/messages.ts';
import { encodePrompt, promptRenderOptions } from '../conversation/prompt.ts';
import { LARGE_PROMPT_CHARS, type PromptWorker } from '../conversation/prompt-worker.ts';
import { type RenderOptions, renderChat, TemplateError } from '../conversation/template.ts';
import type { TemplateSandbox } from '../conversation/template-sandbox.ts';
import type { ChatTokenizer } from '../conversation/tokenizer.ts';
import type { ConstraintSpec, GenerateRequest, LoadBaseReply } from '../engine/protocol.ts';
import { badRequest } from '../errors.ts';
import { type ChatRequest, checkTemplateData } from './request.ts';
import { type GenerationDefaults, samplingParams } from './sampling.ts';
import type { ToolCallFormat } from './tool-calls/index.ts';

/** What a plan reads of the loaded base model. */
export interface ChatModel {
  id: string;
  tokenizer: ChatTokenizer;
  template: string | undefined;
  engine: Pick<LoadBaseReply, 'context_length' | 'max_num_seqs' | 'constraint_kinds'>;
  generation: GenerationDefaults;
  toolFormat: ToolCallFormat;
  markers: MarkerSyntax;
}

/** The weights that answer: the name the answer carries, the engine adapter (none for a base model), the checkpoint's step. */
export interface ChatTarget {
  modelName: string;
  adapter: { adapter: string | null; adapter_path?: string };
  version: number;
}

export interface PlanDeps {
  /** Ceiling on generated tokens when a request sets no max_tokens. */
  maxCompletionTokens: number;
  /** Where request-supplied chat templates render; null: the operator does not trust them. */
  requestTemplates: TemplateSandbox | null;
  /** Where large prompts are rendered and tokenized, off the event loop. */
  prompts: PromptWorker;
  /** The sampler's compile check of a constraint on this model. */
  checkConstraint(constraint: ConstraintSpec): Promise<unknown>;
}

export interface ChatPlan {
  request: ChatRequest;
  model: ChatModel;
  modelName: string;
  generate: GenerateRequest & { stop_token_ids: number[] };
  promptIds: number[];
  responseRole: string;
  echoText: string | null;
  id: string;
  created: number;
  /** The weights that answer: the checkpoint's step (0 for a base model) and the adapter slot (`base` without one). */
  policy: { version: number; slot: string };
}

/** The plan, its checks in vLLM's order: template and prompt, constraint, context, vocabulary. */
export async function planChat(
  request: ChatRequest,
  model: ChatModel,
  target: ChatTarget,
  deps: PlanDeps,
): Promise<ChatPlan> {
  const renderedIds = await promptIds(request, model, deps);
  const constraint = await compiledConstraint(request, model, deps);
  const { promptIds: prompt, maxTokens } = fitContext(request, model, renderedIds, deps.maxCompletionTokens);
  checkVocabulary(request, model.tokenizer.vocabSize);
  const lastMessage = request.messages.at(-1);
  const responseRole = request.addGenerationPrompt ? 'assistant' : String(lastMessage?.role ?? 'assistant');
  return {
    request,
    model,
    modelName: target.modelName,
    promptIds: prompt,
    responseRole,
    echoText:
      request.echo && lastMessage?.role === responseRole ? contentString(lastMessage.content, 'messages') : null,
    id: `chatcmpl-${request.requestId ?? crypto.randomBytes(8).toString('hex')}`,
    created: Math.floor(Date.now() / 1000),
    generate: { base: model.id, ...target.adapter, ...samplingParams(request, model, maxTokens), prompt, constraint },
    policy: { version: target.version, slot: target.adapter.adapter ?? 'base' },
  };
}

/** The prompt rendered with the request's template or the model's, and tokenized; a large one off the event loop. */
async function promptIds(request: ChatRequest, model: ChatModel, deps: PlanDeps): Promise<number[]> {
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
    // A request's own template is user code and renders in the sandbox (request.ts refused it already when there is none).
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

/**
 * The request's constraint as the engine's specification (a forced call written in the model's own format),
 * compiled by the sampler before any token, so that a refusal is a 400 naming its field, never a stream error.
 */
async function compiledConstraint(
  request: ChatRequest,
  model: ChatModel,
  deps: PlanDeps,
): Promise<ConstraintSpec | null> {
  const requested = request.constraint;
  if (!requested) return null;
  const spec = constraintSpec(requested, {
    forcedGrammar: (calls) => model.toolFormat.forcedGrammar(calls, model.markers),
    marker: model.markers,
  });
  try {
    await checkOnEngine(requested, spec, { kinds: model.engine.constraint_kinds ?? [], check: deps.checkConstraint });
  } catch (error) {
    if (error instanceof ConstraintRequestError) throw badRequest(error.message, error.param);
    throw error;
  }
  return spec;
}

/** The prompt cut to `truncate_prompt_tokens` and the completion budget, checked against the context as vLLM does. */
function fitContext(
  request: ChatRequest,
  model: ChatModel,
  renderedIds: number[],
  maxCompletionTokens: number,
): { promptIds: number[]; maxTokens: number } {
  let promptIds = renderedIds;
  const context = model.engine.context_length;
  if (request.n > model.engine.max_num_seqs) {
    throw badRequest(
      `n=${request.n} exceeds max_num_seqs=${model.engine.max_num_seqs}, the most sequences this server decodes at once. Please request fewer choices.`,
      'n',
    );
  }
  const requested = request.requestedMaxTokens;
  if (requested !== null && requested > context) {
    throw badRequest(
      `${request.maxTokensParam}=${requested} cannot be greater than max_model_len=${context}. Please request fewer output tokens.`,
      request.maxTokensParam,
    );
  }
  if (request.truncatePromptTokens !== null) {
    const allowed = context - (requested ?? 0);
    const keep = request.truncatePromptTokens === -1 ? allowed : request.truncatePromptTokens;
    if (keep > allowed)
      throw badRequest(
        `truncate_prompt_tokens=${keep} cannot be greater than max_model_len - max_tokens = ${allowed}. Please request a smaller truncation size.`,
        'truncate_prompt_tokens',
      );
    if (promptIds.length > keep) promptIds = promptIds.slice(promptIds.length - keep);
  }
  if (requested !== null && promptIds.length + requested > context) {
    throw badRequest(
      `This model's maximum context length is ${context} tokens. However, you requested ${requested} output tokens and your prompt contains ${promptIds.length} input tokens, for a total of ${promptIds.length + requested} tokens. Please reduce the length of the input prompt or the number of requested output tokens.`,
      'input_tokens',
    );
  }
  if (promptIds.length >= context)
    throw badRequest(
      `Input length (${promptIds.length}) exceeds model's maximum context length (${context}).`,
      'input_tokens',
    );
  const maxTokens = requested ?? Math.min(context - promptIds.length, maxCompletionTokens);
  if (request.sampling.min_tokens > maxTokens)
    throw badRequest(
      `min_tokens must be less than or equal to max_tokens=${maxTokens}, got ${request.sampling.min_tokens}.`,
      'min_tokens',
    );
  return { promptIds, maxTokens };
}

/** Token ids the request names must exist in the model's vocabulary (a 400 naming the field, before the engine sees them). */
function checkVocabulary(request: ChatRequest, vocab: number): void {
  const { sampling } = request;
  const outOfVocab = Object.keys(sampling.logit_bias)
    .map(Number)
    .filter((id) => id < 0 || id >= vocab);
  if (outOfVocab.length > 0)
    throw badRequest(
      `token_id(s) ${JSON.stringify(outOfVocab)} in logit_bias contain out-of-vocab token ids. Vocabulary size: ${vocab}`,
      'logit_bias',
    );
  if (sampling.allowed_token_ids?.some((id) => id < 0 || id >= vocab))
    throw badRequest('allowed_token_ids contains out-of-vocab token id!', 'allowed_token_ids');
  if (sampling.stop_token_ids.some((id) => id < 0 || id >= vocab))
    throw badRequest('stop_token_ids contains out-of-vocab token id!', 'stop_token_ids');
}
