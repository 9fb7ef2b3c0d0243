/**
 * Renders and tokenizes large prompts on a worker thread (offload/worker.ts), so that a conversation of hundreds
 * of kilobytes does not stall the event loop every other request and the health check share (20,000 short
 * messages: ~0.6 s to render and ~0.5 s to encode, measured). Smaller prompts stay on the loop, where they cost less
 * than a round trip. It renders the model's own template only: a request's template is user code and renders in
 * template-sandbox.ts, whose text comes here to be encoded when it is large. Knows tokenizers by their folder
 * (the thread loads each once) and nothing of requests, HTTP or engines.
 */
import { ThreadWorker, threadTask } from '../offload/worker.ts';
import type { encodePromptJob, PromptJob } from './prompt-thread.ts';
import { TemplateError } from './template.ts';

export type { PromptJob } from './prompt-thread.ts';

/** Characters (of the request's messages, tools and documents as JSON, or of prompt text) from which the work leaves the loop: ~1,000 short messages, tens of milliseconds. */
export const LARGE_PROMPT_CHARS = 32 * 1024;

const ENCODE = threadTask<typeof encodePromptJob>(new URL('./prompt-thread.ts', import.meta.url), 'encodePromptJob');

export class PromptWorker {
  private readonly thread = new ThreadWorker();

  /** The prompt's token ids; a TemplateError (the caller's 400) when the template cannot render the messages. */
  async encode(job: PromptJob): Promise<number[]> {
    const answer = await this.thread.run(ENCODE, job);
    if ('ids' in answer) return answer.ids;
    throw answer.template ? new TemplateError(answer.error) : new Error(answer.error);
  }

  close(): Promise<void> {
    return this.thread.close();
  }
}
