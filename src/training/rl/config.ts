/**
 * `experimental_config` of an RL job → the training configuration, per rl-loss.md. ART sends every key with
 * unset ones null; null means the default. A key we do not implement is refused when it asks for anything
 * but its default, never silently ignored.
 */
import type { FieldProblem } from '../../errors.ts';
import type { LossConfig } from '../../engine/protocol.ts';
import { LOGPROB_CHUNK_SIZE, lossEpsilons } from '../defaults.ts';

export type ImportanceSamplingLevel = 'token' | 'sequence' | 'average' | 'geometric_average';

export interface RlConfig {
  learningRate: number;
  advantageBalance: number;
  scaleRewards: boolean;
  ppo: boolean;
  epsilon: number;
  epsilonHigh: number;
  importanceSamplingLevel: ImportanceSamplingLevel;
  maskProbRatio: boolean;
  maxNegativeAdvantageImportanceSamplingWeight: number | null;
  k2Tau: number | null;
  precalculateLogprobs: boolean;
  allowTrainingWithoutLogprobs: boolean;
  truncatedImportanceSampling: number | null;
  packedSequenceLength: number | null;
  /** Positions whose logits the engine computes at once (ART's `logprob_calculation_chunk_size`). */
  logprobCalculationChunkSize: number;
  /** Each step's learning rate × (sequences in its row)^power (ART's `num_trajectories_learning_rate_multiplier_power`). */
  numTrajectoriesLearningRateMultiplierPower: number;
  /** The job's learning rate × the trend of the model's reward spread (learning-rate.ts `rewardStdDevMultiplier`). */
  scaleLearningRateByRewardStdDev: boolean;
  klPenaltyCoef: number;
  klPenaltySource: 'sample' | 'current_learner';
  /** The checkpoint step whose adapter is the KL reference; null: the base model. */
  klPenaltyReferenceStep: number | null;
  /** The KL reference is this many steps behind the step being trained (floored at step 0). */
  klPenaltyStepLag: number | null;
  /** `kl_ref_adapter_path` as sent: a checkpoint name that job-service.ts resolves to `klReference`. */
  klRefAdapterPath: string | null;
  /** The checkpoint `kl_ref_adapter_path` named, resolved at submission; null: none named. */
  klReference: { modelId: string; step: number } | null;
  /** Chat template kwargs for every trajectory of the job (a trajectory's own take precedence). */
  chatTemplateKwargs: Record<string, unknown> | null;
}

/**
 * Keys whose every valid value trains the same: `plot_tensors` is ART's debug output (plots of the packed
 * tensors written beside the model), `save_checkpoint` is moot because every job writes a step.
 */
const NO_EFFECT = new Set(['plot_tensors', 'save_checkpoint']);

const KNOWN = new Set([
  'learning_rate',
  'advantage_balance',
  'scale_rewards',
  'normalize_advantages',
  'ppo',
  'loss_fn',
  'epsilon',
  'epsilon_high',
  'importance_sampling_level',
  'mask_prob_ratio',
  'max_negative_advantage_importance_sampling_weight',
  'precalculate_logprobs',
  'allow_training_without_logprobs',
  'truncated_importance_sampling',
  'packed_sequence_length',
  'logprob_calculation_chunk_size',
  'num_trajectories_learning_rate_multiplier_power',
  'scale_learning_rate_by_reward_std_dev',
  'kl_penalty_coef',
  'kl_penalty_source',
  'kl_penalty_reference_step',
  'kl_penalty_step_lag',
  'kl_ref_adapter_path',
  'chat_template_kwargs',
]);

const isK2Tau = (key: string) => key.endsWith('_k2_tau');

