/**
 * Renders and tokenizes large prompts on a worker thread, so that a conversation of hundreds of kilobytes does
 * not stall the event loop every other request and the health check share (20,000 short messages: ~0.6 s to
 * render and ~0.5 s to encode, measured). Smaller prompts stay on the loop, where they cost less than a round
 * trip. It renders the model's own template only: a request's template is user code and renders in
 * template-sandbox.ts, whose text comes here to be encoded when it is large. Knows tokenizers by their folder
 * (the worker loads each once) and nothing of requests, HTTP or engines.
 */
import { Worker } from 'node:worker_threads';
import { type RenderOptions, TemplateError } from './template.ts';

/** Characters (of the request's messages, tools and documents as JSON, or of prompt text) from which the work leaves the loop: ~1,000 short messages, tens of milliseconds. */
export const LARGE_PROMPT_CHARS = 32 * 1024;

/** The model's template with the request's data, or text a request's template rendered; encoded with that folder's tokenizer. */
export type PromptJob = { folder: string; addSpecialTokens: boolean } & ({ options: RenderOptions } | { text: string });
export type PromptAnswer = { id: number; ids: number[] } | { id: number; error: string; template: boolean };

/**
 * A worker thread does not inherit the loader the server runs under (tsx, registered by `--import`), so the
 * thread registers it itself before importing its TypeScript.
 */
const THREAD_BOOT = `import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))}).then((tsx) => { tsx.register(); return import(${JSON.stringify(new URL('./prompt-thread.ts', import.meta.url).href)}); });`;

interface Pending {
  resolve(ids: number[]): void;
  reject(error: Error): void;
}

export class PromptWorker {
  private worker: Worker | null = null;
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;

  /** The prompt's token ids; a TemplateError (the caller's 400) when the template cannot render the messages. */
  encode(job: PromptJob): Promise<number[]> {
    const worker = this.started();
    const id = this.nextId++;
    return new Promise<number[]>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      worker.ref();
      worker.postMessage({ id, ...job });
    });
  }

  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = null;
    this.failAll(new Error('the server is shutting down'));
    await worker?.terminate();
  }

  /** The running thread, started at the first large prompt. */
  private started(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(THREAD_BOOT, { eval: true });
    worker.on('message', (answer: PromptAnswer) => this.settle(answer));
    worker.on('error', (error) => this.failAll(new Error(`the prompt worker failed: ${error.message}`)));
    worker.on('exit', () => {
      if (this.worker === worker) this.worker = null;
      this.failAll(new Error('the prompt worker stopped'));
    });
    worker.unref();
    this.worker = worker;
    return worker;
  }

  private settle(answer: PromptAnswer): void {
    const pending = this.pending.get(answer.id);
    if (!pending) return;
    this.pending.delete(answer.id);
    // An idle thread must not keep the server's process alive.
    if (this.pending.size === 0) this.worker?.unref();
    if ('ids' in answer) pending.resolve(answer.ids);
    else pending.reject(answer.template ? new TemplateError(answer.error) : new Error(answer.error));
  }

  private failAll(error: Error): void {
    for (const pending of this.pending.values()) pending.reject(error);
    this.pending.clear();
  }
}
