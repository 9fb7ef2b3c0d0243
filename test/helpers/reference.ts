/**
 * The Python reference tools (`REFERENCE_PYTHON`: transformers 5.23 in `.venv-test`), run as child processes.
 * Tests that compare against them skip with the reason when no reference Python is installed.
 */
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { repoRoot } from '../../src/config.ts';

const fallback = path.join(repoRoot, '.venv-test', 'bin', 'python');
export const REFERENCE_PYTHON: string | undefined =
  process.env.REFERENCE_PYTHON ?? (fs.existsSync(fallback) ? fallback : undefined);
export const NO_REFERENCE = REFERENCE_PYTHON
  ? false
  : 'no reference Python (set REFERENCE_PYTHON to a venv from scripts/python/reference.txt)';

export interface RenderCase {
  messages: Record<string, unknown>[];
  tools?: unknown[];
  add_generation_prompt?: boolean;
  continue_final_message?: boolean;
  chat_template_kwargs?: Record<string, unknown>;
}

export type ReferenceRender = { text: string; ids: number[]; error?: undefined } | { error: string };

/** transformers' apply_chat_template (after vLLM's message preprocessing) on each case, with `folder`'s tokenizer. */
export function referenceRender(folder: string, cases: RenderCase[]): ReferenceRender[] {
  const script = path.join(repoRoot, 'test', 'reference', 'render_prompts.py');
  const output = execFileSync(REFERENCE_PYTHON!, [script], {
    input: JSON.stringify({ folder, cases }),
    maxBuffer: 64 * 1024 * 1024,
    stdio: ['pipe', 'pipe', 'ignore'],
    env: { ...process.env, HF_HUB_OFFLINE: '1', TRANSFORMERS_VERBOSITY: 'error' },
  });
  return JSON.parse(output.toString('utf8')) as ReferenceRender[];
}

/** Runs a Python script of the repository with `request` as JSON on stdin and answers its JSON stdout; a failure carries its stderr. */
export function runJsonScript<T>(
  python: string,
  script: string,
  request: unknown,
  env: NodeJS.ProcessEnv = process.env,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(python, [path.join(repoRoot, script)], { stdio: ['pipe', 'pipe', 'pipe'], env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`${script} exited ${code}: ${stderr.slice(-4000)}`));
      // Thrown here, a parse error would never settle the promise: the test would hang instead of failing.
      try {
        resolve(JSON.parse(stdout) as T);
      } catch (error) {
        reject(
          new Error(
            `${script} printed something other than one JSON object (${(error as Error).message}): ${stdout.slice(0, 2000)}`,
          ),
        );
      }
    });
    child.stdin.end(JSON.stringify(request));
  });
}

export interface PythonRun {
  /** The last 40,000 characters of its stdout and stderr, interleaved. */
  output: string;
  seconds: number;
}

/** Runs `python argv…` to its end; rejects with `label` and the tail of its output when it exits non-zero or outlives `timeoutMs` (then killed). */
export function runPython(
  python: string,
  argv: string[],
  options: { label: string; timeoutMs: number; cwd?: string; env?: NodeJS.ProcessEnv },
): Promise<PythonRun> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(python, argv, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    const keep = (chunk: Buffer) => (output = (output + chunk.toString('utf8')).slice(-40_000));
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) return reject(new Error(`${options.label} exited ${code ?? signal}:\n${output.slice(-6000)}`));
      resolve({ output, seconds: (Date.now() - started) / 1000 });
    });
  });
}
