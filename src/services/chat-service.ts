/**
 * Chat completions end to end: plan → resolve the model → render and tokenize the prompt → engine
 * generate on the checkpoint's adapter → per-choice output processing → a whole response or a stream of
 * chunks. Every error before the first chunk is thrown (an HTTP error); later ones end the stream.
 */
import crypto from 'node:crypto';
import type { ChatCompletionBody } from '../api/chat.ts';
import { badRequest, checkTemplateData, planChat, type ChatPlan } from '../chat/request.ts';
import { contentString } from '../chat/messages.ts';
import { ChoiceOutput, type LogprobEntry, type OutputDelta } from '../chat/output.ts';
import { TemplateError, type RenderOptions } from '../chat/template.ts';
import type { TemplateSandbox } from '../chat/template-sandbox.ts';
import { ConstraintRequestError } from '../constraints/constraint-error.ts';
import { checkOnEngine, constraintSpec } from '../constraints/request.ts';
import { encodePrompt, promptRenderOptions } from '../chat/prompt.ts';
import { renderChat } from '../chat/template.ts';
import type { ConstraintSpec, FinishEvent, GenerateRequest, PromptLogprobsEvent, TokensEvent } from '../engine/protocol.ts';
import type { GenerateStream } from '../engine/generate-stream.ts';
import { EngineError } from '../engine/errors.ts';
import type { Principal } from './auth-service.ts';
import { servingAdapterKey } from '../engine/adapter-keys.ts';
import type { BaseModelRuntime, LoadedBase } from './base-model-runtime.ts';
import type { ModelResolver } from './model-resolver.ts';

export interface ChatOptions {
  /** Answer logprobs (as `token_id:<id>`) when a request leaves `logprobs` unset, as ART needs. */
  logprobsByDefault: boolean;
  /** Ceiling on generated tokens when a request sets no max_tokens. */
  maxCompletionTokens: number;
  /** Where request-supplied chat templates render; null: the operator does not trust them (400). */
  requestTemplates: TemplateSandbox | null;
}

type Chunk = Record<string, unknown>;

export type ChatResult =
  | { kind: 'json'; body: Record<string, unknown>; /** Time spent waiting on the engine, for Server-Timing. */ engineMs: number }
  | { kind: 'stream'; chunks: AsyncIterable<Chunk>; cancel(): Promise<void> };

interface Prepared {
  plan: ChatPlan;
  base: LoadedBase;
  modelName: string;
  request: GenerateRequest;
  promptIds: number[];
  responseRole: string;
  echoText: string | null;
  id: string;
  created: number;
  /** The weights that answer: the checkpoint's step (0 for a base model) and the adapter slot (`base` without one). */
  policy: { version: number; slot: string };
}

/** A call forced by naming the function answers "stop", as vLLM does; "tool_calls" is for calls the model chose. */
function finishReason(plan: ChatPlan, output: ChoiceOutput): ChoiceOutput['finishReason'] {
  return typeof plan.toolChoice === 'object' && output.finishReason === 'tool_calls' ? 'stop' : output.finishReason;
}

/**
 * ART 0.5.20+'s per-choice policy provenance (`policy_token_spans`, which its PipelineTrainer requires of every eval
 * answer): a checkpoint's weights never change, so all of a choice's tokens come from one span of one policy.
 */
function policySpans(prepared: Prepared, output: ChoiceOutput, index: number) {
  if (output.completionTokens === 0) return null;
  const { version, slot } = prepared.policy;
  return [{ start_token: 0, end_token: output.completionTokens, generation_id: `${prepared.id}-${index}`, policy_version: version, lora_slot: slot, update_seq: 0 }];
}

