/**
 * What a door answers the HTTP layer, whatever its API: a whole JSON body, or a stream of server-sent events that
 * the route writes as they come. Each event says whether it carries generated content (time to first token) and,
 * when it reports them, the answer's completion tokens; a failure mid-stream becomes the door's own error event
 * around its API family's error body; OpenAI's chat-style streams end with `data: [DONE]`.
 */
import { ConversionError } from '../conversation/chat-shapes.ts';
import { AppError, badRequest } from '../errors.ts';
import { type Collected, collect, type Running, type Step, streamSteps } from './generation.ts';
import type { ChoiceOutput } from './output.ts';
import type { GenerationPlan } from './plan.ts';

export interface DoorEvent {
  /** The SSE `event:` name (Responses and Anthropic streams name theirs; chat-style streams send data alone). */
  event?: string;
  data: unknown;
  /** Generated content deltas this event carries. */
  contentDeltas?: number;
  /** The answer's completion tokens so far, when this event reports them (a usage chunk, a final message). */
  completionTokens?: number;
}

type ErrorBody = { error: Record<string, unknown> } & Record<string, unknown>;

export type DoorAnswer<Body> =
  | {
      kind: 'json';
      body: Body;
      completionTokens: number;
      /** Time spent waiting on the engine, for Server-Timing. */
      engineMs: number;
    }
  | ({ kind: 'stream'; events: AsyncIterable<DoorEvent>; cancel(): Promise<void> } & StreamFraming);

/** How a door frames its stream: the event a failure mid-stream becomes, and what follows the last event. */
export interface StreamFraming {
  /** The event a failure mid-stream becomes, around the error body of the door's API family. */
  errorEvent(body: ErrorBody): DoorEvent;
  /** Raw text after the last event (`data: [DONE]` for chat-style streams). */
  trailer?: string;
}

/** OpenAI's chat-style framing (chat completions, completions): data-only events, `[DONE]` last. */
export const CHAT_STYLE: StreamFraming = { errorEvent: (error) => ({ data: error }), trailer: 'data: [DONE]\n\n' };

/** How a door shapes the one assembly's outputs: whole, and as its stream's events. */
export interface DoorShaping<Body> {
  whole(
    collected: Collected,
  ): { body: Body; completionTokens: number } | Promise<{ body: Body; completionTokens: number }>;
  events(steps: AsyncIterable<Step>): AsyncIterable<DoorEvent>;
  framing: StreamFraming;
}

/**
 * A running generation answered: collected and shaped whole (a client that goes away cancels it), or its steps
 * shaped into the door's events as they come.
 */
export async function answer<Body>(
  generation: { plan: GenerationPlan; running: Running; outputs: ChoiceOutput[] },
  stream: boolean,
  disconnected: AbortSignal | undefined,
  shaping: DoorShaping<Body>,
): Promise<DoorAnswer<Body>> {
  const { plan, running, outputs } = generation;
  if (stream) {
    const events = shaping.events(streamSteps(plan, running, outputs));
    return { kind: 'stream', events, cancel: running.cancel, ...shaping.framing };
  }
  const started = performance.now();
  const collected = await collect(plan, running, outputs, disconnected);
  return { kind: 'json', ...(await shaping.whole(collected)), engineMs: performance.now() - started };
}

/**
 * A door that reads its request into a chat completion body (Responses, Messages) has the chat door's checks name
 * the fields of its own request: `names` maps a chat body field to the door's (a missing name keeps the field), and
 * a conversion's refusal is a 400 naming the field it found at fault.
 */
export function inDoorTerms(error: unknown, names: Readonly<Record<string, string>>): unknown {
  if (error instanceof ConversionError) return badRequest(error.message, error.param);
  if (!(error instanceof AppError) || error.problems.length === 0) return error;
  const problems = error.problems.map((problem) => {
    const [root, field, ...rest] = problem.loc;
    const renamed = names[String(field)];
    return renamed === undefined ? problem : { ...problem, loc: [root, ...renamed.split('.'), ...rest] };
  });
  return new AppError(error.code, error.message, problems);
}
