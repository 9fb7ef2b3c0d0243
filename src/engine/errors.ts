/** The one error type of src/engine: the engine's error replies and the client's own failures. */
import type { ReplyErrorCode } from './protocol.ts';

/**
 * `engine_exited`: the process died (or the connection closed) with the request in flight.
 * `engine_unavailable`: no engine to send it to (stopped, or not ready in time).
 */
export type EngineErrorCode = ReplyErrorCode | 'engine_exited' | 'engine_unavailable';

export class EngineError extends Error {
  override readonly name = 'EngineError';

  constructor(
    readonly code: EngineErrorCode,
    message: string,
  ) {
    super(message);
  }
}