/** The prompt cut to `truncate_prompt_tokens` and the completion budget, checked against the context as vLLM does. */
function fitContext(plan: ChatPlan, base: LoadedBase, renderedIds: number[], maxCompletionTokens: number): { promptIds: number[]; maxTokens: number } {
  let promptIds = renderedIds;
  const context = base.engine.context_length;
  if (plan.n > base.engine.max_num_seqs) {
    throw badRequest(`n=${plan.n} exceeds max_num_seqs=${base.engine.max_num_seqs}, the most sequences this server decodes at once. Please request fewer choices.`, 'n');
  }
  const requested = plan.requestedMaxTokens;
  if (requested !== null && requested > context) {
    throw badRequest(`${plan.maxTokensParam}=${requested} cannot be greater than max_model_len=${context}. Please request fewer output tokens.`, plan.maxTokensParam);
  }
  if (plan.truncatePromptTokens !== null) {
    const allowed = context - (requested ?? 0);
    const keep = plan.truncatePromptTokens === -1 ? allowed : plan.truncatePromptTokens;
    if (keep > allowed) throw badRequest(`truncate_prompt_tokens=${keep} cannot be greater than max_model_len - max_tokens = ${allowed}. Please request a smaller truncation size.`, 'truncate_prompt_tokens');
    if (promptIds.length > keep) promptIds = promptIds.slice(promptIds.length - keep);
  }
  if (requested !== null && promptIds.length + requested > context) {
    throw badRequest(
      `This model's maximum context length is ${context} tokens. However, you requested ${requested} output tokens and your prompt contains ${promptIds.length} input tokens, for a total of ${promptIds.length + requested} tokens. Please reduce the length of the input prompt or the number of requested output tokens.`,
      'input_tokens',
    );
  }
  if (promptIds.length >= context) throw badRequest(`Input length (${promptIds.length}) exceeds model's maximum context length (${context}).`, 'input_tokens');
  const maxTokens = requested ?? Math.min(context - promptIds.length, maxCompletionTokens);
  if (plan.sampling.min_tokens > maxTokens) throw badRequest(`min_tokens must be less than or equal to max_tokens=${maxTokens}, got ${plan.sampling.min_tokens}.`, 'min_tokens');
  return { promptIds, maxTokens };
}

/** Token ids the request names must exist in the model's vocabulary. */
function checkVocabulary(plan: ChatPlan, vocab: number): void {
  const outOfVocab = Object.keys(plan.sampling.logit_bias).map(Number).filter((id) => id < 0 || id >= vocab);
  if (outOfVocab.length > 0) throw badRequest(`token_id(s) ${JSON.stringify(outOfVocab)} in logit_bias contain out-of-vocab token ids. Vocabulary size: ${vocab}`, 'logit_bias');
  if (plan.sampling.allowed_token_ids?.some((id) => id < 0 || id >= vocab)) throw badRequest('allowed_token_ids contains out-of-vocab token id!', 'allowed_token_ids');
  if (plan.sampling.stop_token_ids.some((id) => id < 0 || id >= vocab)) throw badRequest('stop_token_ids contains out-of-vocab token id!', 'stop_token_ids');
}

/** The engine's sampling parameters: the request's, else the model's generation_config.json, else vLLM's defaults. */
function generationParams(plan: ChatPlan, base: LoadedBase, maxTokens: number) {
  const { sampling } = plan;
  const { generation, tokenizer } = base;
  const extraEos = sampling.ignore_eos ? [] : generation.eos_token_ids.filter((id) => id !== tokenizer.eosTokenId);
  const badWordsIds = plan.badWords.flatMap((word) => [tokenizer.encode(word), tokenizer.encode(` ${word.trimStart()}`)]).filter((ids) => ids.length > 0);
  return {
    n: plan.n,
    max_tokens: maxTokens,
    min_tokens: sampling.min_tokens,
    ignore_eos: sampling.ignore_eos,
    stop_token_ids: [...sampling.stop_token_ids, ...extraEos],
    temperature: sampling.temperature ?? generation.temperature ?? 1.0,
    top_p: sampling.top_p ?? generation.top_p ?? 1.0,
    top_k: sampling.top_k ?? generation.top_k ?? -1,
    min_p: sampling.min_p ?? generation.min_p ?? 0,
    presence_penalty: sampling.presence_penalty,
    frequency_penalty: sampling.frequency_penalty,
    repetition_penalty: sampling.repetition_penalty ?? generation.repetition_penalty ?? 1.0,
    logit_bias: sampling.logit_bias,
    allowed_token_ids: sampling.allowed_token_ids,
    bad_words_ids: badWordsIds,
    seed: sampling.seed,
    logprobs: plan.logprobs ? plan.logprobs.top : null,
    prompt_logprobs: plan.promptLogprobs,
  };
}

