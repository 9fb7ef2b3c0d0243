/**
 * A worker thread that runs functions of this server's own modules off the event loop, so that work proportional
 * to a request's size (rendering and tokenizing a long prompt, parsing and checking a body of tens of megabytes)
 * never holds the loop every other request and the health check share. A task names a module and one of its
 * exported functions; the thread imports each module once, calls the function with the input (structured-cloned)
 * and answers its output, whose typed arrays travel without a copy. Callers send only work big enough to be worth
 * the round trip, and outputs that cost little to receive (strings, typed arrays, small objects): a deep object
 * tree costs the loop as much to receive as to build. A function's own failures are part of its output; what the
 * thread throws is a bug and rejects. Knows nothing of prompts, bodies or HTTP.
 */
import { Worker } from 'node:worker_threads';

/** A function of one of our modules, run by `ThreadWorker.run`: its input and output types ride along. */
export interface ThreadTask<Input, Output> {
  module: string;
  name: string;
  /** Never set: carries the types. */
  types?: (input: Input) => Output;
}

/** The task of `name`, exported by the module at `module` (`new URL('./x.ts', import.meta.url)`). */
export function threadTask<F extends (input: never) => unknown>(
  module: URL,
  name: string,
): ThreadTask<Parameters<F>[0], Awaited<ReturnType<F>>> {
  return { module: module.href, name };
}

export interface ThreadJob {
  id: number;
  module: string;
  name: string;
  input: unknown;
}
export type ThreadAnswer = { id: number; output: unknown } | { id: number; crash: string };

/**
 * A worker thread does not inherit the loader the server runs under (tsx, registered by `--import`), so the
 * thread registers it itself before importing its TypeScript.
 */
const THREAD_BOOT = `import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))}).then((tsx) => { tsx.register(); return import(${JSON.stringify(new URL('./thread.ts', import.meta.url).href)}); });`;

interface Pending {
  resolve(output: unknown): void;
  reject(error: Error): void;
}

export class ThreadWorker {
  private worker: Worker | null = null;
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;

  /** Runs `task` on the thread (started at the first call); `transfer` lists buffers of `input` to move there. */
  run<Input, Output>(task: ThreadTask<Input, Output>, input: Input, transfer: ArrayBuffer[] = []): Promise<Output> {
    const worker = this.started();
    const id = this.nextId++;
    return new Promise<Output>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (output: unknown) => void, reject });
      worker.ref();
      const job: ThreadJob = { id, module: task.module, name: task.name, input };
      worker.postMessage(job, transfer);
    });
  }

  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = null;
    this.failAll(new Error('the server is shutting down'));
    await worker?.terminate();
  }

  private started(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(THREAD_BOOT, { eval: true });
    worker.on('message', (answer: ThreadAnswer) => this.settle(answer));
    worker.on('error', (error) => this.failAll(new Error(`the worker thread failed: ${error.message}`)));
    worker.on('exit', () => {
      if (this.worker === worker) this.worker = null;
      this.failAll(new Error('the worker thread stopped'));
    });
    worker.unref();
    this.worker = worker;
    return worker;
  }

  private settle(answer: ThreadAnswer): void {
    const pending = this.pending.get(answer.id);
    if (!pending) return;
    this.pending.delete(answer.id);
    // An idle thread must not keep the server's process alive.
    if (this.pending.size === 0) this.worker?.unref();
    if ('output' in answer) pending.resolve(answer.output);
    else pending.reject(new Error(answer.crash));
  }

  private failAll(error: Error): void {
    for (const pending of this.pending.values()) pending.reject(error);
    this.pending.clear();
  }
}
