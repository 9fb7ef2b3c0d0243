/**
 * What a door answers the HTTP layer, whatever its API: a whole JSON body, or a stream of server-sent events that
 * the route writes as they come. Each event says whether it carries generated content (time to first token) and,
 * when it reports them, the answer's completion tokens; a failure mid-stream becomes the door's own error event
 * around its API family's error body; OpenAI's chat-style streams end with `data: [DONE]`.
 */
import { ConversionError } from '../conversation/chat-shapes.ts';
import { AppError, badRequest } from '../errors.ts';

export interface DoorEvent {
  /** The SSE `event:` name (Responses and Anthropic streams name theirs; chat-style streams send data alone). */
  event?: string;
  data: unknown;
  /** Generated content deltas this event carries. */
  contentDeltas?: number;
  /** The answer's completion tokens so far, when this event reports them (a usage chunk, a final message). */
  completionTokens?: number;
}

export type DoorAnswer<Body> =
  | {
      kind: 'json';
      body: Body;
      completionTokens: number /** Time spent waiting on the engine, for Server-Timing. */;
      engineMs: number;
    }
  | {
      kind: 'stream';
      events: AsyncIterable<DoorEvent>;
      cancel(): Promise<void>;
      /** The event a failure mid-stream becomes, around the error body of the door's API family. */
      errorEvent(body: { error: Record<string, unknown> } & Record<string, unknown>): DoorEvent;
      /** Raw text after the last event (`data: [DONE]` for chat-style streams). */
      trailer?: string;
    };

/** Whole answers time the engine from the start of the generation. */
export function engineTimer(): () => number {
  const started = performance.now();
  return () => performance.now() - started;
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