function usageOf(prepared: Prepared, completionTokens: number, cachedTokens: number) {
  const prompt = prepared.promptIds.length;
  return { prompt_tokens: prompt, total_tokens: prompt + completionTokens, completion_tokens: completionTokens, prompt_tokens_details: { cached_tokens: cachedTokens } };
}

/** One stream's SSE chunks, in vLLM's order: role chunks, (echo), content chunks, finish chunks, usage. */
class ChunkWriter {
  readonly finished = new Set<number>();
  started = false;
  /** Prompt tokens the engine found cached; known once its `done` arrives. */
  cached = 0;
  private readonly head: Chunk;

  constructor(
    private readonly prepared: Prepared,
    private readonly outputs: ChoiceOutput[],
  ) {
    this.head = { id: prepared.id, object: 'chat.completion.chunk', created: prepared.created, model: prepared.modelName };
  }

  private withUsage(chunk: Chunk, index: number | null): Chunk {
    if (!this.prepared.plan.continuousUsage) return chunk;
    return { ...chunk, usage: usageOf(this.prepared, index === null ? 0 : this.outputs[index].completionTokens, this.cached) };
  }

  private choice(index: number, delta: OutputDelta, logprobs: LogprobEntry[] | null, tokenIds: number[] | null, finish?: ChoiceOutput): Chunk {
    const { plan } = this.prepared;
    const choice = {
      index,
      delta,
      logprobs: logprobs && plan.logprobs ? { content: logprobs } : null,
      finish_reason: finish ? finishReason(plan, finish) : null,
      ...(finish ? { stop_reason: finish.stopReason } : {}),
      ...(plan.returnTokenIds ? { token_ids: tokenIds } : {}),
    };
    return this.withUsage({ ...this.head, choices: [choice] }, index);
  }

  /** Every choice's role chunk (with the prompt's ids when asked), then the echoed text. */
  *start(): Generator<Chunk> {
    const { plan, responseRole, promptIds, echoText } = this.prepared;
    this.started = true;
    for (let index = 0; index < plan.n; index += 1) {
      const chunk = { ...this.head, choices: [{ index, delta: { role: responseRole, content: '' }, logprobs: null, finish_reason: null }] };
      yield this.withUsage(plan.returnTokenIds ? { ...chunk, prompt_token_ids: promptIds } : chunk, null);
    }
    if (echoText === null) return;
    for (let index = 0; index < plan.n; index += 1) yield this.withUsage({ ...this.head, choices: [{ index, delta: { content: echoText }, logprobs: null, finish_reason: null }] }, null);
  }

  /** New tokens of one choice: their delta (or an empty one carrying logprobs and ids), and its finish when they ended it. */
  *tokens(event: TokensEvent): Generator<Chunk> {
    const { plan } = this.prepared;
    const output = this.outputs[event.seq];
    const { delta, logprobs } = output.push(event.tokens, event.logprobs, event.top_logprobs);
    const empty = Object.keys(delta).length === 0;
    if (!empty || plan.logprobs || plan.returnTokenIds) yield this.choice(event.seq, empty ? { content: '' } : delta, logprobs, event.tokens);
    if (output.done) yield this.finish(event.seq, { finish_reason: 'stop', stop_token_id: null });
  }

