/**
 * A turn of the event loop for work done in chunks on it (rows written in batches, say): awaiting a resolved
 * promise runs no timer or socket callback in between, a macrotask does.
 */
export function yieldToLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
