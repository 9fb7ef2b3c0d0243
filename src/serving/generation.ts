/**
 * The one response assembly under every door: the engine's events read into one output per choice (output.ts),
 * either whole (`collect`) or as steps a door turns into its own stream events (`steps`: start, each choice's new
 * text and tokens, each choice's finish, end). A client that goes away cancels the generation; a constraint that
 * reaches llguidance's limits only while decoding is still the request's 400. Several prompts (a completion's
 * list) decode as one merged generation whose choices are numbered prompt by prompt. Refuses to know any wire shape.
 */
import type { ChatLogprob } from '../api/chat.ts';
import { EngineError } from '../engine/errors.ts';
import type { GenerateStream } from '../engine/generate-stream.ts';
import type { GenerateEvent, PromptLogprobsEvent } from '../engine/protocol.ts';
import { badRequest } from '../errors.ts';
import { ChoiceOutput, type OutputDelta } from './output.ts';
import type { GenerationPlan } from './plan.ts';

/** An engine event; a prompt's logprobs say which prompt of a merged generation they belong to. */
export type ServingEvent = Exclude<GenerateEvent, PromptLogprobsEvent> | (PromptLogprobsEvent & { prompt?: number });

/** A running generation: its events and the way to stop it. */
export interface Running {
  events: AsyncIterable<ServingEvent>;
  cancel(): Promise<void>;
}

/** One output per choice of each plan (several plans: a completion's prompts, `n` choices each), read as the plan says. */
export function choiceOutputs(plans: readonly GenerationPlan[]): ChoiceOutput[] {
  return plans.flatMap((plan) => {
    const { request, model, reading } = plan;
    const stopTokenIds = new Set([
      ...plan.generate.stop_token_ids,
      ...(request.sampling.ignore_eos ? [] : model.generation.eos_token_ids),
    ]);
    return Array.from(
      { length: request.n },
      () =>
        new ChoiceOutput({
          tokenizer: model.tokenizer,
          stop: request.stop,
          includeStopStr: request.includeStopStr,
          skipSpecialTokens: request.skipSpecialTokens,
          stopTokenIds,
          parseTools: reading.tools,
          toolFormat: model.toolFormat,
          parseReasoning: reading.reasoning,
          includeReasoning: reading.includeReasoning,
          logprobs: request.logprobs,
          repetitionDetection: request.repetitionDetection,
        }),
    );
  });
}

/** What a whole generation leaves besides its outputs: each prompt's logprobs (when asked) and the cached tokens. */
export interface Collected {
  promptLogprobs: (PromptLogprobsEvent | null)[];
  cachedTokens: number;
}

/** Runs the generation to its end into `outputs`; a client that goes away (`disconnected`) cancels it. */
export async function collect(
  plan: GenerationPlan,
  running: Running,
  outputs: ChoiceOutput[],
  disconnected?: AbortSignal,
): Promise<Collected> {
  const cancel = () => void running.cancel().catch(() => undefined);
  if (disconnected?.aborted) cancel();
  else disconnected?.addEventListener('abort', cancel, { once: true });
  try {
    return await readAll(running.events, outputs);
  } catch (error) {
    throw asRequestError(plan, error);
  } finally {
    disconnected?.removeEventListener('abort', cancel);
  }
}

async function readAll(events: AsyncIterable<ServingEvent>, outputs: ChoiceOutput[]): Promise<Collected> {
  const collected: Collected = { promptLogprobs: [], cachedTokens: 0 };
  for await (const event of events) {
    if (event.type === 'prompt') collected.promptLogprobs[event.prompt ?? 0] = event;
    else if (event.type === 'tokens') outputs[event.seq].push(event.tokens, event.logprobs, event.top_logprobs);
    else if (event.type === 'finish') outputs[event.seq].finish(event.finish_reason, event.stop_token_id);
    else if (event.type === 'done') collected.cachedTokens += event.cached_tokens;
    // Every choice stopped on our side (stop string, repetition): leaving the loop cancels the engine request.
    if (event.type === 'tokens' && outputs.every((output) => output.done)) break;
  }
  for (const output of outputs) if (!output.finishReason) output.finish('length', null);
  return collected;
}

/** A grammar that reached llguidance's limits only while decoding is still the request's constraint's fault. */
function asRequestError(plan: GenerationPlan, error: unknown): unknown {
  const constraint = plan.request.constraint;
  if (
    constraint &&
    error instanceof EngineError &&
    error.code === 'bad_request' &&
    error.message.startsWith('constraint: ')
  )
    return badRequest(`${constraint.param}: ${error.message}`, constraint.param);
  return error;
}

