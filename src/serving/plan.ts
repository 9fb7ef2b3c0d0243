/**
 * A request on its resolved model → the plan the pipeline runs: the prompt's token ids (a chat request's rendered
 * conversation, chat-prompt.ts, or a completion's own prompt), cut to the context; the request's constraint written
 * for this model and compiled by the engine before any token; the token ids the request names checked against the
 * vocabulary; the engine request with its sampling chosen once (sampling.ts); and how the answer is read (tool calls,
 * reasoning). Every refusal is a 400 naming its field. Refuses to know how the model was resolved or loaded (the
 * service passes it in) and how a door shapes the answer.
 */
import crypto from 'node:crypto';
import { ConstraintRequestError } from '../constraints/constraint-error.ts';
import type { MarkerSyntax } from '../constraints/lark.ts';
import { checkOnEngine, constraintSpec } from '../constraints/request.ts';
import { contentString } from '../conversation/messages.ts';
import type { ChatTokenizer } from '../conversation/tokenizer.ts';
import type { ToolCallFormat } from '../conversation/tool-calls/index.ts';
import type { ConstraintSpec, GenerateRequest, LoadBaseReply } from '../engine/protocol.ts';
import { badRequest } from '../errors.ts';
import type { GenerationDefaults } from '../services/base-model-runtime.ts';
import { chatPromptIds, type PromptDeps } from './chat-prompt.ts';
import type { ChatRequest, GenerationRequest } from './request.ts';
import { samplingParams } from './sampling.ts';

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

export interface PlanDeps extends PromptDeps {
  /** Ceiling on generated tokens when a request sets no max_tokens. */
  maxCompletionTokens: number;
  /** The sampler's compile check of a constraint on this model. */
  checkConstraint(constraint: ConstraintSpec): Promise<unknown>;
}

/** How generated text is read: tool calls in the model's format, a leading reasoning block, and whether it is shown. */
export interface OutputReading {
  tools: boolean;
  reasoning: boolean;
  includeReasoning: boolean;
}

export interface GenerationPlan {
  request: GenerationRequest;
  model: ChatModel;
  modelName: string;
  generate: GenerateRequest & { stop_token_ids: number[] };
  promptIds: number[];
  reading: OutputReading;
  id: string;
  created: number;
  /** The weights that answer: the checkpoint's step (0 for a base model) and the adapter slot (`base` without one). */
  policy: { version: number; slot: string };
}

/** A chat request's plan: the answer's role, and the final message's text when the request echoes it. */
export interface ChatPlan extends GenerationPlan {
  request: ChatRequest;
  responseRole: string;
  echoText: string | null;
}

/** The chat plan, its checks in vLLM's order: template and prompt, constraint, context, vocabulary. */
export async function planChat(
  request: ChatRequest,
  model: ChatModel,
  target: ChatTarget,
  deps: PlanDeps,
  idPrefix: string,
): Promise<ChatPlan> {
  const renderedIds = await chatPromptIds(request, model, deps);
  const constraint = await compiledConstraint(request, model, deps);
  const reading = {
    tools: request.toolChoice !== 'none',
    reasoning: request.templateKwargs.enable_thinking !== false,
    includeReasoning: request.includeReasoning,
  };
  const plan = planGeneration(request, model, target, renderedIds, constraint, deps, { idPrefix, reading });
  const lastMessage = request.messages.at(-1);
  const responseRole = request.addGenerationPrompt ? 'assistant' : String(lastMessage?.role ?? 'assistant');
  return {
    ...plan,
    request,
    responseRole,
    echoText:
      request.echo && lastMessage?.role === responseRole ? contentString(lastMessage.content, 'messages') : null,
  };
}

/** The plan for prompt ids already known: context, vocabulary, and the engine request. */
export function planGeneration(
  request: GenerationRequest,
  model: ChatModel,
  target: ChatTarget,
  renderedIds: number[],
  constraint: ConstraintSpec | null,
  deps: Pick<PlanDeps, 'maxCompletionTokens'>,
  shape: { idPrefix: string; reading: OutputReading },
): GenerationPlan {
  const { promptIds: prompt, maxTokens } = fitContext(request, model, renderedIds, deps.maxCompletionTokens);
  checkVocabulary(request, model.tokenizer.vocabSize);
  return {
    request,
    model,
    modelName: target.modelName,
    promptIds: prompt,
    reading: shape.reading,
    id: `${shape.idPrefix}${request.requestId ?? crypto.randomBytes(8).toString('hex')}`,
    created: Math.floor(Date.now() / 1000),
    generate: { base: model.id, ...target.adapter, ...samplingParams(request, model, maxTokens), prompt, constraint },
    policy: { version: target.version, slot: target.adapter.adapter ?? 'base' },
  };
}

/**
 * The request's constraint as the engine's specification (a forced call written in the model's own format),
 * compiled by the sampler before any token, so that a refusal is a 400 naming its field, never a stream error.
 */
export async function compiledConstraint(
  request: GenerationRequest,
  model: ChatModel,
  deps: Pick<PlanDeps, 'checkConstraint'>,
): Promise<ConstraintSpec | null> {
  const requested = request.constraint;
  if (!requested) return null;
  const spec = constraintSpec(requested, (calls) => model.toolFormat.forcedGrammar(calls, model.markers));
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
  request: GenerationRequest,
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
function checkVocabulary(request: GenerationRequest, vocab: number): void {
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