/** Readers of experimental_config's values: null or absent reads as null, a bad value as null plus a problem. */
function fieldReaders(values: Record<string, unknown>, problems: FieldProblem[]) {
  const problem = (key: string, msg: string, type = 'value_error') => problems.push({ loc: ['body', 'experimental_config', key], msg, type });
  const number = (key: string, check?: (v: number) => string | null): number | null => {
    const value = values[key];
    if (value === null || value === undefined) return null;
    if (typeof value !== 'number' || !Number.isFinite(value)) {
      problem(key, 'Input should be a valid number', 'float_type');
      return null;
    }
    const error = check?.(value);
    if (error) {
      problem(key, error);
      return null;
    }
    return value;
  };
  const bool = (key: string): boolean | null => {
    const value = values[key];
    if (value === null || value === undefined) return null;
    if (typeof value !== 'boolean') {
      problem(key, 'Input should be a valid boolean', 'bool_type');
      return null;
    }
    return value;
  };
  const oneOf = <T extends string>(key: string, allowed: readonly T[]): T | null => {
    const value = values[key];
    if (value === null || value === undefined) return null;
    if (typeof value !== 'string' || !allowed.includes(value as T)) {
      problem(key, `Input should be ${allowed.map((a) => `'${a}'`).join(', ')}`, 'literal_error');
      return null;
    }
    return value as T;
  };
  const integer = (key: string, minimum: number) => number(key, (v) => (Number.isInteger(v) && v >= minimum ? null : `must be an integer >= ${minimum}`));
  const string = (key: string): string | null => {
    const value = values[key];
    if (value === null || value === undefined) return null;
    if (typeof value !== 'string' || value.length === 0) {
      problem(key, 'Input should be a non-empty string', 'string_type');
      return null;
    }
    return value;
  };
  return { problem, number, bool, oneOf, integer, string };
}

type Readers = ReturnType<typeof fieldReaders>;

/** Keys we do not know: refused unless null. Keys without effect are still type-checked. */
function unimplementedKeyProblems(values: Record<string, unknown>, { problem, bool }: Readers): void {
  for (const [key, value] of Object.entries(values)) {
    if (value === null || KNOWN.has(key) || isK2Tau(key) || NO_EFFECT.has(key)) continue;
    problem(key, 'Unknown experimental_config key; this server does not implement it (send null to leave it unset)', 'not_implemented');
  }
  for (const key of NO_EFFECT) bool(key);
}

/** The loss function and its clip bounds: `loss_fn` and `ppo` must agree; ε defaults per training/defaults.ts. */
function lossChoice(values: Record<string, unknown>, { problem, number, bool, oneOf }: Readers): Pick<RlConfig, 'ppo' | 'epsilon' | 'epsilonHigh'> {
  const lossFn = oneOf('loss_fn', ['ppo', 'cispo'] as const);
  const ppoFlag = bool('ppo');
  if (lossFn !== null && ppoFlag !== null && (lossFn === 'ppo') !== ppoFlag) problem('loss_fn', `conflicts with ppo=${ppoFlag}`);
  const ppo = ppoFlag ?? lossFn === 'ppo';
  const epsilon = number('epsilon', (v) => (v > 0 ? null : 'must be > 0'));
  const epsilonHigh = number('epsilon_high', (v) => (v > 0 ? null : 'must be > 0'));
  return { ppo, ...lossEpsilons(ppo, epsilon, 'epsilon_high' in values ? epsilonHigh : undefined) };
}

/** The KL penalty: its coefficient, whose logprobs it measures, and which checkpoint is its reference (one way of naming it at most). */
function klPenalty({ problem, number, oneOf, integer, string }: Readers): Pick<RlConfig, 'klPenaltyCoef' | 'klPenaltySource' | 'klPenaltyReferenceStep' | 'klPenaltyStepLag' | 'klRefAdapterPath' | 'klReference'> {
  const klPenaltyCoef = number('kl_penalty_coef', (v) => (v >= 0 ? null : 'must be >= 0')) ?? 0;
  const klPenaltyReferenceStep = integer('kl_penalty_reference_step', 0);
  const klPenaltyStepLag = integer('kl_penalty_step_lag', 1);
  const klRefAdapterPath = string('kl_ref_adapter_path');
  if (klPenaltyReferenceStep !== null && klPenaltyStepLag !== null) problem('kl_penalty_step_lag', 'Only one of kl_penalty_reference_step and kl_penalty_step_lag may be set');
  if (klRefAdapterPath !== null && (klPenaltyReferenceStep !== null || klPenaltyStepLag !== null)) {
    problem('kl_ref_adapter_path', 'Only one of kl_ref_adapter_path, kl_penalty_reference_step and kl_penalty_step_lag may name the KL reference');
  }
  const klPenaltySource = oneOf('kl_penalty_source', ['sample', 'current_learner'] as const) ?? (klPenaltyCoef > 0 ? 'sample' : 'current_learner');
  return { klPenaltyCoef, klPenaltySource, klPenaltyReferenceStep, klPenaltyStepLag, klRefAdapterPath, klReference: null };
}

/**
 * Truncated importance sampling bounds the trainer/sampler ratio exp(old − original), which exists only when
 * the old logprobs are precalculated (ART 0.5.23 skips it otherwise): without them it is refused, not ignored.
 */
