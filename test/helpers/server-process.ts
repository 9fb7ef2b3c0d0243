/**
 * The real service as a child process of its own (`src/main.ts serve`): so a test can see it crash, kill it,
 * sample the memory of it and of its engine through /proc, and time it from an event loop it does not share.
 * Keys for more entities are made with the CLI against the same data folder and database.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import readline from 'node:readline';
import { promisify } from 'node:util';
import { enginePython } from './engine-process.ts';
import { waitFor } from './poll.ts';

export interface ServerProcess {
  child: ChildProcess;
  url: string;
  key: string;
  /** The exit code or signal once the process has ended; null while it runs. */
  exit(): string | null;
  /** The server's error and fatal log lines so far (the last 50), to explain a 5xx. */
  errorLines: string[];
  /** The engine's process id (the server's python child), once started. */
  enginePid(): number | null;
  createKey(entity: string): Promise<string>;
  stop(): Promise<void>;
}

export interface ServerProcessOptions {
  dataDir: string;
  key: string;
  databaseUrl?: string | null;
  env?: Record<string, string>;
}

/** The environment `serve` runs with: a fresh data folder, a free port, the bootstrap key, the engine's python. */
export async function serverEnv(options: ServerProcessOptions): Promise<NodeJS.ProcessEnv> {
  return {
    ...process.env,
    DATA_DIR: options.dataDir,
    PORT: '0',
    BOOTSTRAP_API_KEY: options.key,
    LOG_LEVEL: process.env.E2E_LOG_LEVEL ?? 'warn',
    ENGINE_PYTHON: await enginePython(),
    ...(options.databaseUrl ? { DATABASE_URL: options.databaseUrl } : {}),
    ...options.env,
  };
}

/**
 * `serve` as a child process; resolves with its URL once it listens, and its start-up banner (stdout so far: the
 * banner is one write), rejects if it exits before. `onExit` sees every exit.
 */
export async function spawnListening(
  env: NodeJS.ProcessEnv,
  onExit: (code: number | null, signal: NodeJS.Signals | null) => void = () => {},
): Promise<{ child: ChildProcess; url: string; banner: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts', 'serve'], {
    env,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  child.on('exit', onExit);
  let output = '';
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (chunk) => {
      output += chunk;
      const match = /listening on (http:\/\/\S+)/.exec(output);
      if (match) resolve(match[1]);
    });
    child.once('exit', (code, signal) =>
      reject(new Error(`server exited with ${signal ?? code} before listening: ${output}`)),
    );
  });
  return { child, url, banner: output };
}

/** Starts the server and resolves once it listens and its system check (engine included) passes. */
export async function spawnServerProcess(options: ServerProcessOptions): Promise<ServerProcess> {
  const env = await serverEnv(options);
  let exit: string | null = null;
  const { child, url } = await spawnListening(env, (code, signal) => {
    exit = signal ?? String(code);
  });
  const errorLines: string[] = [];
  readline.createInterface({ input: child.stdout! }).on('line', (line) => {
    if (!/"level":(50|60)/.test(line)) return;
    errorLines.push(line.slice(0, 2000));
    if (errorLines.length > 50) errorLines.shift();
  });
  await waitUntilReady(url, () => exit);
  return {
    child,
    url,
    key: options.key,
    errorLines,
    exit: () => exit,
    enginePid: () => childPids(child.pid!)[0] ?? null,
    async createKey(entity) {
      const run = promisify(execFile);
      const { stdout } = await run(
        process.execPath,
        ['--import', 'tsx', 'src/main.ts', 'keys', 'create', '--entity', entity],
        { env },
      );
      return stdout.trim().split('\n').at(-1)!;
    },
    async stop() {
      if (exit !== null) return;
      const ended = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      // A server whose event loop is stuck never runs its SIGTERM handler.
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await ended;
      clearTimeout(timer);
    },
  };
}

async function waitUntilReady(url: string, exit: () => string | null, timeoutMs = 180_000): Promise<void> {
  let lastAnswer = 'no answer';
  await waitFor(
    () => `the server to be ready (last answer: ${lastAnswer})`,
    async () => {
      const response = await fetch(`${url}/v1/system-check`).catch(() => null);
      if (response?.status === 200) return true;
      if (exit() !== null) throw new Error(`server exited with ${exit()} while starting`);
      lastAnswer = response ? await response.text() : 'no answer';
      return false;
    },
    { timeoutMs, intervalMs: 200 },
  );
}

/** Direct children of a process, from /proc (Linux). */
export function childPids(pid: number): number[] {
  try {
    return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Resident set size of a process in bytes, or null when it is gone. */
export function rssBytes(pid: number): number | null {
  try {
    const match = /^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) * 1024 : null;
  } catch {
    return null;
  }
}
