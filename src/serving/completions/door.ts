/**
 * The completions door: the request parsed (request.ts), each prompt tokenized as it is (a text with the model's
 * tokenizer, vLLM's way: special tokens added unless told; token ids checked against the vocabulary) and planned on
 * the one pipeline with the request's constraint compiled once, the prompts' generations merged, and the answer
 * shaped whole or as chunks (response.ts). Generated text is read as text: no tool-call or reasoning parsing.
 */
import type { Completion, CompletionBody, CompletionChunk } from '../../api/completions.ts';
import { encodePrompt } from '../../conversation/prompt.ts';
import { LARGE_PROMPT_CHARS } from '../../conversation/prompt-worker.ts';
import { badRequest } from '../../errors.ts';
import type { Principal } from '../../services/auth-service.ts';
import { answer, CHAT_STYLE, type DoorAnswer, type DoorEvent } from '../door.ts';
import { choiceOutputs, mergeGenerations } from '../generation.ts';
import { completionTokens } from '../openai-parts.ts';
import { type ChatModel, compiledConstraint, type GenerationPlan, type PlanDeps, planGeneration } from '../plan.ts';
import type { ServingService } from '../service.ts';
import { type CompletionRequest, type PromptInput, parseCompletionRequest } from './request.ts';
import { type CompletionShape, chunks, completion } from './response.ts';

/** Completions read generated text as it is. */
const AS_TEXT = { tools: false, reasoning: false, includeReasoning: false };

/** A prompt's token ids: a text encoded (on the prompt worker when large), ids checked against the vocabulary. */
async function promptIds(
  prompt: PromptInput,
  index: number,
  request: CompletionRequest,
  model: ChatModel,
  deps: PlanDeps,
): Promise<number[]> {
  const param = request.prompts.length === 1 ? 'prompt' : `prompt.${index}`;
  if ('ids' in prompt) {
    const vocab = model.tokenizer.vocabSize;
    if (prompt.ids.some((id) => id >= vocab))
      throw badRequest(`${param}: token ids must be below the vocabulary size ${vocab}`, param);
    return prompt.ids;
  }
  const encoding = { folder: model.tokenizer.folder, addSpecialTokens: request.addSpecialTokens };
  if (prompt.text.length >= LARGE_PROMPT_CHARS) return await deps.prompts.encode({ ...encoding, text: prompt.text });
  return encodePrompt(model.tokenizer, prompt.text, encoding);
}

/** What an echo shows of a prompt: its own text, or (token ids, or a text cut to the context) the ids decoded. */
function echoText(request: CompletionRequest, prompt: PromptInput, plan: GenerationPlan, fullLength: number): string {
  if (!request.echo) return '';
  if ('text' in prompt && plan.promptIds.length === fullLength) return prompt.text;
  return plan.model.tokenizer.decode(plan.promptIds);
}

/** The answer's chunks as SSE events: content deltas and usage, for the metrics. */
function chunkEvent(chunk: CompletionChunk): DoorEvent {
  const contentDeltas = chunk.choices.filter((choice) => choice.text !== '').length;
  return { data: chunk, contentDeltas, completionTokens: chunk.usage?.completion_tokens };
}

export class CompletionsDoor {
  constructor(private readonly serving: ServingService) {}

  /** `disconnected` aborts when the client goes away: a whole (non-streamed) answer then stops generating. */
  async create(
    principal: Principal,
    body: CompletionBody,
    requestIdHeader: string | undefined,
    disconnected?: AbortSignal,
  ): Promise<DoorAnswer<Completion>> {
    const request = parseCompletionRequest(body, {
      logprobsByDefault: this.serving.options.logprobsByDefault,
      requestIdHeader,
    });
    const shape = await this.plan(principal, request);
    const running = mergeGenerations(
      shape.plans.map((plan) => this.serving.generate(plan)),
      request.n,
    );
    const outputs = choiceOutputs(shape.plans);
    const [plan] = shape.plans;
    return answer({ plan, running, outputs }, request.stream, disconnected, {
      whole: (collected) => ({
        body: completion(shape, outputs, collected),
        completionTokens: request.echoOnly ? 0 : completionTokens(outputs),
      }),
      events: async function* (steps) {
        for await (const chunk of chunks(shape, outputs, steps)) yield chunkEvent(chunk);
      },
      framing: CHAT_STYLE,
    });
  }

  /** Every prompt planned on the request's model, its constraint compiled once for all. */
  private async plan(principal: Principal, request: CompletionRequest): Promise<CompletionShape> {
    const { model, target } = await this.serving.served(principal, request.modelName);
    const deps = this.serving.planDeps(model);
    const idsOf = await Promise.all(
      request.prompts.map((prompt, index) => promptIds(prompt, index, request, model, deps)),
    );
    const constraint = await compiledConstraint(request, model, deps);
    const shape = { idPrefix: 'cmpl-', reading: AS_TEXT };
    const plans = idsOf.map((ids) => planGeneration(request, model, target, ids, constraint, deps, shape));
    const echoTexts = plans.map((plan, index) => echoText(request, request.prompts[index], plan, idsOf[index].length));
    // Every choice carries the first prompt's id, as one answer does.
    return { request, plans: plans.map((plan) => ({ ...plan, id: plans[0].id })), echoTexts };
  }
}
