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
