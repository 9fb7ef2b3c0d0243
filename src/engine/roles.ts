/**
 * The engines of one server by role (DESIGN.md §1 "Engine roles"): samplers answer chat (generate and
 * forward for serving), the trainer runs train steps and saves adapters. With `ENGINES=separate` they are
 * different processes, so a train step never stalls a decode step; with `single` one engine holds both.
 * Each engine is a supervised child process or a remote engine reached over TCP. This module turns the
 * configuration into supervisors; it knows nothing of what callers send them.
 */
import type { EngineTopology, ServingLimits } from '../config.ts';
import type { Engine } from './client.ts';
import { EngineError } from './errors.ts';
import type { GenerateStream } from './generate-stream.ts';
import type { EngineLogger } from './logger.ts';
import type {
  CheckConstraintReply,
  CheckConstraintRequest,
  DropAdapterReply,
  DropAdapterRequest,
  EnsureAdapterReply,
  EnsureAdapterRequest,
  ForwardBackwardReply,
  ForwardBackwardRequest,
  ForwardReply,
  ForwardRequest,
  GenerateRequest,
  LoadBaseReply,
  LoadBaseRequest,
  LoadStateReply,
  LoadStateRequest,
  OptimStepReply,
  OptimStepRequest,
  SaveAdapterReply,
  SaveAdapterRequest,
  SaveStateReply,
  SaveStateRequest,
  StatsReply,
  TrainStepReply,
  TrainStepRequest,
} from './protocol.ts';
import { EngineSupervisor, type EngineHealth, type RemoteEngine } from './supervisor.ts';
import { samplerKindOf } from './vllm/config.ts';
import { createVllmSamplers, SamplerByBase, type VllmSetup } from './vllm/samplers.ts';
import type { VllmHealth } from './vllm/sampler.ts';

export type EngineRole = 'sampler' | 'trainer' | 'sampler+trainer';

/** What the server starts, stops and checks of an engine, whatever its kind (ours, or a vLLM sampler). */
export interface ManagedEngine {
  start(): void;
  stop(): Promise<void>;
  waitUntilReady(): Promise<unknown>;
  probe(): Promise<void>;
  health(): EngineHealth | VllmHealth;
}

export interface RoleEngine {
  role: EngineRole;
  kind: 'ours' | 'vllm';
  supervisor: ManagedEngine;
}

/** What the services see: one engine to sample with, one to train with (the same one in single mode). */
export interface EngineRoles {
  sampler: Engine;
  trainer: Engine;
  /** Every process, for start/stop, health and the system check. */
  all: RoleEngine[];
  /** Throws when models on this base cannot be sampled (a vLLM that cannot load it); absent: every base can. */
  checkSampler?(baseId: string): Promise<void>;
}

export interface EngineRolesOptions {
  topology: EngineTopology;
  serving: ServingLimits;
  python: string | null;
  logger: EngineLogger;
  /** Extra arguments for every child engine (tests: shorter timeouts, fewer adapters). */
  extraArgs?: string[];
  /** Which bases vLLM samples (src/engine/vllm/); absent: ours sample every base. */
  vllm?: VllmSetup;
}

/** The command line of a child engine: its serving limits, threads and device. */
export function engineArgs(serving: ServingLimits, threads: number | null, device: string | null): string[] {
  const args = ['--max-num-seqs', String(serving.maxNumSeqs), '--max-num-batched-tokens', String(serving.maxNumBatchedTokens)];
  if (serving.maxModelLen !== null) args.push('--max-model-len', String(serving.maxModelLen));
  if (serving.kvCacheMemoryBytes !== null) args.push('--kv-cache-memory-bytes', String(serving.kvCacheMemoryBytes));
  if (serving.dtype !== null) args.push('--dtype', serving.dtype);
  if (threads !== null) args.push('--threads', String(threads));
  if (device !== null) args.push('--device', device);
  return args;
}

function tagged(logger: EngineLogger, tags: Record<string, unknown>): EngineLogger {
  return {
    info: (fields, message) => logger.info({ ...tags, ...fields }, message),
    warn: (fields, message) => logger.warn({ ...tags, ...fields }, message),
    error: (fields, message) => logger.error({ ...tags, ...fields }, message),
  };
}

function parseUrl(url: string, secret: string | null): RemoteEngine {
  const { hostname, port } = new URL(url);
  return { host: hostname.replace(/^\[|\]$/g, ''), port: Number(port), secret };
}

export function createEngineRoles(options: EngineRolesOptions): EngineRoles {
  const ours = createOurEngines(options);
  return options.vllm ? withVllmSamplers(ours, options.vllm, options.logger) : ours;
}

/**
 * The sampler routes each base to its kind: vLLM samplers for the bases vLLM serves, ours for the rest (our
 * samplers are kept only if a base needs them; the trainer always is).
 */
function withVllmSamplers(ours: EngineRoles, setup: VllmSetup, logger: EngineLogger): EngineRoles {
  const samplers = createVllmSamplers(setup, tagged(logger, { role: 'sampler', kind: 'vllm' }));
  if (samplers.all.length === 0) return ours;
  const single = ours.all.some(({ role }) => role === 'sampler+trainer');
  const needOurs = single || setup.bases.some((base) => samplerKindOf(setup.config, base.id) === 'ours');
  const sampler = new SamplerByBase(samplers, needOurs ? ours.sampler : null, setup);
  const kept = ours.all.filter(({ role }) => needOurs || role !== 'sampler');
  const vllm = samplers.all.map((supervisor): RoleEngine => ({ role: 'sampler', kind: 'vllm', supervisor }));
  return { sampler, trainer: ours.trainer, all: [...kept, ...vllm], checkSampler: (baseId) => sampler.check(baseId) };
}

