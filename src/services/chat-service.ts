/**
 * Chat completions end to end, in four steps with homes of their own: the request checked (chat/request.ts), its
 * model resolved and loaded, the plan for that model (chat/plan.ts), and the engine's events answered whole or as
 * chunks (chat/response.ts). Every error before the first chunk is thrown (an HTTP error); later ones end the stream.
 */
import type { ChatCompletion, ChatCompletionBody, ChatCompletionChunk } from '../api/chat.ts';
import { type ChatPlan, planChat } from '../chat/plan.ts';
import { type ChatRequest, parseChatRequest } from '../chat/request.ts';
import { chunks, completion } from '../chat/response.ts';
import type { PromptWorker } from '../conversation/prompt-worker.ts';
import type { TemplateSandbox } from '../conversation/template-sandbox.ts';
import { servingAdapterKey } from '../engine/adapter-keys.ts';
import { EngineError } from '../engine/errors.ts';
import type { GenerateStream } from '../engine/generate-stream.ts';
import { badRequest } from '../errors.ts';
import type { Principal } from './auth-service.ts';
import type { BaseModelRuntime } from './base-model-runtime.ts';
import type { ModelResolver } from './model-resolver.ts';

export interface ChatOptions {
  /** Answer logprobs (as `token_id:<id>`) when a request leaves `logprobs` unset, as ART needs. */
  logprobsByDefault: boolean;
  /** Ceiling on generated tokens when a request sets no max_tokens. */
  maxCompletionTokens: number;
  /** Where request-supplied chat templates render; null: the operator does not trust them (400). */
  requestTemplates: TemplateSandbox | null;
  /** Renders and tokenizes large prompts off the event loop. */
  prompts: PromptWorker;
}

export type ChatResult =
  | { kind: 'json'; body: ChatCompletion /** Time spent waiting on the engine, for Server-Timing. */; engineMs: number }
  | { kind: 'stream'; chunks: AsyncIterable<ChatCompletionChunk>; cancel(): Promise<void> };

export class ChatService {
  constructor(
    private readonly resolver: ModelResolver,
    private readonly runtime: BaseModelRuntime,
    private readonly options: ChatOptions,
  ) {}

  /** `disconnected` aborts when the client goes away: a whole (non-streamed) answer then stops generating. */
  async create(
    principal: Principal,
    body: ChatCompletionBody,
    requestIdHeader: string | undefined,
    disconnected?: AbortSignal,
  ): Promise<ChatResult> {
    const request = parseChatRequest(body, {
      logprobsByDefault: this.options.logprobsByDefault,
      requestIdHeader,
      requestTemplatesAllowed: this.options.requestTemplates !== null,
    });
    const plan = await this.plan(principal, request);
    const engineStarted = performance.now();
    const stream = this.runtime.sampler().generate(plan.generate);
    if (!request.stream)
      return {
        kind: 'json',
        body: await this.whole(plan, stream, disconnected),
        engineMs: performance.now() - engineStarted,
      };
    return { kind: 'stream', chunks: chunks(plan, stream), cancel: () => stream.cancel() };
  }

  /** The request on its resolved model: the checkpoint's adapter (none for a base model) and the model's plan. */
  private async plan(principal: Principal, request: ChatRequest): Promise<ChatPlan> {
    const resolved = await this.resolver.resolve(principal, request.modelName);
    const model = await this.runtime.load(resolved.baseId);
    const checkpoint = resolved.checkpoint;
    const adapter = checkpoint?.adapterPath
      ? { adapter: servingAdapterKey(checkpoint.id), adapter_path: checkpoint.adapterPath }
      : { adapter: null };
    return planChat(
      request,
      model,
      { modelName: request.modelName ?? model.id, adapter, version: checkpoint?.step ?? 0 },
      {
        maxCompletionTokens: this.options.maxCompletionTokens,
        requestTemplates: this.options.requestTemplates,
        prompts: this.options.prompts,
        checkConstraint: (constraint) =>
          this.runtime.sampler().request('check_constraint', { base: model.id, constraint }),
      },
    );
  }

  /** The whole answer; a client that goes away cancels the generation. */
  private async whole(
    plan: ChatPlan,
    stream: GenerateStream,
    disconnected: AbortSignal | undefined,
  ): Promise<ChatCompletion> {
    const cancel = () => void stream.cancel().catch(() => undefined);
    if (disconnected?.aborted) cancel();
    else disconnected?.addEventListener('abort', cancel, { once: true });
    try {
      return await completion(plan, stream);
    } catch (error) {
      // A grammar that reached llguidance's limits only while decoding is still the request's constraint's fault.
      const constraint = plan.request.constraint;
      if (
        constraint &&
        error instanceof EngineError &&
        error.code === 'bad_request' &&
        error.message.startsWith('constraint: ')
      )
        throw badRequest(`${constraint.param}: ${error.message}`, constraint.param);
      throw error;
    } finally {
      disconnected?.removeEventListener('abort', cancel);
    }
  }
}
