/**
 * The worker thread that compiles constraints for the server (see constraint-compiler.ts): one spec per
 * message, answered by id with the compiled automaton, the refusal, or the failure. Its work is bounded
 * by the compiler's own caps and step budget; it exists so that this work never holds the event loop.
 */
import { parentPort } from 'node:worker_threads';
import { compileConstraintUncached } from './compile.ts';
import { ConstraintError } from './constraint-error.ts';
import type { CompileAnswer, CompileJob } from './constraint-compiler.ts';

parentPort!.on('message', ({ id, spec }: CompileJob) => {
  let answer: CompileAnswer;
  try {
    answer = { id, compiled: compileConstraintUncached(spec) };
  } catch (error) {
    answer = error instanceof ConstraintError ? { id, refused: { reason: error.reason, message: error.message } } : { id, failed: (error as Error).message };
  }
  parentPort!.postMessage(answer);
});
