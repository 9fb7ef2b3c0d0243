/**
 * The real engine for tests: which Python runs it (the one home of that choice for every test start-up), and
 * `python -m engine --tcp` started on loopback as an engine on another host would be.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { repoRoot } from '../../src/config.ts';
import { findEnginePython } from '../../src/engine/python.ts';

/** scripts/test.sh exports the ENGINE_PYTHON its install step chose; otherwise the first Python that imports torch. */
export async function enginePython(): Promise<string> {
  return process.env.ENGINE_PYTHON || (await findEnginePython());
}

export interface TcpEngine {
  child: ChildProcess;
  port: number;
  /** Ends the engine at once (SIGKILL), as a host that goes away would; resolves when it has exited. */
  kill(): Promise<void>;
}

/**
 * `python -m engine --tcp 127.0.0.1:PORT` (0: any free port), resolved once it listens; `secret` sets ENGINE_SECRET,
 * `args` are further command-line flags (e.g. the test-only --skip-adapter-value-check).
 */
export async function startTcpEngine(
  options: { port?: number; secret?: string; args?: string[] } = {},
): Promise<TcpEngine> {
  const env: NodeJS.ProcessEnv = { ...process.env, PYTHONUNBUFFERED: '1' };
  if (options.secret === undefined) delete env.ENGINE_SECRET;
  else env.ENGINE_SECRET = options.secret;
  const child = spawn(
    await enginePython(),
    ['-m', 'engine', '--tcp', `127.0.0.1:${options.port ?? 0}`, '--threads', '1', ...(options.args ?? [])],
    {
      cwd: repoRoot,
      env,
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  const kill = () =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', () => resolve());
      child.kill('SIGKILL');
    });
  const lines: string[] = [];
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stderr! }).on('line', (line) => {
      lines.push(line);
      const listening = /listening on [^ ]+:(\d+)/.exec(line);
      if (listening) resolve({ child, port: Number(listening[1]), kill });
    });
    child.once('exit', (code) => reject(new Error(`engine exited (${code}) before listening:\n${lines.join('\n')}`)));
  });
}
