/**
 * The completions door's answer, from the one response assembly (../generation.ts): the whole `Completion` or its
 * `CompletionChunk`s as vLLM sends them (api/completions.ts), choices numbered prompt by prompt. Echo puts the
 * prompt's text (and, with logprobs, its tokens' logprobs, the first null) before the generated text; `token_ids`
 * and `prompt_token_ids` carry the exact ids when asked. Refuses to know how the request was checked.
 */
import type { ChatLogprob } from '../../api/chat.ts';
import type { Completion, CompletionChunk, CompletionLogprobs } from '../../api/completions.ts';
import type { PromptLogprobsEvent } from '../../engine/protocol.ts';
import type { Collected, Step } from '../generation.ts';
import { completionTokens, promptLogprobs, usageOf } from '../openai-parts.ts';
import type { ChoiceOutput } from '../output.ts';
import type { GenerationPlan } from '../plan.ts';
import type { CompletionRequest } from './request.ts';

type ChunkChoice = CompletionChunk['choices'][number];

/** One token's completions-style logprob: its text, logprob and top alternatives (null where there are none). */
interface TokenLogprob {
  token: string;
  logprob: number | null;
  top: Record<string, number> | null;
}

const LOGPROB_FLOOR = -9999;

/** What a completion's choices share: the request, a plan per prompt, each prompt's echoed text. */
export interface CompletionShape {
  request: CompletionRequest;
  plans: GenerationPlan[];
  /** The text each prompt's choices open with when the request echoes (empty otherwise). */
  echoTexts: string[];
}

const planOf = (shape: CompletionShape, index: number) => shape.plans[Math.floor(index / shape.request.n)];

/** Sampled tokens' entries, the sampled token first among its alternatives, as vLLM's top_logprobs dicts hold it. */
function sampledLogprobs(entries: readonly ChatLogprob[]): TokenLogprob[] {
  return entries.map((entry) => ({
    token: entry.token,
    logprob: entry.logprob,
    top: { [entry.token]: entry.logprob, ...Object.fromEntries(entry.top_logprobs.map((t) => [t.token, t.logprob])) },
  }));
}

/** The prompt's tokens' entries for an echo: none for the first token, the top alternatives for the rest. */
function echoedLogprobs(shape: CompletionShape, plan: GenerationPlan, event: PromptLogprobsEvent | null | undefined) {
  const { logprobs } = shape.request;
  const tokenizer = plan.model.tokenizer;
  const text = (id: number) =>
    logprobs?.asTokenIds ? `token_id:${id}` : new TextDecoder().decode(tokenizer.tokenBytes(id) ?? new Uint8Array());
  return plan.promptIds.map((id, position): TokenLogprob => {
    const entry = event?.prompt_logprobs[position];
    if (!entry) return { token: text(id), logprob: null, top: null };
    const logprob = Math.max(LOGPROB_FLOOR, entry.logprob);
    const top = entry.top.slice(0, logprobs?.top ?? 0).map(([other, value]) => [text(other), value] as const);
    return { token: text(id), logprob, top: { [text(id)]: logprob, ...Object.fromEntries(top) } };
  });
}

/** vLLM's shape: parallel lists, each token's text offset counted from `offset` by the tokens' string lengths. */
function logprobsOf(entries: readonly TokenLogprob[], offset: number): CompletionLogprobs {
  const textOffset: number[] = [];
  let at = offset;
  for (const entry of entries) {
    textOffset.push(at);
    at += entry.token.length;
  }
  return {
    text_offset: textOffset,
    token_logprobs: entries.map((entry) => entry.logprob),
    tokens: entries.map((entry) => entry.token),
    top_logprobs: entries.map((entry) => entry.top),
  };
}

/** Why a choice ended; completions parse no tool calls, so never `tool_calls`. */
function finishOf(shape: CompletionShape, output: ChoiceOutput): Completion['choices'][number]['finish_reason'] {
  if (shape.request.echoOnly) return 'length';
  return output.finishReason === 'tool_calls' ? 'stop' : output.finishReason;
}

/** A choice's generated text; nothing when the request asked for the echoed prompt alone. */
const generatedText = (shape: CompletionShape, output: ChoiceOutput) =>
  shape.request.echoOnly ? '' : (output.message().content ?? '');

/** The whole text_completion of a finished generation. */
export function completion(shape: CompletionShape, outputs: ChoiceOutput[], collected: Collected): Completion {
  const { request, plans } = shape;
  const choices = outputs.map((output, index) => {
    const plan = planOf(shape, index);
    const prompt = plans.indexOf(plan);
    const echoed =
      request.echo && request.logprobs ? echoedLogprobs(shape, plan, collected.promptLogprobs[prompt]) : [];
    const sampled = request.echoOnly ? [] : sampledLogprobs(output.logprobEntries);
    return {
      index,
      text: shape.echoTexts[prompt] + generatedText(shape, output),
      logprobs: request.logprobs ? logprobsOf([...echoed, ...sampled], 0) : null,
      finish_reason: finishOf(shape, output),
      stop_reason: request.echoOnly ? null : output.stopReason,
      prompt_logprobs: promptLogprobs(plan, collected.promptLogprobs[prompt]),
      prompt_token_ids: request.returnTokenIds ? plan.promptIds : null,
      token_ids: request.returnTokenIds ? (request.echoOnly ? [] : output.tokenIds) : null,
    };
  });
  const promptTokens = plans.reduce((sum, plan) => sum + plan.promptIds.length, 0);
  return {
    id: plans[0].id,
    object: 'text_completion',
    created: plans[0].created,
    model: plans[0].modelName,
    choices,
    usage: usageOf(promptTokens, request.echoOnly ? 0 : completionTokens(outputs), collected.cachedTokens),
    service_tier: null,
    system_fingerprint: null,
    kv_transfer_params: null,
  };
}

