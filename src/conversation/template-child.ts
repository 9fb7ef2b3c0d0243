/**
 * The child process that renders request-supplied chat templates (see template-sandbox.ts): one render
 * per message, answered by id. It holds nothing between renders but the compiled-template cache, and its
 * parent kills it when a render runs over its time or memory budget.
 */
import { renderChat } from './template.ts';
import { READY, type RenderAnswer, type RenderJob } from './template-sandbox.ts';

process.on('message', (job: RenderJob) => {
  let answer: RenderAnswer;
  try {
    const text = renderChat(job.options);
    answer =
      text.length > job.maxChars
        ? {
            id: job.id,
            error: `the chat template rendered ${text.length} characters, more than the ${job.maxChars} allowed`,
          }
        : { id: job.id, text };
  } catch (error) {
    answer = { id: job.id, error: (error as Error).message };
  }
  process.send!(answer);
});
process.send!(READY);
