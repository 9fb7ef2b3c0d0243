/**
 * The answer to a planned chat completion, from the engine's events: each choice's output (output.ts), then
 * either the whole `ChatCompletion` or its `ChatCompletionChunk`s in vLLM's order (role chunks, echo, content,
 * finishes, usage); both shapes are declared in api/chat.ts. Refuses to know how the request was checked (plan.ts)
 * or how the chunks travel (the SSE route).
 */
import type { ChatCompletion, ChatCompletionChunk, ChatDelta, ChatLogprob, ChatUsage } from '../api/chat.ts';
import type { FinishEvent, GenerateEvent, PromptLogprobsEvent, TokensEvent } from '../engine/protocol.ts';
import { ChoiceOutput } from './output.ts';
import type { ChatPlan } from './plan.ts';

type ChunkChoice = ChatCompletionChunk['choices'][number];

/** A call forced by naming the function answers "stop", as vLLM does; "tool_calls" is for calls the model chose. */
function finishReason(plan: ChatPlan, output: ChoiceOutput): ChoiceOutput['finishReason'] {
  return typeof plan.request.toolChoice === 'object' && output.finishReason === 'tool_calls'
    ? 'stop'
    : output.finishReason;
}

/**
 * ART 0.5.20+'s per-choice policy provenance (`policy_token_spans`, which its PipelineTrainer requires of every eval
 * answer): a checkpoint's weights never change, so all of a choice's tokens come from one span of one policy.
 */
function policySpans(plan: ChatPlan, output: ChoiceOutput, index: number) {
  if (output.completionTokens === 0) return null;
  const { version, slot } = plan.policy;
  return [
    {
      start_token: 0,
      end_token: output.completionTokens,
      generation_id: `${plan.id}-${index}`,
      policy_version: version,
      lora_slot: slot,
      update_seq: 0,
    },
  ];
}

function usageOf(plan: ChatPlan, completionTokens: number, cachedTokens: number): ChatUsage {
  const prompt = plan.promptIds.length;
  return {
    prompt_tokens: prompt,
    total_tokens: prompt + completionTokens,
    completion_tokens: completionTokens,
    prompt_tokens_details: { cached_tokens: cachedTokens },
  };
}

const completionTokens = (outputs: ChoiceOutput[]) => outputs.reduce((sum, output) => sum + output.completionTokens, 0);

/** One output per choice, reading tokens as this plan's model and request say. */
function choiceOutputs(plan: ChatPlan): ChoiceOutput[] {
  const { request, model } = plan;
  const stopTokenIds = new Set([
    ...plan.generate.stop_token_ids,
    ...(request.sampling.ignore_eos ? [] : model.generation.eos_token_ids),
  ]);
  const thinkingOff = request.templateKwargs.enable_thinking === false;
  return Array.from(
    { length: request.n },
    () =>
      new ChoiceOutput({
        tokenizer: model.tokenizer,
        stop: request.stop,
        includeStopStr: request.includeStopStr,
        skipSpecialTokens: request.skipSpecialTokens,
        stopTokenIds,
        parseTools: request.toolChoice !== 'none',
        toolFormat: model.toolFormat,
        parseReasoning: !thinkingOff,
        includeReasoning: request.includeReasoning,
        logprobs: request.logprobs,
        repetitionDetection: request.repetitionDetection,
      }),
  );
}

