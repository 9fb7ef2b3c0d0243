/**
 * The stream of one `generate` request: replies are buffered until the consumer pulls them, an
 * error reply ends the iteration by throwing, and a consumer that stops early (break, return, a
 * thrown error in its loop) cancels the request in the engine so its batch slot is freed.
 */
import type { EngineError } from './errors.ts';
import type { GenerateEvent } from './protocol.ts';

export interface GenerateStream extends AsyncIterable<GenerateEvent> {
  /** Stops the generation within one decode step; the iteration then throws `cancelled`. */
  cancel(): Promise<void>;
}

type State = 'open' | 'ended' | 'failed' | 'abandoned';

export class ReplyStream implements GenerateStream {
  private readonly buffered: GenerateEvent[] = [];
  private waiter:
    | { resolve(result: IteratorResult<GenerateEvent>): void; reject(error: EngineError): void }
    | undefined;
  private state: State = 'open';
  private failure: EngineError | undefined;

  constructor(
    readonly id: string,
    private readonly sendCancel: () => Promise<unknown>,
  ) {}

  push(event: GenerateEvent): void {
    if (this.state !== 'open') return;
    if (this.waiter) {
      this.waiter.resolve({ value: event, done: false });
      this.waiter = undefined;
    } else {
      this.buffered.push(event);
    }
  }

  end(): void {
    if (this.state !== 'open') return;
    this.state = 'ended';
    this.waiter?.resolve({ value: undefined, done: true });
    this.waiter = undefined;
  }

  fail(error: EngineError): void {
    if (this.state !== 'open') return;
    this.state = 'failed';
    this.failure = error;
    this.waiter?.reject(error);
    this.waiter = undefined;
  }

  async cancel(): Promise<void> {
    if (this.state === 'open') await this.sendCancel();
  }

  [Symbol.asyncIterator](): AsyncIterator<GenerateEvent> {
    return {
      next: () => this.next(),
      return: async () => {
        this.abandon();
        return { value: undefined, done: true };
      },
    };
  }

  private next(): Promise<IteratorResult<GenerateEvent>> {
    const event = this.buffered.shift();
    if (event) return Promise.resolve({ value: event, done: false });
    if (this.state === 'failed' && this.failure) {
      const failure = this.failure;
      this.failure = undefined; // thrown once; the iterator is finished afterwards
      return Promise.reject(failure);
    }
    if (this.state !== 'open') return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
    });
  }

  private abandon(): void {
    const wasOpen = this.state === 'open';
    this.state = 'abandoned';
    this.buffered.length = 0;
    // Best effort: if the engine is gone, the request is gone with it.
    if (wasOpen) this.sendCancel().catch(() => undefined);
  }
}

/**
 * A generate stream whose connection is not there yet (the engine is starting or restarting).
 * The request goes out as soon as the connection is; iterating, cancelling and stopping early
 * behave as on a `ReplyStream`, and a connection that never comes ends the iteration with its error.
 */
export class DeferredStream implements GenerateStream {
  private readonly inner: Promise<ReplyStream>;

  constructor(open: () => Promise<ReplyStream>) {
    this.inner = open();
    this.inner.catch(() => undefined); // surfaced by next()
  }

  async cancel(): Promise<void> {
    await this.inner.then(
      (stream) => stream.cancel(),
      () => undefined,
    );
  }

  [Symbol.asyncIterator](): AsyncIterator<GenerateEvent> {
    let iterator: AsyncIterator<GenerateEvent> | undefined;
    return {
      next: async () => {
        iterator ??= (await this.inner)[Symbol.asyncIterator]();
        return iterator.next();
      },
      return: async () => {
        // Don't make the consumer wait for a connection it no longer needs.
        void this.inner.then(
          (stream) => stream[Symbol.asyncIterator]().return?.(),
          () => undefined,
        );
        return { value: undefined, done: true };
      },
    };
  }
}
