/**
 * The engines of one server by role (docs/architecture.md, "Engines: kinds and roles"): samplers answer chat (generate and
 * forward for serving), the trainer runs train steps and saves adapters. With `ENGINES=separate` they are
 * different processes, so a train step never stalls a decode step; with `single` one engine holds both.
 * Each engine is a supervised child process or a remote engine reached over TCP. This module turns the
 * configuration into supervisors and routes several samplers by the op table's role column (ops.ts); it knows
 * nothing of what callers send. A sampler of another kind (vLLM) joins the pool as any `SamplerEngine`.
 */

import { EngineError } from './errors.ts';
import type { GenerateStream } from './generate-stream.ts';
import type { EngineLogger } from './logger.ts';
import {
  type Engine,
  isSamplerOp,
  OPS,
  type OpReply,
  type OpRequest,
  type SamplerEngine,
  type SamplerOp,
} from './ops.ts';
import type { EngineSupport, GenerateRequest, StatsReply } from './protocol.ts';
import type { EngineTopology, ServingLimits, TrainerGroup } from './settings.ts';
import { type EngineHealth, EngineSupervisor, type RemoteEngine } from './supervisor.ts';
import { samplerKindOf } from './vllm/config.ts';
import type { VllmHealth } from './vllm/sampler.ts';
import { createVllmSamplers, SamplerByBase, type VllmSetup } from './vllm/samplers.ts';

export type EngineRole = 'sampler' | 'trainer' | 'sampler+trainer';

/** What the server starts, stops and checks of an engine, whatever its kind (ours, or a vLLM sampler). */
export interface ManagedEngine {
  start(): void;
  stop(): Promise<void>;
  waitUntilReady(): Promise<unknown>;
  /** Answers only when the engine is up; ours answer with their `stats`. */
  probe(): Promise<StatsReply | void>;
  health(): EngineHealth | VllmHealth;
}

export interface RoleEngine {
  role: EngineRole;
  kind: 'ours' | 'vllm';
  supervisor: ManagedEngine;
}

/** What the services see: one engine to sample with, one to train with (the same one in single mode). */
export interface EngineRoles {
  sampler: SamplerEngine;
  trainer: Engine;
  /** What the trainer announced it can run (every topology trains on our engine); waits for its first ready frame. */
  support(): Promise<EngineSupport>;
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
  const args = [
    '--max-num-seqs',
    String(serving.maxNumSeqs),
    '--max-num-batched-tokens',
    String(serving.maxNumBatchedTokens),
  ];
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
  return { ...ours, sampler, all: [...kept, ...vllm], checkSampler: (baseId) => sampler.check(baseId) };
}

function createOurEngines({ topology, serving, python, logger, extraArgs = [] }: EngineRolesOptions): EngineRoles {
  const make = (role: EngineRole, index: number, url: string | null, process: EngineProcess): RoleEngine => ({
    role,
    kind: 'ours',
    supervisor: new EngineSupervisor({
      python,
      logger: tagged(logger, { role, engine: index }),
      remote: url === null ? null : parseUrl(url, topology.secret),
      launcher: process.launcher,
      args: [
        ...engineArgs(serving, process.threads, process.device),
        ...(process.nice ? ['--nice', String(process.nice)] : []),
        ...(process.role ?? []),
        ...extraArgs,
      ],
    }),
  });
  const supervisor = (engine: RoleEngine) => engine.supervisor as EngineSupervisor;
  const trainerProcess = { threads: topology.trainerThreads, device: topology.trainerDevice };
  if (topology.mode === 'single') {
    const only = make('sampler+trainer', 0, topology.trainerUrl, trainerProcess);
    return {
      sampler: supervisor(only),
      trainer: supervisor(only),
      support: announcedSupport(supervisor(only)),
      all: [only],
    };
  }
  const trainer = make('trainer', 0, topology.trainerUrl, {
    ...trainerProcess,
    nice: topology.trainerNice,
    ...(topology.trainerUrl === null ? trainerGroupProcess(topology.trainerGroup) : {}),
  });
  const samplerUrls =
    topology.samplerUrls.length > 0 ? topology.samplerUrls : Array<string | null>(topology.samplers).fill(null);
  // A separate sampler never trains: it refuses the trainer's ops and loads checkpoints without their Adam moments.
  const samplerProcess = {
    threads: topology.samplerThreads,
    device: topology.samplerDevice,
    role: ['--role', 'sampler'],
  };
  const samplers = samplerUrls.map((url, index) => make('sampler', index + 1, url, samplerProcess));
  const ours = samplers.map(supervisor);
  const sampler =
    ours.length === 1
      ? ours[0]
      : new SamplerPool(ours.map((engine) => ({ engine, busyness: () => supervisorBusyness(engine) })));
  return {
    sampler,
    trainer: supervisor(trainer),
    support: announcedSupport(supervisor(trainer)),
    all: [trainer, ...samplers],
  };
}

