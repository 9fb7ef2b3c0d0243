/**
 * Polling, the one way tests wait for something the system does on its own time (a job ending, an engine
 * restarting, a slot freeing): check until the answer is truthy, or fail naming what never happened.
 */

export interface PollOptions {
  /** How long to keep checking (30 s unless given). */
  timeoutMs?: number;
  /** The pause between checks (25 ms unless given); the first check is immediate. */
  intervalMs?: number;
}

/**
 * The first truthy answer of `check`. After `timeoutMs` it throws "timed out after … waiting for <what>";
 * `what` may be a function, called then, to describe the last state seen.
 */
export async function waitFor<T>(
  what: string | (() => string),
  check: () => T | Promise<T>,
  options: PollOptions = {},
): Promise<NonNullable<T>> {
  const { timeoutMs = 30_000, intervalMs = 25 } = options;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const answer = await check();
    if (answer) return answer as NonNullable<T>;
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'function' ? what() : what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