function truncatedImportanceSampling({ problem, number }: Readers, precalculateLogprobs: boolean): number | null {
  const bound = number('truncated_importance_sampling', (v) => (v > 0 ? null : 'must be > 0'));
  if (bound !== null && !precalculateLogprobs) {
    problem('truncated_importance_sampling', 'needs precalculate_logprobs: true (it truncates the ratio of the precalculated logprobs to the sampler\'s; ART skips it otherwise)');
  }
  return bound;
}

/** The learning-rate knobs: the rate itself and the two multipliers ART derives from the data. */
function learningRateKnobs({ number, bool }: Readers, defaultLearningRate: number): Pick<RlConfig, 'learningRate' | 'numTrajectoriesLearningRateMultiplierPower' | 'scaleLearningRateByRewardStdDev'> {
  return {
    learningRate: number('learning_rate', (v) => (v > 0 ? null : 'must be > 0')) ?? defaultLearningRate,
    numTrajectoriesLearningRateMultiplierPower: number('num_trajectories_learning_rate_multiplier_power') ?? 0,
    scaleLearningRateByRewardStdDev: bool('scale_learning_rate_by_reward_std_dev') ?? false,
  };
}

export function parseRlConfig(raw: Record<string, unknown> | null | undefined, defaultLearningRate: number): { config: RlConfig; problems: FieldProblem[] } {
  const problems: FieldProblem[] = [];
  const values = raw ?? {};
  const readers = fieldReaders(values, problems);
  const { problem, number, bool, oneOf, integer } = readers;
  unimplementedKeyProblems(values, readers);
  const loss = lossChoice(values, readers);
  const scaleRewards = bool('scale_rewards');
  const normalizeAdvantages = bool('normalize_advantages');
  const kl = klPenalty(readers);
  const k2TauKey = Object.keys(values).find(isK2Tau);
  const kwargs = values.chat_template_kwargs;
  if (kwargs !== null && kwargs !== undefined && (typeof kwargs !== 'object' || Array.isArray(kwargs))) problem('chat_template_kwargs', 'Input should be a valid dictionary', 'dict_type');
  const precalculateLogprobs = bool('precalculate_logprobs') ?? false;

  return {
    config: {
      ...learningRateKnobs(readers, defaultLearningRate),
      advantageBalance: number('advantage_balance', (v) => (v >= -1 && v <= 1 ? null : 'must be between -1 and 1')) ?? 0,
      scaleRewards: (scaleRewards ?? true) && (normalizeAdvantages ?? true),
      ...loss,
      importanceSamplingLevel: oneOf('importance_sampling_level', ['token', 'sequence', 'average', 'geometric_average'] as const) ?? 'token',
      maskProbRatio: bool('mask_prob_ratio') ?? false,
      maxNegativeAdvantageImportanceSamplingWeight: number('max_negative_advantage_importance_sampling_weight', (v) => (v > 0 ? null : 'must be > 0')),
      k2Tau: k2TauKey ? number(k2TauKey) : null,
      precalculateLogprobs,
      allowTrainingWithoutLogprobs: bool('allow_training_without_logprobs') ?? false,
      truncatedImportanceSampling: truncatedImportanceSampling(readers, precalculateLogprobs),
      packedSequenceLength: number('packed_sequence_length', (v) => (Number.isInteger(v) && v >= 16 ? null : 'must be an integer >= 16')),
      logprobCalculationChunkSize: integer('logprob_calculation_chunk_size', 1) ?? LOGPROB_CHUNK_SIZE,
      ...kl,
      chatTemplateKwargs: kwargs && typeof kwargs === 'object' && !Array.isArray(kwargs) ? (kwargs as Record<string, unknown>) : null,
    },
    problems,
  };
}

/** The job's loss knobs as every RL `train_step` sends them to the engine. */
export function engineLossConfig(config: RlConfig): LossConfig {
  return {
    ppo: config.ppo,
    epsilon: config.epsilon,
    epsilon_high: config.epsilonHigh,
    importance_sampling_level: config.importanceSamplingLevel,
    max_negative_advantage_importance_sampling_weight: config.maxNegativeAdvantageImportanceSamplingWeight,
    mask_prob_ratio: config.maskProbRatio,
    k2_tau: config.k2Tau,
    truncated_importance_sampling: config.truncatedImportanceSampling,
    kl_penalty_coef: config.klPenaltyCoef,
    kl_penalty_source: config.klPenaltySource,
  };
}