  /** A choice's last chunk: what its output still held back, and why it ended. */
  finish(index: number, end: Pick<FinishEvent, 'finish_reason' | 'stop_token_id'>): Chunk {
    this.finished.add(index);
    const output = this.outputs[index];
    const delta = output.finish(end.finish_reason, end.stop_token_id);
    return this.choice(index, delta, null, this.prepared.plan.returnTokenIds ? [] : null, output);
  }

  /** After the engine's last event: the choices it did not finish end at the length limit; then the usage chunk. */
  *end(): Generator<Chunk> {
    if (!this.started) yield* this.start();
    for (let index = 0; index < this.outputs.length; index += 1) if (!this.finished.has(index)) yield this.finish(index, { finish_reason: 'length', stop_token_id: null });
    if (this.prepared.plan.includeUsage) {
      yield { ...this.head, choices: [], usage: usageOf(this.prepared, this.outputs.reduce((sum, output) => sum + output.completionTokens, 0), this.cached) };
    }
  }
}

export class ChatService {
  constructor(
    private readonly resolver: ModelResolver,
    private readonly runtime: BaseModelRuntime,
    private readonly options: ChatOptions,
  ) {}

  /** `disconnected` aborts when the client goes away: a whole (non-streamed) answer then stops generating. */
  async create(principal: Principal, body: ChatCompletionBody, requestIdHeader: string | undefined, disconnected?: AbortSignal): Promise<ChatResult> {
    const plan = planChat(body, { logprobsByDefault: this.options.logprobsByDefault, requestIdHeader, requestTemplatesAllowed: this.options.requestTemplates !== null });
    const prepared = await this.prepare(principal, plan, body);
    const engineStarted = performance.now();
    const stream = this.runtime.sampler().generate(prepared.request);
    if (!plan.stream) {
      const cancel = () => void stream.cancel().catch(() => undefined);
      if (disconnected?.aborted) cancel();
      else disconnected?.addEventListener('abort', cancel, { once: true });
      try {
        const body = await this.collect(prepared, stream);
        return { kind: 'json', body, engineMs: performance.now() - engineStarted };
      } catch (error) {
        // A grammar that reached llguidance's limits only while decoding is still the request's constraint's fault.
        if (plan.constraint && error instanceof EngineError && error.code === 'bad_request' && error.message.startsWith('constraint: ')) throw badRequest(`${plan.constraint.param}: ${error.message}`, plan.constraint.param);
        throw error;
      } finally {
        disconnected?.removeEventListener('abort', cancel);
      }
    }
    return { kind: 'stream', chunks: this.chunks(prepared, stream), cancel: () => stream.cancel() };
  }

  private async prepare(principal: Principal, plan: ChatPlan, body: ChatCompletionBody): Promise<Prepared> {
    const resolved = await this.resolver.resolve(principal, plan.modelName);
    const base = await this.runtime.load(resolved.baseId);
    const renderedIds = await this.promptIds(plan, base);
    const constraint = await this.constraint(plan, base);
    const { promptIds, maxTokens } = fitContext(plan, base, renderedIds, this.options.maxCompletionTokens);
    checkVocabulary(plan, base.tokenizer.vocabSize);
    const checkpoint = resolved.checkpoint;
    const adapter = checkpoint?.adapterPath ? { adapter: servingAdapterKey(checkpoint.id), adapter_path: checkpoint.adapterPath } : { adapter: null };
    const lastMessage = plan.messages.at(-1);
    const responseRole = plan.addGenerationPrompt ? 'assistant' : String(lastMessage?.role ?? 'assistant');
    return {
      plan,
      base,
      modelName: plan.modelName ?? base.id,
      promptIds,
      responseRole,
      echoText: plan.echo && lastMessage?.role === responseRole ? contentString(lastMessage.content, 'messages') : null,
      id: `chatcmpl-${plan.requestId ?? crypto.randomBytes(8).toString('hex')}`,
      created: Math.floor(Date.now() / 1000),
      request: { base: base.id, ...adapter, ...generationParams(plan, base, maxTokens), prompt: promptIds, constraint },
      policy: { version: checkpoint?.step ?? 0, slot: adapter.adapter ?? 'base' },
    };
  }