/** vLLM's prompt logprobs: the actual token (with its rank) and the top alternatives at each prompt position. */
function promptLogprobs(plan: ChatPlan, event: PromptLogprobsEvent | null): ChatCompletion['prompt_logprobs'] {
  if (!event) return null;
  const tokenizer = plan.model.tokenizer;
  const decode = (id: number) => new TextDecoder().decode(tokenizer.tokenBytes(id) ?? new Uint8Array());
  return event.prompt_logprobs.map((entry, position) => {
    if (!entry) return null;
    const actual = plan.promptIds[position];
    const result: Record<string, { logprob: number; rank: number; decoded_token: string }> = {};
    const rankOf = entry.top.findIndex(([id]) => id === actual);
    result[String(actual)] = {
      logprob: Math.max(-9999, entry.logprob),
      rank: rankOf === -1 ? entry.top.length + 1 : rankOf + 1,
      decoded_token: decode(actual),
    };
    entry.top.forEach(([id, logprob], rank) => {
      if (!(String(id) in result))
        result[String(id)] = { logprob: Math.max(-9999, logprob), rank: rank + 1, decoded_token: decode(id) };
    });
    return result;
  });
}

/** Runs the generation to its end and answers the whole chat.completion. */
export async function completion(plan: ChatPlan, events: AsyncIterable<GenerateEvent>): Promise<ChatCompletion> {
  const outputs = choiceOutputs(plan);
  let promptEvent: PromptLogprobsEvent | null = null;
  let cached = 0;
  for await (const event of events) {
    if (event.type === 'prompt') promptEvent = event;
    else if (event.type === 'tokens') outputs[event.seq].push(event.tokens, event.logprobs, event.top_logprobs);
    else if (event.type === 'finish') outputs[event.seq].finish(event.finish_reason, event.stop_token_id);
    else if (event.type === 'done') cached = event.cached_tokens;
    // Every choice stopped on our side (stop string, repetition): leaving the loop cancels the engine request.
    if (event.type === 'tokens' && outputs.every((output) => output.done)) break;
  }
  for (const output of outputs) if (!output.finishReason) output.finish('length', null);
  const { request } = plan;
  return {
    id: plan.id,
    object: 'chat.completion',
    created: plan.created,
    model: plan.modelName,
    choices: outputs.map((output, index) => ({
      index,
      message: messageOf(plan, output),
      logprobs: request.logprobs ? { content: output.logprobEntries } : null,
      finish_reason: finishReason(plan, output),
      stop_reason: output.stopReason,
      token_ids: request.returnTokenIds ? output.tokenIds : null,
      policy_token_spans: policySpans(plan, output, index),
    })),
    usage: usageOf(plan, completionTokens(outputs), cached),
    service_tier: null,
    system_fingerprint: null,
    prompt_logprobs: promptLogprobs(plan, promptEvent),
    prompt_token_ids: request.returnTokenIds ? plan.promptIds : null,
    kv_transfer_params: null,
  };
}

function messageOf(plan: ChatPlan, output: ChoiceOutput): ChatCompletion['choices'][number]['message'] {
  const message = output.message();
  return {
    role: plan.responseRole,
    content: plan.echoText !== null ? plan.echoText + (message.content ?? '') : message.content,
    refusal: null,
    annotations: null,
    audio: null,
    function_call: null,
    tool_calls: message.tool_calls,
    reasoning: message.reasoning,
  };
}

/** The SSE chunks of a streamed answer (ChunkWriter says which and in what order). */
export async function* chunks(
  plan: ChatPlan,
  events: AsyncIterable<GenerateEvent>,
): AsyncIterable<ChatCompletionChunk> {
  const writer = new ChunkWriter(plan, choiceOutputs(plan));
  for await (const event of events) {
    if (event.type === 'done') writer.cached = event.cached_tokens;
    if (event.type === 'done' || event.type === 'prompt') continue;
    if (!writer.started) yield* writer.start();
    if (writer.finished.has(event.seq)) continue;
    if (event.type === 'finish') {
      yield writer.finish(event.seq, event);
      continue;
    }
    yield* writer.tokens(event);
    if (writer.finished.size === plan.request.n) break;
  }
  yield* writer.end();
}

/** One stream's SSE chunks, in vLLM's order: role chunks, (echo), content chunks, finish chunks, usage. */
class ChunkWriter {
  readonly finished = new Set<number>();
  started = false;
  /** Prompt tokens the engine found cached; known once its `done` arrives. */
  cached = 0;
  private readonly head: Pick<ChatCompletionChunk, 'id' | 'object' | 'created' | 'model'>;

