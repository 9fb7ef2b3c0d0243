/**
 * The thread of worker.ts: imports a job's module once, calls the named export with the job's input and answers
 * its output, moving (not copying) the buffers of typed arrays found in it, up to two levels down. Holds nothing
 * but the modules it imported.
 */
import { parentPort } from 'node:worker_threads';
import type { ThreadAnswer, ThreadJob } from './worker.ts';

const modules = new Map<string, Promise<Record<string, unknown>>>();

/** Buffers a typed array owns whole (a view of part of a buffer is copied, like any value). */
function transferables(output: unknown, depth = 0): ArrayBuffer[] {
  if (ArrayBuffer.isView(output)) {
    const whole = output.byteOffset === 0 && output.byteLength === output.buffer.byteLength;
    return whole && output.buffer instanceof ArrayBuffer ? [output.buffer] : [];
  }
  if (depth >= 2 || output === null || typeof output !== 'object' || Array.isArray(output)) return [];
  return Object.values(output).flatMap((value) => transferables(value, depth + 1));
}

async function run(job: ThreadJob): Promise<unknown> {
  let module = modules.get(job.module);
  if (!module) {
    module = import(job.module) as Promise<Record<string, unknown>>;
    modules.set(job.module, module);
  }
  const task = (await module)[job.name];
  if (typeof task !== 'function') throw new Error(`${job.module} exports no function ${job.name}`);
  return task(job.input);
}

parentPort!.on('message', async (job: ThreadJob) => {
  let answer: ThreadAnswer;
  let transfer: ArrayBuffer[] = [];
  try {
    const output = await run(job);
    answer = { id: job.id, output };
    transfer = [...new Set(transferables(output))];
  } catch (error) {
    answer = { id: job.id, crash: (error as Error).stack ?? String(error) };
  }
  parentPort!.postMessage(answer, transfer);
});