  /** The prompt rendered with the request's template or the model's, and tokenized. */
  private async promptIds(plan: ChatPlan, base: LoadedBase): Promise<number[]> {
    const template = plan.chatTemplate ?? base.template;
    if (!template) throw badRequest('This model has no chat template; pass one as `chat_template`.', 'chat_template');
    if (plan.documents && !template.includes('documents')) throw badRequest("documents: this model's chat template does not use documents", 'documents');
    const prompt = await this.render(plan.chatTemplate !== null, () =>
      promptRenderOptions(base.tokenizer, {
        template,
        messages: plan.messages,
        tools: plan.tools,
        documents: plan.documents,
        addGenerationPrompt: plan.addGenerationPrompt,
        continueFinalMessage: plan.continueFinalMessage,
        kwargs: plan.templateKwargs,
      }),
    );
    return encodePrompt(base.tokenizer, prompt, { addSpecialTokens: plan.addSpecialTokens });
  }

  /**
   * The request's constraint as the engine's specification (a forced call written in the base's own format),
   * compiled by the sampler before any token, so that a refusal is a 400 naming its field, never a stream error.
   */
  private async constraint(plan: ChatPlan, base: LoadedBase): Promise<ConstraintSpec | null> {
    const requested = plan.constraint;
    if (!requested) return null;
    const spec = constraintSpec(requested, (calls) => base.toolFormat.forcedGrammar(calls, base.markers));
    const engine = this.runtime.sampler();
    try {
      await checkOnEngine(requested, spec, { kinds: base.engine.constraint_kinds ?? [], check: (constraint) => engine.request('check_constraint', { base: base.id, constraint }) });
    } catch (error) {
      if (error instanceof ConstraintRequestError) throw badRequest(error.message, error.param);
      throw error;
    }
    return spec;
  }

  /** The model's own template is trusted and renders here; a request's own is user code and renders in the sandbox. */
  private async render(fromRequest: boolean, options: () => RenderOptions): Promise<string> {
    let param = 'messages';
    try {
      const normalised = options();
      const { messages, tools, documents } = normalised;
      checkTemplateData({ messages, tools, documents, chat_template_kwargs: normalised.kwargs });
      param = fromRequest ? 'chat_template' : 'messages';
      return fromRequest ? await this.options.requestTemplates!.render(normalised) : renderChat(normalised);
    } catch (error) {
      if (error instanceof TemplateError) throw badRequest(error.message, param);
      throw error;
    }
  }

  private outputs(prepared: Prepared): ChoiceOutput[] {
    const { plan, base } = prepared;
    const stopTokenIds = new Set([...prepared.request.stop_token_ids!, ...(plan.sampling.ignore_eos ? [] : base.generation.eos_token_ids)]);
    const thinkingOff = plan.templateKwargs.enable_thinking === false;
    return Array.from(
      { length: plan.n },
      () =>
        new ChoiceOutput({
          tokenizer: base.tokenizer,
          stop: plan.stop,
          includeStopStr: plan.includeStopStr,
          skipSpecialTokens: plan.skipSpecialTokens,
          stopTokenIds,
          parseTools: plan.toolChoice !== 'none',
          toolFormat: base.toolFormat,
          parseReasoning: !thinkingOff,
          includeReasoning: plan.includeReasoning,
          logprobs: plan.logprobs,
          repetitionDetection: plan.repetitionDetection,
        }),
    );
  }

