/**
 * The thread of prompt-worker.ts: renders the model's chat template (or takes text a request's template rendered)
 * and encodes it with the folder's tokenizer, loaded once per folder. Answers each job by id; holds nothing else.
 */
import { parentPort } from 'node:worker_threads';
import { encodePrompt } from './prompt.ts';
import type { PromptAnswer, PromptJob } from './prompt-worker.ts';
import { renderChat, TemplateError } from './template.ts';
import { loadTokenizer } from './tokenizer.ts';

parentPort!.on('message', async (job: PromptJob & { id: number }) => {
  let answer: PromptAnswer;
  try {
    const tokenizer = await loadTokenizer(job.folder);
    const text = 'text' in job ? job.text : renderChat(job.options);
    answer = { id: job.id, ids: encodePrompt(tokenizer, text, { addSpecialTokens: job.addSpecialTokens }) };
  } catch (error) {
    answer = { id: job.id, error: (error as Error).message, template: error instanceof TemplateError };
  }
  parentPort!.postMessage(answer);
});