  constructor(
    private readonly plan: ChatPlan,
    private readonly outputs: ChoiceOutput[],
  ) {
    this.head = { id: plan.id, object: 'chat.completion.chunk', created: plan.created, model: plan.modelName };
  }

  private withUsage(chunk: ChatCompletionChunk, index: number | null): ChatCompletionChunk {
    if (!this.plan.request.continuousUsage) return chunk;
    return {
      ...chunk,
      usage: usageOf(this.plan, index === null ? 0 : this.outputs[index].completionTokens, this.cached),
    };
  }

  private choice(
    index: number,
    delta: ChatDelta,
    logprobs: ChatLogprob[] | null,
    tokenIds: number[] | null,
    finish?: ChoiceOutput,
  ): ChatCompletionChunk {
    const { request } = this.plan;
    const choice: ChunkChoice = {
      index,
      delta,
      logprobs: logprobs && request.logprobs ? { content: logprobs } : null,
      finish_reason: finish ? finishReason(this.plan, finish) : null,
      ...(finish ? { stop_reason: finish.stopReason } : {}),
      ...(request.returnTokenIds ? { token_ids: tokenIds } : {}),
    };
    return this.withUsage({ ...this.head, choices: [choice] }, index);
  }

  /** Every choice's role chunk (with the prompt's ids when asked), then the echoed text. */
  *start(): Generator<ChatCompletionChunk> {
    const { request, responseRole, promptIds, echoText } = this.plan;
    this.started = true;
    for (let index = 0; index < request.n; index += 1) {
      const chunk: ChatCompletionChunk = {
        ...this.head,
        choices: [{ index, delta: { role: responseRole, content: '' }, logprobs: null, finish_reason: null }],
      };
      yield this.withUsage(request.returnTokenIds ? { ...chunk, prompt_token_ids: promptIds } : chunk, null);
    }
    if (echoText === null) return;
    for (let index = 0; index < request.n; index += 1)
      yield this.withUsage(
        { ...this.head, choices: [{ index, delta: { content: echoText }, logprobs: null, finish_reason: null }] },
        null,
      );
  }

  /** New tokens of one choice: their delta (or an empty one carrying logprobs and ids), and its finish when they ended it. */
  *tokens(event: TokensEvent): Generator<ChatCompletionChunk> {
    const { request } = this.plan;
    const output = this.outputs[event.seq];
    const { delta, logprobs } = output.push(event.tokens, event.logprobs, event.top_logprobs);
    const empty = Object.keys(delta).length === 0;
    if (!empty || request.logprobs || request.returnTokenIds)
      yield this.choice(event.seq, empty ? { content: '' } : delta, logprobs, event.tokens);
    if (output.done) yield this.finish(event.seq, { finish_reason: 'stop', stop_token_id: null });
  }

  /** A choice's last chunk: what its output still held back, and why it ended. */
  finish(index: number, end: Pick<FinishEvent, 'finish_reason' | 'stop_token_id'>): ChatCompletionChunk {
    this.finished.add(index);
    const output = this.outputs[index];
    const delta = output.finish(end.finish_reason, end.stop_token_id);
    return this.choice(index, delta, null, this.plan.request.returnTokenIds ? [] : null, output);
  }

  /** After the engine's last event: the choices it did not finish end at the length limit; then the usage chunk. */
  *end(): Generator<ChatCompletionChunk> {
    if (!this.started) yield* this.start();
    for (let index = 0; index < this.outputs.length; index += 1)
      if (!this.finished.has(index)) yield this.finish(index, { finish_reason: 'length', stop_token_id: null });
    if (this.plan.request.includeUsage)
      yield { ...this.head, choices: [], usage: usageOf(this.plan, completionTokens(this.outputs), this.cached) };
  }
}
