/**
 * Compiles the constraints of chat requests off the event loop: the size caps are checked and the cache
 * consulted here, and a miss goes to one worker thread, in order, so a costly constraint (up to its step
 * budget) delays other first-time constraints but never health checks or other requests.
 */
import { Worker } from 'node:worker_threads';
import { cacheOutcome, cachedOutcome, type CompiledConstraint, type CompileOutcome, constraintKey, type ConstraintSpec } from './compile.ts';
import { ConstraintError } from './constraint-error.ts';

/** The conversation with the thread, by id. */
export type CompileJob = { id: number; spec: ConstraintSpec };
export type CompileAnswer =
  | { id: number; compiled: CompiledConstraint }
  | { id: number; refused: { reason: ConstraintError['reason']; message: string } }
  | { id: number; failed: string };

const THREAD_SCRIPT = new URL('./compiler-thread.ts', import.meta.url).href;

/** Under a TypeScript loader the thread registers it first: worker threads do not inherit `--import`. */
function bootstrap(): string {
  if (!THREAD_SCRIPT.endsWith('.ts')) return `import(${JSON.stringify(THREAD_SCRIPT)})`;
  const tsx = import.meta.resolve('tsx/esm/api');
  return `import(${JSON.stringify(tsx)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(THREAD_SCRIPT)}); })`;
}

export class ConstraintCompiler {
  private worker: Worker | null = null;
  private nextId = 0;
  private readonly inflight = new Map<string, Promise<CompileOutcome>>();
  private readonly pending = new Map<number, { key: string; resolve(outcome: CompileOutcome): void; reject(error: Error): void }>();

  /** The compiled constraint; a `ConstraintError` when it is refused (before or while compiling). */
  async compile(spec: ConstraintSpec): Promise<CompiledConstraint> {
    const key = constraintKey(spec);
    let outcome = cachedOutcome(key);
    if (outcome === undefined) {
      // Concurrent requests with the same new constraint share one compilation.
      let running = this.inflight.get(key);
      if (!running) {
        running = this.send(key, spec).finally(() => this.inflight.delete(key));
        this.inflight.set(key, running);
      }
      outcome = await running;
    }
    if (outcome instanceof ConstraintError) throw outcome;
    return outcome;
  }

  close(): Promise<number> | undefined {
    const worker = this.worker;
    this.worker = null;
    return worker?.terminate();
  }

  private send(key: string, spec: ConstraintSpec): Promise<CompileOutcome> {
    const id = this.nextId++;
    const worker = this.thread();
    worker.ref(); // a compilation in flight keeps the process alive; an idle thread does not
    return new Promise((resolve, reject) => {
      this.pending.set(id, { key, resolve, reject });
      worker.postMessage({ id, spec } satisfies CompileJob);
    });
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(bootstrap(), { eval: true });
    worker.on('message', (answer: CompileAnswer) => this.settle(answer));
    worker.on('error', (error) => this.failAll(worker, error));
    worker.on('exit', (code) => this.failAll(worker, new Error(`the constraint compiler thread exited with code ${code}`)));
    this.worker = worker;
    return worker;
  }

  private settle(answer: CompileAnswer): void {
    const waiting = this.pending.get(answer.id);
    if (!waiting) return;
    this.pending.delete(answer.id);
    if (this.pending.size === 0) this.worker?.unref();
    if ('failed' in answer) return waiting.reject(new Error(`constraint compiler: ${answer.failed}`));
    const outcome = 'compiled' in answer ? answer.compiled : new ConstraintError(answer.refused.reason, answer.refused.message);
    cacheOutcome(waiting.key, outcome);
    waiting.resolve(outcome);
  }

  /** A thread that dies fails what it held; the next compilation starts a fresh one. */
  private failAll(worker: Worker, error: Error): void {
    if (this.worker === worker) this.worker = null;
    for (const waiting of this.pending.values()) waiting.reject(error);
    this.pending.clear();
  }
}
