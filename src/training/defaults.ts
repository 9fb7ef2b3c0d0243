/**
 * The training defaults: every value a training job may leave out and the engine needs. This is their one
 * home; the engine keeps none of its own (engine/wire.py refuses a request that lacks one), so each engine
 * request carries them: `ensure_adapter`'s `init`, `train_step`'s `loss_config` and `optimizer`. The Tinker API
 * reads the LoRA shape here too, for a training client that names no rank.
 */
import type { AdapterInit, OptimizerConfig, TrainLoss } from '../engine/protocol.ts';

/** The projections LoRA trains by default, by block (Tinker's `train_attn` / `train_mlp` choose among them). */
export const ATTENTION_PROJECTIONS: readonly string[] = ['q_proj', 'k_proj', 'v_proj', 'o_proj'];
export const MLP_PROJECTIONS: readonly string[] = ['gate_proj', 'up_proj', 'down_proj'];

/** The LoRA shape a model gets when its creator names none (alpha scales with the rank when only the rank is given). */
export const LORA_DEFAULTS: { rank: number; alpha: number; target_modules: readonly string[] } = {
  rank: 8,
  alpha: 16,
  // A choice, not a copy of the engine's table: the engine announces what it can adapt and refuses anything else.
  target_modules: [...ATTENTION_PROJECTIONS, ...MLP_PROJECTIONS],
};

/**
 * Below this hidden size a base is a toy model (the built-in tiny-chat has 192; the smallest real models we
 * serve, SmolLM2-135M, 576): its few, wide-open weights learn at a rate that would wreck a pretrained model.
 */
const TOY_HIDDEN_SIZE = 512;
const TOY_LEARNING_RATE = 1e-3;
const PRETRAINED_LEARNING_RATE = 5e-6;

/** The learning rate of a job that names none, from the base's HF `config.json` (null when it cannot be read). */
export function defaultLearningRate(baseConfig: Record<string, unknown> | null): number {
  const hidden = baseConfig?.hidden_size;
  return typeof hidden === 'number' && hidden < TOY_HIDDEN_SIZE ? TOY_LEARNING_RATE : PRETRAINED_LEARNING_RATE;
}

/**
 * A fresh adapter's shape: every projection the base offers (`targets`, its engine's `lora_targets`: attention and
 * MLP, a mixture's experts included, its router never), or our default list where the engine named none. `seed`
 * fixes its random A (B starts at zero, so a fresh adapter is a no-op either way).
 */
export function loraInit(seed: number, targets: readonly string[] = []): AdapterInit {
  return {
    rank: LORA_DEFAULTS.rank,
    alpha: LORA_DEFAULTS.alpha,
    target_modules: targets.length ? [...targets] : [...LORA_DEFAULTS.target_modules],
    seed,
  };
}

/**
 * The clip bounds of rl-loss.md (the ratio kept within [1 - ε, 1 + ε_high]) for what the job gave: ε defaults
 * to 0.2 for PPO and 1.0 for CISPO; ε_high to ε for PPO, to 4.0 for CISPO when absent (`undefined`), and to ε
 * when sent as an explicit null.
 */
export function lossEpsilons(
  ppo: boolean,
  epsilon: number | null,
  epsilonHigh: number | null | undefined,
): { epsilon: number; epsilon_high: number } {
  const low = epsilon ?? (ppo ? 0.2 : 1.0);
  return { epsilon: low, epsilon_high: epsilonHigh ?? (ppo || epsilonHigh === null ? low : 4.0) };
}

/** rl-loss.md: RL clips gradients at 0.1 with weight decay 0.1; SFT clips at 1.0 without decay. */
const OPTIMIZER = {
  rl: { betas: [0.9, 0.99], weight_decay: 0.1, max_grad_norm: 0.1 },
  sft: { betas: [0.9, 0.99], weight_decay: 0, max_grad_norm: 1.0 },
} as const satisfies Record<TrainLoss, Omit<OptimizerConfig, 'learning_rate' | 'betas'> & { betas: readonly number[] }>;

/** The AdamW settings of one train step of `loss` at this learning rate. */
export function optimizerConfig(loss: TrainLoss, learningRate: number): OptimizerConfig {
  const { betas, weight_decay, max_grad_norm } = OPTIMIZER[loss];
  return { learning_rate: learningRate, betas: [betas[0], betas[1]], weight_decay, max_grad_norm };
}

/** ART's `logprob_calculation_chunk_size` when a job names none: positions whose logits one chunk computes. */
export const LOGPROB_CHUNK_SIZE = 1024;