/** The SSE chunks of a streamed completion, from the generation's steps. */
export async function* chunks(
  shape: CompletionShape,
  outputs: ChoiceOutput[],
  generation: AsyncIterable<Step>,
): AsyncIterable<CompletionChunk> {
  const writer = new ChunkWriter(shape, outputs);
  for await (const step of generation) {
    if (step.type === 'prompt') writer.prompts[step.prompt] = step.event;
    else if (step.type === 'cached') writer.cached = step.cachedTokens;
    else if (step.type === 'start') yield* writer.start();
    else if (step.type === 'tokens' && !shape.request.echoOnly) yield* writer.tokens(step);
    else if (step.type === 'finish') yield writer.finish(step);
    else if (step.type === 'end') yield* writer.end();
  }
}

/** One stream's chunks: each choice's opening (echo, prompt ids), its text as it comes, its finish, then usage. */
class ChunkWriter {
  readonly prompts: (PromptLogprobsEvent | undefined)[] = [];
  cached = 0;
  /** Per choice, the length of the text it has sent: the next logprob entry's text offset. */
  private readonly sent: number[];
  private readonly head: Pick<CompletionChunk, 'id' | 'object' | 'created' | 'model'>;

  constructor(
    private readonly shape: CompletionShape,
    private readonly outputs: ChoiceOutput[],
  ) {
    const [plan] = shape.plans;
    this.head = { id: plan.id, object: 'text_completion', created: plan.created, model: plan.modelName };
    this.sent = outputs.map(() => 0);
  }

  private chunk(choice: ChunkChoice): CompletionChunk {
    const { request, plans } = this.shape;
    if (!request.continuousUsage) return { ...this.head, choices: [choice] };
    const prompt = planOf(this.shape, choice.index).promptIds.length;
    const completion = request.echoOnly ? 0 : this.outputs[choice.index].completionTokens;
    return {
      ...this.head,
      choices: [choice],
      usage: usageOf(prompt, completion, plans.length === 1 ? this.cached : 0),
    };
  }

  private logprobs(entries: TokenLogprob[], index: number): CompletionLogprobs | null {
    return this.shape.request.logprobs ? logprobsOf(entries, this.sent[index]) : null;
  }

  /** Every choice's first chunk: the echoed prompt (with its logprobs) and the prompt's ids, when asked. */
  *start(): Generator<CompletionChunk> {
    const { request, plans, echoTexts } = this.shape;
    for (let index = 0; index < this.outputs.length; index += 1) {
      const plan = planOf(this.shape, index);
      const prompt = plans.indexOf(plan);
      if (!request.echo && !request.returnTokenIds) continue;
      const echoed = request.echo ? echoedLogprobs(this.shape, plan, this.prompts[prompt]) : [];
      const choice: ChunkChoice = {
        index,
        text: echoTexts[prompt],
        logprobs: request.echo ? this.logprobs(echoed, index) : null,
        finish_reason: null,
        ...(request.returnTokenIds ? { prompt_token_ids: plan.promptIds, token_ids: [] } : {}),
      };
      this.sent[index] += echoTexts[prompt].length;
      yield this.chunk(choice);
    }
  }

  /** New tokens of one choice: their text, or an empty text carrying logprobs and ids. */
  *tokens(step: Extract<Step, { type: 'tokens' }>): Generator<CompletionChunk> {
    const { request } = this.shape;
    const text = step.delta.content ?? '';
    if (text === '' && !request.logprobs && !request.returnTokenIds) return;
    const choice: ChunkChoice = {
      index: step.index,
      text,
      logprobs: this.logprobs(sampledLogprobs(step.logprobs), step.index),
      finish_reason: null,
      ...(request.returnTokenIds ? { token_ids: step.tokens } : {}),
    };
    this.sent[step.index] += text.length;
    yield this.chunk(choice);
  }

  /** A choice's last chunk: what its output still held back, and why it ended. */
  finish(step: Extract<Step, { type: 'finish' }>): CompletionChunk {
    const { request } = this.shape;
    const text = request.echoOnly ? '' : (step.delta.content ?? '');
    return this.chunk({
      index: step.index,
      text,
      logprobs: null,
      finish_reason: finishOf(this.shape, step.output),
      stop_reason: request.echoOnly ? null : step.output.stopReason,
      ...(request.returnTokenIds ? { token_ids: [] } : {}),
    });
  }

  /** The usage chunk, when asked. */
  *end(): Generator<CompletionChunk> {
    const { request, plans } = this.shape;
    if (!request.includeUsage) return;
    const prompt = plans.reduce((sum, plan) => sum + plan.promptIds.length, 0);
    const completion = request.echoOnly ? 0 : completionTokens(this.outputs);
    yield { ...this.head, choices: [], usage: usageOf(prompt, completion, this.cached) };
  }
}
