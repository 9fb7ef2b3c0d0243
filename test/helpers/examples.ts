/**
 * The examples in examples/ as child processes, each with the Python of the client it uses (ART, openai,
 * tinker-cookbook, transformers+peft), against a running server: what the smoke tests (test/examples.test.ts)
 * and the benchmark (bench/examples.ts) share. Each example writes its figures to the JSON file named by --summary.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { repoRoot } from '../../src/config.ts';
import { runPython } from './reference.ts';

export interface ExampleClient {
  python: string | undefined;
  /** Why examples needing it cannot run here, or false. */
  skip: string | false;
}

function client(env: string, venv: string, requirements: string): ExampleClient {
  const fallback = path.join(repoRoot, venv, 'bin', 'python');
  const python = process.env[env] ?? (fs.existsSync(fallback) ? fallback : undefined);
  return {
    python,
    skip: python && fs.existsSync(python) ? false : `no ${venv}: set ${env} (scripts/python/${requirements})`,
  };
}

/** ART and the openai SDK (.venv-art), the tinker SDK and cookbook (.venv-tinker), transformers and peft (.venv-test). */
export const CLIENTS = {
  art: client('ART_PYTHON', '.venv-art', 'art.txt'),
  tinker: client('TINKER_PYTHON', '.venv-tinker', 'tinker.txt'),
  peft: client('REFERENCE_PYTHON', '.venv-test', 'reference.txt'),
};

export interface ExampleRun {
  summary: Record<string, any>;
  output: string;
  seconds: number;
}

/** Runs `examples/<script> args…` against the server; rejects with the tail of its output when it fails or outlives `timeoutMs`. */
export async function runExample(
  python: string,
  script: string,
  args: string[],
  server: { url: string; key: string },
  timeoutMs: number,
): Promise<ExampleRun> {
  const summaryFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'example-')), 'summary.json');
  const argv = [
    path.join(repoRoot, 'examples', script),
    '--url',
    server.url,
    '--key',
    server.key,
    '--summary',
    summaryFile,
    ...args,
  ];
  const env = { ...process.env, HF_HUB_OFFLINE: '1', TRANSFORMERS_VERBOSITY: 'error' };
  const { output, seconds } = await runPython(python, argv, { label: script, timeoutMs, env });
  const summary = JSON.parse(fs.readFileSync(summaryFile, 'utf8'));
  fs.rmSync(path.dirname(summaryFile), { recursive: true, force: true });
  return { summary, output, seconds };
}