  private promptLogprobs(prepared: Prepared, event: PromptLogprobsEvent | null): unknown[] | null {
    if (!event) return null;
    const tokenizer = prepared.base.tokenizer;
    const decode = (id: number) => new TextDecoder().decode(tokenizer.tokenBytes(id) ?? new Uint8Array());
    return event.prompt_logprobs.map((entry, position) => {
      if (!entry) return null;
      const actual = prepared.promptIds[position];
      const result: Record<string, { logprob: number; rank: number; decoded_token: string }> = {};
      const rankOf = entry.top.findIndex(([id]) => id === actual);
      result[String(actual)] = { logprob: Math.max(-9999, entry.logprob), rank: rankOf === -1 ? entry.top.length + 1 : rankOf + 1, decoded_token: decode(actual) };
      entry.top.forEach(([id, logprob], rank) => {
        if (!(String(id) in result)) result[String(id)] = { logprob: Math.max(-9999, logprob), rank: rank + 1, decoded_token: decode(id) };
      });
      return result;
    });
  }

  /** Runs the generation to its end and answers the chat.completion object. */
  private async collect(prepared: Prepared, stream: GenerateStream): Promise<Record<string, unknown>> {
    const outputs = this.outputs(prepared);
    let promptEvent: PromptLogprobsEvent | null = null;
    let cached = 0;
    for await (const event of stream) {
      if (event.type === 'prompt') promptEvent = event;
      else if (event.type === 'tokens') outputs[event.seq].push(event.tokens, event.logprobs, event.top_logprobs);
      else if (event.type === 'finish') outputs[event.seq].finish(event.finish_reason, event.stop_token_id);
      else if (event.type === 'done') cached = event.cached_tokens;
      // Every choice stopped on our side (stop string, repetition): leaving the loop cancels the engine request.
      if (event.type === 'tokens' && outputs.every((output) => output.done)) break;
    }
    for (const output of outputs) if (!output.finishReason) output.finish('length', null);
    const { plan } = prepared;
    return {
      id: prepared.id,
      object: 'chat.completion',
      created: prepared.created,
      model: prepared.modelName,
      choices: outputs.map((output, index) => {
        const message = output.message();
        return {
          index,
          message: {
            role: prepared.responseRole,
            content: prepared.echoText !== null ? prepared.echoText + (message.content ?? '') : message.content,
            refusal: null,
            annotations: null,
            audio: null,
            function_call: null,
            tool_calls: message.tool_calls,
            reasoning: message.reasoning,
          },
          logprobs: plan.logprobs ? { content: output.logprobEntries } : null,
          finish_reason: finishReason(plan, output),
          stop_reason: output.stopReason,
          token_ids: plan.returnTokenIds ? output.tokenIds : null,
          policy_token_spans: policySpans(prepared, output, index),
        };
      }),
      usage: usageOf(prepared, outputs.reduce((sum, output) => sum + output.completionTokens, 0), cached),
      service_tier: null,
      system_fingerprint: null,
      prompt_logprobs: this.promptLogprobs(prepared, promptEvent),
      prompt_token_ids: plan.returnTokenIds ? prepared.promptIds : null,
      kv_transfer_params: null,
    };
  }

  /** The SSE chunks of a streamed answer (ChunkWriter says which and in what order). */
  private async *chunks(prepared: Prepared, stream: GenerateStream): AsyncIterable<Chunk> {
    const writer = new ChunkWriter(prepared, this.outputs(prepared));
    for await (const event of stream) {
      if (event.type === 'done') writer.cached = event.cached_tokens;
      if (event.type === 'done' || event.type === 'prompt') continue;
      if (!writer.started) yield* writer.start();
      if (writer.finished.has(event.seq)) continue;
      if (event.type === 'finish') {
        yield writer.finish(event.seq, event);
        continue;
      }
      yield* writer.tokens(event);
      if (writer.finished.size === prepared.plan.n) break;
    }
    yield* writer.end();
  }
}