function createOurEngines({ topology, serving, python, logger, extraArgs = [] }: EngineRolesOptions): EngineRoles {
  const make = (role: EngineRole, index: number, url: string | null, threads: number | null, device: string | null, nice = 0): RoleEngine => ({
    role,
    kind: 'ours',
    supervisor: new EngineSupervisor({
      python,
      logger: tagged(logger, { role, engine: index }),
      remote: url === null ? null : parseUrl(url, topology.secret),
      args: [...engineArgs(serving, threads, device), ...(nice ? ['--nice', String(nice)] : []), ...extraArgs],
    }),
  });
  const supervisor = (engine: RoleEngine) => engine.supervisor as EngineSupervisor;
  if (topology.mode === 'single') {
    const only = make('sampler+trainer', 0, topology.trainerUrl, topology.trainerThreads, topology.trainerDevice);
    return { sampler: supervisor(only), trainer: supervisor(only), all: [only] };
  }
  const trainer = make('trainer', 0, topology.trainerUrl, topology.trainerThreads, topology.trainerDevice, topology.trainerNice);
  const samplerUrls = topology.samplerUrls.length > 0 ? topology.samplerUrls : Array<string | null>(topology.samplers).fill(null);
  const samplers = samplerUrls.map((url, index) => make('sampler', index + 1, url, topology.samplerThreads, topology.samplerDevice));
  const sampler = samplers.length === 1 ? supervisor(samplers[0]) : new SamplerPool(samplers.map(supervisor));
  return { sampler, trainer: supervisor(trainer), all: [trainer, ...samplers] };
}

/** Health of every engine by role, for the system check. */
export function rolesHealth(roles: EngineRoles): ((EngineHealth | VllmHealth) & { role: EngineRole; kind: RoleEngine['kind'] })[] {
  return roles.all.map(({ role, kind, supervisor }) => ({ role, kind, ...supervisor.health() }));
}

/**
 * Several samplers behind one `Engine`: a request goes to the one with the fewest requests in flight;
 * what must hold everywhere (bases, serving adapters) is sent to every sampler.
 */
export class SamplerPool implements Engine {
  constructor(private readonly samplers: EngineSupervisor[]) {}

  stats(): Promise<StatsReply> {
    return this.leastBusy().stats();
  }

  async loadBase(request: LoadBaseRequest): Promise<LoadBaseReply> {
    return (await Promise.all(this.samplers.map((sampler) => sampler.loadBase(request))))[0];
  }

  /** On every sampler: a generate may go to any of them, and each compiles for itself (cached there). */
  async checkConstraint(request: CheckConstraintRequest): Promise<CheckConstraintReply> {
    return (await Promise.all(this.samplers.map((sampler) => sampler.checkConstraint(request))))[0];
  }

  async ensureAdapter(request: EnsureAdapterRequest): Promise<EnsureAdapterReply> {
    const replies = await Promise.all(this.samplers.map((sampler) => sampler.ensureAdapter(request)));
    return { loaded: replies.some((reply) => reply.loaded) };
  }

  async dropAdapter(request: DropAdapterRequest): Promise<DropAdapterReply> {
    const replies = await Promise.all(this.samplers.map((sampler) => sampler.dropAdapter(request)));
    return { dropped: replies.some((reply) => reply.dropped) };
  }

  saveAdapter(_request: SaveAdapterRequest): Promise<SaveAdapterReply> {
    return Promise.reject(new EngineError('bad_request', 'samplers do not save adapters: the trainer does'));
  }

  generate(request: GenerateRequest): GenerateStream {
    return this.leastBusy().generate(request);
  }

  forward(request: ForwardRequest): Promise<ForwardReply> {
    return this.leastBusy().forward(request);
  }

  trainStep(_request: TrainStepRequest): Promise<TrainStepReply> {
    return notTrainer();
  }

  forwardBackward(_request: ForwardBackwardRequest): Promise<ForwardBackwardReply> {
    return notTrainer();
  }

  optimStep(_request: OptimStepRequest): Promise<OptimStepReply> {
    return notTrainer();
  }

  saveState(_request: SaveStateRequest): Promise<SaveStateReply> {
    return notTrainer();
  }

  loadState(_request: LoadStateRequest): Promise<LoadStateReply> {
    return notTrainer();
  }

  /** Ready samplers first, then the fewest requests in flight. */
  private leastBusy(): EngineSupervisor {
    let best = this.samplers[0];
    let bestScore = Number.POSITIVE_INFINITY;
    for (const sampler of this.samplers) {
      const health = sampler.health();
      const score = (health.state === 'ready' ? 0 : 1_000_000) + health.inFlight;
      if (score < bestScore) [best, bestScore] = [sampler, score];
    }
    return best;
  }
}

function notTrainer(): Promise<never> {
  return Promise.reject(new EngineError('bad_request', 'samplers do not train: the trainer does'));
}
