/**
 * What the prompt worker (prompt-worker.ts) runs on its thread: renders the model's chat template (or takes text a
 * request's template rendered) and encodes it with the folder's tokenizer, loaded once per folder per thread.
 */
import { encodePrompt } from './prompt.ts';
import { type RenderOptions, renderChat, TemplateError } from './template.ts';
import { loadTokenizer } from './tokenizer.ts';

/** The model's template with the request's data, or text a request's template rendered; encoded with that folder's tokenizer. */
export type PromptJob = { folder: string; addSpecialTokens: boolean } & ({ options: RenderOptions } | { text: string });
export type PromptAnswer = { ids: number[] } | { error: string; template: boolean };

export async function encodePromptJob(job: PromptJob): Promise<PromptAnswer> {
  try {
    const tokenizer = await loadTokenizer(job.folder);
    const text = 'text' in job ? job.text : renderChat(job.options);
    return { ids: encodePrompt(tokenizer, text, { addSpecialTokens: job.addSpecialTokens }) };
  } catch (error) {
    return { error: (error as Error).message, template: error instanceof TemplateError };
  }
}
