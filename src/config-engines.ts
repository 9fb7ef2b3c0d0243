/**
 * The engines' part of the environment: where samplers and the trainer run (child processes or remote engines), the
 * trainer's process group (TRAINER_WORLD_SIZE, TRAINER_NNODES, its rendezvous) and the serving limits every sampler
 * gets. config.ts reads the rest and reports every problem of both in one error.
 */
import { availableParallelism } from 'node:os';
import { DTYPES, type Dtype } from './engine/protocol.ts';
import type { EngineTopology, ServingLimits, TrainerGroup } from './engine/settings.ts';
import { isVllmUrl } from './engine/vllm/config.ts';

export type Read = (name: string) => string | undefined;
export type ReadInteger = (name: string, fallback: number, min: number, max: number) => number;

const ENGINE_URL_PATTERN = /^tcp:\/\/[^\s/:]+:\d{1,5}$/;
const DEVICE_PATTERN = /^(cpu|cuda(:\d+)?)$/;

/** Threads per child engine default to an equal share of the cores, so two engines never fight over them. */
export function parseEngineTopology(read: Read, integer: ReadInteger, problems: string[]): EngineTopology {
  const mode = read('ENGINES') ?? 'separate';
  if (mode !== 'separate' && mode !== 'single')
    problems.push(`ENGINES=${JSON.stringify(mode)}: expected separate or single`);
  const urls = (name: string) => {
    // vLLM servers among the sampler URLs are src/engine/vllm/config.ts's.
    const list = (read(name) ?? '')
      .split(',')
      .map((part) => part.trim())
      .filter((url) => url && !isVllmUrl(url));
    for (const url of list)
      if (!ENGINE_URL_PATTERN.test(url)) problems.push(`${name}: ${JSON.stringify(url)} is not tcp://host:port`);
    return list;
  };
  const samplerUrls = urls('SAMPLER_URLS');
  const trainerUrls = urls('TRAINER_URL');
  if (trainerUrls.length > 1) problems.push('TRAINER_URL: expected one tcp://host:port');
  if (mode === 'single' && samplerUrls.length > 0)
    problems.push('SAMPLER_URLS: not used with ENGINES=single (set TRAINER_URL for a remote single engine)');
  const samplers = integer('SAMPLERS', 1, 1, 64);
  const secret = read('ENGINE_SECRET') ?? null;
  if ((samplerUrls.length > 0 || trainerUrls.length > 0) && secret === null)
    problems.push('ENGINE_SECRET: required when SAMPLER_URLS or TRAINER_URL names a remote engine');
  const trainerGroup = parseTrainerGroup(read, integer, problems, mode === 'single' || trainerUrls.length > 0);
  const localRanks = trainerGroup.worldSize / trainerGroup.nodes;
  const localEngines =
    mode === 'single' ? 1 : (samplerUrls.length > 0 ? 0 : samplers) + (trainerUrls.length > 0 ? 0 : localRanks);
  const share = mode === 'single' ? null : Math.max(1, Math.floor(availableParallelism() / Math.max(1, localEngines)));
  const device = (name: string) => {
    const value = read(name) ?? null;
    if (value !== null && !DEVICE_PATTERN.test(value))
      problems.push(`${name}=${JSON.stringify(value)}: expected cpu, cuda or cuda:N`);
    return value;
  };
  return {
    mode: mode === 'single' ? 'single' : 'separate',
    samplers,
    samplerUrls,
    trainerUrl: trainerUrls[0] ?? null,
    secret,
    samplerThreads: read('SAMPLER_THREADS') === undefined ? share : integer('SAMPLER_THREADS', 1, 1, 1024),
    trainerThreads: read('TRAINER_THREADS') === undefined ? share : integer('TRAINER_THREADS', 1, 1, 1024),
    samplerDevice: device('SAMPLER_DEVICE'),
    trainerDevice: device('TRAINER_DEVICE'),
    trainerNice: integer('TRAINER_NICE', 10, 0, 19),
    trainerGroup,
  };
}

const RENDEZVOUS_PATTERN = /^[^\s/:]+:\d{1,5}$/;

/** TRAINER_WORLD_SIZE ranks over TRAINER_NNODES nodes; `elsewhere`: no local trainer group can be launched here. */
function parseTrainerGroup(read: Read, integer: ReadInteger, problems: string[], elsewhere: boolean): TrainerGroup {
  const worldSize = integer('TRAINER_WORLD_SIZE', 1, 1, 4096);
  const nodes = integer('TRAINER_NNODES', 1, 1, 1024);
  const rendezvous = read('TRAINER_RDZV_ENDPOINT') ?? null;
  if (worldSize % nodes !== 0)
    problems.push(
      `TRAINER_WORLD_SIZE=${worldSize}: not a multiple of TRAINER_NNODES=${nodes} (every node runs as many)`,
    );
  if (nodes > 1 && rendezvous === null)
    problems.push(
      'TRAINER_RDZV_ENDPOINT: required with TRAINER_NNODES > 1 (host:port of this node, where the others join)',
    );
  if (rendezvous !== null && !RENDEZVOUS_PATTERN.test(rendezvous))
    problems.push(`TRAINER_RDZV_ENDPOINT=${JSON.stringify(rendezvous)}: expected host:port`);
  if (elsewhere && (worldSize > 1 || nodes > 1))
    problems.push(
      'TRAINER_WORLD_SIZE: a trainer of several ranks is launched here with ENGINES=separate and no TRAINER_URL ' +
        '(a remote trainer is launched where it runs; docs/trainer-group.md)',
    );
  return { worldSize, nodes, rendezvous, timeoutS: integer('TRAINER_RDZV_TIMEOUT', 300, 1, 86_400) };
}

export function parseServingLimits(read: Read, integer: ReadInteger, problems: string[]): ServingLimits {
  const dtype = (read('DTYPE') ?? null) as Dtype | null;
  if (dtype !== null && !DTYPES.includes(dtype))
    problems.push(`DTYPE=${JSON.stringify(dtype)}: expected one of ${DTYPES.join(', ')}`);
  return {
    maxModelLen: read('MAX_MODEL_LEN') === undefined ? null : integer('MAX_MODEL_LEN', 0, 2, 1 << 24),
    maxNumSeqs: integer('MAX_NUM_SEQS', 32, 1, 4096),
    maxNumBatchedTokens: integer('MAX_NUM_BATCHED_TOKENS', 2048, 16, 1 << 24),
    kvCacheMemoryBytes:
      read('KV_CACHE_MEMORY_BYTES') === undefined
        ? null
        : integer('KV_CACHE_MEMORY_BYTES', 0, 1 << 16, Number.MAX_SAFE_INTEGER),
    dtype,
  };
}
