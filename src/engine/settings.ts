/**
 * What the engine processes run with, as the configuration reads it from the environment: their topology
 * (trainer and samplers, local or remote) and the vLLM-named serving limits each sampler gets.
 */

import type { Dtype } from './protocol.ts';

/**
 * `separate`: a trainer and `samplers` sampling engines, so chat keeps answering while a job trains;
 * `single`: one engine holds both roles (machines too small for two). An engine with a URL is a remote
 * `python -m engine --tcp` reached with `secret`; one without is a child process of this server.
 */
export interface EngineTopology {
  mode: 'separate' | 'single';
  samplers: number;
  samplerUrls: string[];
  trainerUrl: string | null;
  secret: string | null;
  /** CPU threads per child engine; null lets torch choose. */
  samplerThreads: number | null;
  trainerThreads: number | null;
  /** `cpu`, `cuda` or `cuda:N` per child engine; null: CUDA when available. */
  samplerDevice: string | null;
  trainerDevice: string | null;
  /** CPU priority the child trainer gives up (`nice`), so where it shares cores with samplers, decode steps go first. */
  trainerNice: number;
  /** The trainer's process group (a local trainer's; a remote one is launched where it runs). */
  trainerGroup: TrainerGroup;
}

/**
 * The trainer as a process group (docs/trainer-group.md): `worldSize` ranks over `nodes` nodes, each node running
 * `worldSize / nodes` of them under torch's launcher (torch.distributed.run). This server launches node 0's, whose
 * rank 0 speaks the engine protocol; the other nodes run the same launcher pointed at `rendezvous`.
 */
export interface TrainerGroup {
  worldSize: number;
  nodes: number;
  /** host:port on node 0 where the other nodes join (the launcher's --rdzv-endpoint); null on one node. */
  rendezvous: string | null;
  /** Seconds the ranks wait for each other at start-up (and for any collective) before the start fails. */
  timeoutS: number;
}

export interface ServingLimits {
  /** Most tokens (prompt included) one sequence may hold; null: the model's own. */
  maxModelLen: number | null;
  /** Most sequences decoding at once per engine. */
  maxNumSeqs: number;
  /** Most prompt tokens prefilled between two decode steps. */
  maxNumBatchedTokens: number;
  /** KV-cache bytes per engine and base; null: as large as max_num_seqs × max_model_len needs. */
  kvCacheMemoryBytes: number | null;
  /** Weights and compute dtype; null: float32 on CPU, bfloat16 on CUDA. */
  dtype: Dtype | null;
}
