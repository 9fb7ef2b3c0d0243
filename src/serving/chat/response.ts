/**
 * The chat completions door's answer, from the one response assembly (../generation.ts): the whole
 * `ChatCompletion`, or its `ChatCompletionChunk`s in vLLM's order (role chunks, echo, content, finishes, usage);
 * both shapes are declared in api/chat.ts. Refuses to know how the request was checked or how chunks travel.
 */
import type { ChatCompletion, ChatCompletionChunk, ChatDelta, ChatLogprob } from '../../api/chat.ts';
import type { Collected, Step } from '../generation.ts';
import { completionTokens, promptLogprobs, usageOf } from '../openai-parts.ts';
import type { ChoiceOutput } from '../output.ts';
import type { ChatPlan } from '../plan.ts';

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

/** The whole chat.completion of a finished generation. */
export function completion(plan: ChatPlan, outputs: ChoiceOutput[], collected: Collected): ChatCompletion {
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
    usage: usageOf(plan.promptIds.length, completionTokens(outputs), collected.cachedTokens),
    service_tier: null,
    system_fingerprint: null,
    prompt_logprobs: promptLogprobs(plan, collected.promptLogprobs[0]),
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

/** The SSE chunks of a streamed answer, from the generation's steps (ChunkWriter says which and in what order). */
export async function* chunks(
  plan: ChatPlan,
  outputs: ChoiceOutput[],
  generation: AsyncIterable<Step>,
): AsyncIterable<ChatCompletionChunk> {
  const writer = new ChunkWriter(plan, outputs);
  for await (const step of generation) {
    if (step.type === 'start') yield* writer.start();
    else if (step.type === 'tokens') yield* writer.tokens(step);
    else if (step.type === 'finish') yield writer.finish(step);
    else if (step.type === 'cached') writer.cached = step.cachedTokens;
    else if (step.type === 'end') yield* writer.end(step.cachedTokens);
  }
}

/** One stream's SSE chunks, in vLLM's order: role chunks, (echo), content chunks, finish chunks, usage. */
class ChunkWriter {
  private readonly head: Pick<ChatCompletionChunk, 'id' | 'object' | 'created' | 'model'>;
  /** Prompt tokens the engine found cached; known once its `done` arrives. */
  cached = 0;

  constructor(
    private readonly plan: ChatPlan,
    private readonly outputs: ChoiceOutput[],
  ) {
    this.head = { id: plan.id, object: 'chat.completion.chunk', created: plan.created, model: plan.modelName };
  }

  private withUsage(chunk: ChatCompletionChunk, index: number | null): ChatCompletionChunk {
    if (!this.plan.request.continuousUsage) return chunk;
    const completion = index === null ? 0 : this.outputs[index].completionTokens;
    return { ...chunk, usage: usageOf(this.plan.promptIds.length, completion, this.cached) };
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

  /** New tokens of one choice: their delta, or an empty one carrying logprobs and ids. */
  *tokens(step: Extract<Step, { type: 'tokens' }>): Generator<ChatCompletionChunk> {
    const { request } = this.plan;
    const empty = Object.keys(step.delta).length === 0;
    if (!empty || request.logprobs || request.returnTokenIds)
      yield this.choice(step.index, empty ? { content: '' } : step.delta, step.logprobs, step.tokens);
  }

  /** A choice's last chunk: what its output still held back, and why it ended. */
  finish(step: Extract<Step, { type: 'finish' }>): ChatCompletionChunk {
    return this.choice(step.index, step.delta, null, this.plan.request.returnTokenIds ? [] : null, step.output);
  }

  /** After the engine's last event: the usage chunk, when asked. */
  *end(cachedTokens: number): Generator<ChatCompletionChunk> {
    if (this.plan.request.includeUsage)
      yield {
        ...this.head,
        choices: [],
        usage: usageOf(this.plan.promptIds.length, completionTokens(this.outputs), cachedTokens),
      };
  }
}
