/**
 * The one pipeline under the four doors: a request's model name resolved to a base model and checkpoint (loaded
 * when it is not), the request planned on it (plan.ts), and its generation started on the sampler engine, whichever
 * kind that is (ours or vLLM). A door parses its wire shape into the internal request before it calls here, and
 * shapes the outputs (generation.ts) after. Every error before the first token is thrown: the door's HTTP error.
 */
import type { PromptWorker } from '../conversation/prompt-worker.ts';
import type { TemplateSandbox } from '../conversation/template-sandbox.ts';
import { servingAdapterKey } from '../engine/adapter-keys.ts';
import type { GenerateStream } from '../engine/generate-stream.ts';
import type { GenerateRequest } from '../engine/protocol.ts';
import type { Principal } from '../services/auth-service.ts';
import type { BaseModelRuntime } from '../services/base-model-runtime.ts';
import type { ModelResolver } from '../services/model-resolver.ts';
import { chatPromptIds } from './chat-prompt.ts';
import { choiceOutputs, type Running } from './generation.ts';
import type { ChoiceOutput } from './output.ts';
import { type ChatModel, type ChatPlan, type ChatTarget, type PlanDeps, planChat } from './plan.ts';
import type { ChatRequest, ParseOptions } from './request.ts';

export interface ServingOptions {
  /** Answers carry the sampler's evidence (logprobs as `token_id:<id>`, token ids) when a request leaves it unset, as ART needs. */
  logprobsByDefault: boolean;
  /** Ceiling on generated tokens when a request sets no max_tokens. */
  maxCompletionTokens: number;
  /** Where request-supplied chat templates render; null: the operator does not trust them (400). */
  requestTemplates: TemplateSandbox | null;
  /** Renders and tokenizes large prompts off the event loop. */
  prompts: PromptWorker;
}

/** A chat-shaped request's generation: its plan, the generation running on the sampler, and its choices' outputs. */
export interface ChatGeneration {
  plan: ChatPlan;
  running: Running;
  outputs: ChoiceOutput[];
}

/** A request's model, loaded, and the weights that answer. */
export interface Served {
  model: ChatModel;
  target: ChatTarget;
}

export class ServingService {
  constructor(
    private readonly resolver: ModelResolver,
    private readonly runtime: BaseModelRuntime,
    readonly options: ServingOptions,
  ) {}

  /** How the chat-shaped doors check a request on this server (its defaults and what the operator allows). */
  parseOptions(requestIdHeader: string | undefined): ParseOptions {
    return {
      logprobsByDefault: this.options.logprobsByDefault,
      requestIdHeader,
      requestTemplatesAllowed: this.options.requestTemplates !== null,
    };
  }

  /** The model a request names, loaded: the checkpoint's adapter (none for a base model) and the name answers carry. */
  async served(principal: Principal, modelName: string | null): Promise<Served> {
    const resolved = await this.resolver.resolve(principal, modelName);
    const model = await this.runtime.load(resolved.baseId);
    const checkpoint = resolved.checkpoint;
    const adapter = checkpoint?.adapterPath
      ? { adapter: servingAdapterKey(checkpoint.id), adapter_path: checkpoint.adapterPath }
      : { adapter: null };
    return { model, target: { modelName: modelName ?? model.id, adapter, version: checkpoint?.step ?? 0 } };
  }

  /** What planning needs besides the request and the model: limits, template renderers, the engine's compile check. */
  planDeps(model: ChatModel): PlanDeps {
    return {
      maxCompletionTokens: this.options.maxCompletionTokens,
      requestTemplates: this.options.requestTemplates,
      prompts: this.options.prompts,
      checkConstraint: (constraint) =>
        this.runtime.sampler().request('check_constraint', { base: model.id, constraint }),
    };
  }

  /** The plan's generation, started on the sampler engine. */
  generate(plan: { generate: GenerateRequest }): GenerateStream {
    return this.runtime.sampler().generate(plan.generate);
  }

  /**
   * A chat-shaped request planned on its model (answer ids start with `idPrefix`), its generation started, and the
   * outputs its one choice list assembles: what a door's `answer` shapes.
   */
  async chat(principal: Principal, request: ChatRequest, idPrefix: string): Promise<ChatGeneration> {
    const { model, target } = await this.served(principal, request.modelName);
    const plan = await planChat(request, model, target, this.planDeps(model), idPrefix);
    const stream = this.generate(plan);
    return { plan, running: { events: stream, cancel: () => stream.cancel() }, outputs: choiceOutputs([plan]) };
  }

  /** How many tokens a chat-shaped request's prompt is on its model, rendered as a generation would render it. */
  async countChatTokens(principal: Principal, request: ChatRequest): Promise<number> {
    const { model } = await this.served(principal, request.modelName);
    return (await chatPromptIds(request, model, this.planDeps(model))).length;
  }
}