/** One step of a streamed generation, as every door's stream is built from it. */
export type Step =
  /** Before the first output (or at the end, when none came). */
  | { type: 'start' }
  /** A prompt's logprobs (which prompt of a merged generation: `prompt`), before its choices' tokens. */
  | { type: 'prompt'; prompt: number; event: PromptLogprobsEvent }
  /** New tokens of one choice and what they made visible. */
  | { type: 'tokens'; index: number; delta: OutputDelta; logprobs: ChatLogprob[]; tokens: number[] }
  /** A choice ended: what its output still held back, and the output (finish reason, tokens) whole. */
  | { type: 'finish'; index: number; delta: OutputDelta; output: ChoiceOutput }
  /** The engine's count of prompt tokens it found cached (every prompt's so far), as soon as it is known. */
  | { type: 'cached'; cachedTokens: number }
  /** After every choice finished. */
  | { type: 'end'; cachedTokens: number };

/** The steps of a streamed generation into `outputs`; choices the engine did not finish end at the length limit. */
export async function* steps(events: AsyncIterable<ServingEvent>, outputs: ChoiceOutput[]): AsyncGenerator<Step> {
  const finished = new Set<number>();
  let started = false;
  let cachedTokens = 0;
  const finish = (index: number, reason: 'stop' | 'length', stopTokenId: number | null): Step => {
    finished.add(index);
    return { type: 'finish', index, delta: outputs[index].finish(reason, stopTokenId), output: outputs[index] };
  };
  for await (const event of events) {
    if (event.type === 'done') {
      cachedTokens += event.cached_tokens;
      yield { type: 'cached', cachedTokens };
    }
    if (event.type === 'prompt') yield { type: 'prompt', prompt: event.prompt ?? 0, event };
    if (event.type === 'done' || event.type === 'prompt') continue;
    if (!started) yield { type: 'start' };
    started = true;
    if (finished.has(event.seq)) continue;
    if (event.type === 'finish') {
      yield finish(event.seq, event.finish_reason, event.stop_token_id);
      continue;
    }
    const output = outputs[event.seq];
    const { delta, logprobs } = output.push(event.tokens, event.logprobs, event.top_logprobs);
    yield { type: 'tokens', index: event.seq, delta, logprobs, tokens: event.tokens };
    // A stop string or repetition ended it on our side: its finish comes now, as a stop.
    if (output.done) yield finish(event.seq, 'stop', null);
    if (finished.size === outputs.length) break;
  }
  if (!started) yield { type: 'start' };
  for (let index = 0; index < outputs.length; index += 1) if (!finished.has(index)) yield finish(index, 'length', null);
  yield { type: 'end', cachedTokens };
}

/** The steps with a failure turned into the request's error when it is one (see `asRequestError`). */
export async function* streamSteps(plan: GenerationPlan, running: Running, outputs: ChoiceOutput[]) {
  try {
    yield* steps(running.events, outputs);
  } catch (error) {
    throw asRequestError(plan, error);
  }
}

/**
 * Several prompts' generations as one: their events interleaved as they arrive, prompt i's choice j numbered
 * `i * n + j`; stopping early (or cancelling) stops every one of them.
 */
export function mergeGenerations(streams: readonly GenerateStream[], n: number): Running {
  if (streams.length === 1) return { events: streams[0], cancel: () => streams[0].cancel() };
  async function* events(): AsyncGenerator<ServingEvent> {
    const iterators = streams.map((stream) => stream[Symbol.asyncIterator]());
    const pending = new Map(iterators.map((iterator, index) => [index, next(iterator, index)]));
    try {
      while (pending.size > 0) {
        const { index, result } = await Promise.race(pending.values());
        if (result.done) {
          pending.delete(index);
          continue;
        }
        pending.set(index, next(iterators[index], index));
        const event = result.value;
        if (event.type === 'prompt') yield { ...event, prompt: index };
        else if (event.type === 'tokens' || event.type === 'finish') yield { ...event, seq: index * n + event.seq };
        else yield event;
      }
    } finally {
      await Promise.all(iterators.map((iterator) => iterator.return?.().catch(() => undefined)));
    }
  }
  return {
    events: events(),
    cancel: async () => {
      await Promise.all(streams.map((stream) => stream.cancel()));
    },
  };
}

const next = (iterator: AsyncIterator<GenerateEvent>, index: number) =>
  iterator.next().then((result) => ({ index, result }));
