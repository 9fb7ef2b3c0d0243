/**
 * What a door answers the HTTP layer, whatever its API: a whole JSON body, or a stream of server-sent events that
 * the route writes as they come. Each event says whether it carries generated content (time to first token) and,
 * when it reports them, the answer's completion tokens; a failure mid-stream becomes the door's own error event
 * around its API family's error body; OpenAI's chat-style streams end with `data: [DONE]`.
 */

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
