/**
 * Renders request-supplied chat templates, which are user code, outside the server's process: a small
 * pool of child processes, each with a capped heap, one render at a time, killed and replaced when a
 * render runs over its wall-clock budget or its memory. A worker thread is not enough: V8 ends the whole
 * process when a thread's heap overflows in some allocations (`range(10**9)`), so only a process boundary
 * keeps the server alive. Every failure is a `TemplateError`, so the caller answers 400.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { type RenderOptions, TemplateError } from './template.ts';

/** The conversation with a child: jobs and answers by id, and READY once it has loaded (so start-up never counts against a render's budget). */
export type RenderJob = { id: number; options: RenderOptions; maxChars: number };
export type RenderAnswer = { id: number; text: string } | { id: number; error: string };
export const READY = 'ready';

export interface SandboxBudget {
  /** Wall-clock time one render may take, from the moment a child takes it. */
  timeMs: number;
  /** V8 heap of each child. */
  heapMb: number;
  /** Longest prompt text a render may answer. */
  maxChars: number;
  /** Children rendering at once; further renders wait for one. */
  children: number;
}

export const DEFAULT_SANDBOX_BUDGET: SandboxBudget = {
  timeMs: 1000,
  heapMb: 64,
  maxChars: 4 * 1024 * 1024,
  children: 2,
};

/** Start-up (Node, the TypeScript loader, the Jinja library) is not the template's time. */
const START_TIMEOUT_MS = 15_000;
const CHILD_SCRIPT = fileURLToPath(new URL('./template-child.ts', import.meta.url));

interface Pending {
  job: RenderJob;
  resolve(text: string): void;
  reject(error: Error): void;
}

class Slot {
  private child: ChildProcess | null = null;

  constructor(private readonly budget: SandboxBudget) {}

  /** Runs one render; the child is killed (and replaced on the next render) when it breaks the budget. */
  async run(pending: Pending): Promise<void> {
    let child: ChildProcess;
    try {
      child = await this.ready();
    } catch (error) {
      pending.reject(error as Error);
      return;
    }
    return new Promise<void>((done) => {
      const finish = (outcome: { text: string } | { error: string }, kill: boolean) => {
        clearTimeout(timer);
        child.off('message', onMessage);
        child.off('exit', onExit);
        if (kill) this.kill();
        else this.idle(child);
        if ('text' in outcome) pending.resolve(outcome.text);
        else pending.reject(new TemplateError(outcome.error));
        done();
      };
      const onMessage = (answer: RenderAnswer) => {
        if (answer.id === pending.job.id) finish(answer, false);
      };
      const onExit = () =>
        finish(
          {
            error: `the chat template exceeded its memory budget (${this.budget.heapMb} MB heap) or crashed, and was stopped`,
          },
          true,
        );
      const timer = setTimeout(
        () =>
          finish(
            { error: `the chat template ran longer than its time budget (${this.budget.timeMs} ms) and was stopped` },
            true,
          ),
        this.budget.timeMs,
      );
      child.on('message', onMessage);
      child.once('exit', onExit);
      child.ref();
      child.channel?.ref();
      child.send(pending.job);
    });
  }

  /** The running child, or a fresh one once it has loaded. */
  private ready(): Promise<ChildProcess> {
    if (this.child && this.child.exitCode === null && this.child.signalCode === null)
      return Promise.resolve(this.child);
    // The child is TypeScript like the server: it runs with the loader the server runs with.
    const child = fork(CHILD_SCRIPT, [], {
      execArgv: [
        ...process.execArgv.filter((arg) => !arg.startsWith('--max-old-space-size')),
        `--max-old-space-size=${this.budget.heapMb}`,
      ],
      stdio: ['ignore', 'ignore', 'ignore', 'ipc'],
      serialization: 'advanced',
    });
    this.child = child;
    return new Promise((resolve, reject) => {
      const settle = (message?: unknown) => {
        clearTimeout(timer);
        child.off('error', settle);
        child.off('exit', settle);
        child.off('message', settle);
        if (message === READY) return resolve(child);
        child.kill('SIGKILL');
        if (this.child === child) this.child = null;
        reject(new TemplateError('the chat template renderer could not be started'));
      };
      const timer = setTimeout(settle, START_TIMEOUT_MS);
      child.once('error', settle);
      child.once('exit', settle);
      child.once('message', settle);
    });
  }

  /** An idle child must not keep the server's process alive. */
  private idle(child: ChildProcess): void {
    child.unref();
    child.channel?.unref();
  }

  kill(): void {
    this.child?.kill('SIGKILL');
    this.child = null;
  }
}

export class TemplateSandbox {
  private readonly free: Slot[];
  private readonly waiting: Pending[] = [];
  private readonly slots: Slot[];
  private nextId = 0;

  constructor(private readonly budget: SandboxBudget = DEFAULT_SANDBOX_BUDGET) {
    this.slots = Array.from({ length: budget.children }, () => new Slot(budget));
    this.free = [...this.slots];
  }

  render(options: RenderOptions): Promise<string> {
    return new Promise<string>((resolve, reject) => {
      this.waiting.push({ job: { id: this.nextId++, options, maxChars: this.budget.maxChars }, resolve, reject });
      this.dispatch();
    });
  }

  private dispatch(): void {
    while (this.free.length > 0 && this.waiting.length > 0) {
      const slot = this.free.pop()!;
      const pending = this.waiting.shift()!;
      void slot.run(pending).then(() => {
        this.free.push(slot);
        this.dispatch();
      });
    }
  }

  close(): void {
    for (const slot of this.slots) slot.kill();
    for (const pending of this.waiting.splice(0)) pending.reject(new TemplateError('the server is shutting down'));
  }
}