/** How one of our engine processes is started: its threads, device and priority, and a trainer's launcher and role. */
interface EngineProcess {
  threads: number | null;
  device: string | null;
  nice?: number;
  launcher?: string[];
  role?: string[];
}

/**
 * A local trainer: `--role trainer` (a trainer-only engine, its base sharded with FSDP2), one process for one rank,
 * else node 0's ranks under torch's launcher (docs/trainer-group.md): on one node a standalone rendezvous, over
 * several a static one at TRAINER_RDZV_ENDPOINT, which the other nodes' launchers join. The launcher restarts
 * nothing itself (--max-restarts=0): when a rank dies it ends the others, and this server's supervisor restarts
 * the group whole.
 */
export function trainerGroupProcess(group: TrainerGroup): Pick<EngineProcess, 'launcher' | 'role'> {
  const role = ['--role', 'trainer', '--dist-timeout', String(group.timeoutS)];
  if (group.worldSize === 1) return { role };
  const launcher = [
    '-m',
    'torch.distributed.run',
    `--nproc-per-node=${group.worldSize / group.nodes}`,
    '--max-restarts=0',
    '--monitor-interval=0.2',
  ];
  if (group.nodes === 1) return { role, launcher: [...launcher, '--standalone'] };
  const rendezvous = [
    `--nnodes=${group.nodes}`,
    '--node-rank=0',
    '--rdzv-backend=static',
    `--rdzv-endpoint=${group.rendezvous}`,
    `--rdzv-conf=timeout=${group.timeoutS}`,
  ];
  return { role, launcher: [...launcher, ...rendezvous] };
}

/** The engine's announcement from its first ready frame, kept: a restart runs the same engine code. */
export function announcedSupport(supervisor: EngineSupervisor): () => Promise<EngineSupport> {
  let announced: Promise<EngineSupport> | undefined;
  return () => {
    announced ??= supervisor.waitUntilReady().then(
      (ready) => ready.supports,
      (error: unknown) => {
        announced = undefined; // not ready yet: the next caller asks again
        throw error;
      },
    );
    return announced;
  };
}

/** Health of every engine by role, for the system check. */
export function rolesHealth(
  roles: EngineRoles,
): ((EngineHealth | VllmHealth) & { role: EngineRole; kind: RoleEngine['kind'] })[] {
  return roles.all.map(({ role, kind, supervisor }) => ({ role, kind, ...supervisor.health() }));
}

/** A sampler of the pool: any engine that serves the sampler's ops, and how busy it is now (lower is better). */
export interface PooledSampler {
  engine: SamplerEngine;
  busyness(): number;
}

/** Ready first, then the fewest requests in flight. */
export function supervisorBusyness(supervisor: EngineSupervisor): number {
  const health = supervisor.health();
  return (health.state === 'ready' ? 0 : 1_000_000) + health.inFlight;
}

/**
 * Several samplers behind one `SamplerEngine`, routed by the op table: an op marked `every` (what every sampler
 * must hold, a cancel whose stream may be on any) goes to each and their replies merge; any other op goes to the
 * least busy. Trainer ops are refused at run time too, for callers that pick the op by name.
 */
export class SamplerPool implements SamplerEngine {
  constructor(private readonly samplers: PooledSampler[]) {}

  async request<O extends SamplerOp>(op: O, body: OpRequest<O>): Promise<OpReply<O>> {
    if (!isSamplerOp(op)) throw new EngineError('bad_request', `samplers do not serve ${op}: the trainer does`);
    if (!('every' in OPS[op])) return this.leastBusy().request(op, body);
    return mergeReplies(await Promise.all(this.samplers.map(({ engine }) => engine.request(op, body))));
  }

  generate(request: GenerateRequest): GenerateStream {
    return this.leastBusy().generate(request);
  }

  private leastBusy(): SamplerEngine {
    let best = this.samplers[0];
    let bestScore = Number.POSITIVE_INFINITY;
    for (const sampler of this.samplers) {
      const score = sampler.busyness();
      if (score < bestScore) [best, bestScore] = [sampler, score];
    }
    return best.engine;
  }
}

/** The replies of one op from every sampler as one: the first, with a flag set where any sampler set it (`loaded`, `dropped`). */
function mergeReplies<R extends object>(replies: R[]): R {
  const merged = { ...replies[0] } as Record<string, unknown>;
  for (const [field, value] of Object.entries(merged)) {
    if (typeof value === 'boolean')
      merged[field] = replies.some((reply) => (reply as Record<string, unknown>)[field] === true);
  }
  return merged as R;
}
