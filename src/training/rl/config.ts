/**
 * `experimental_config` of an RL job → the training configuration, per rl-loss.md. ART sends every key with
 * unset ones null; null means the default. A key we do not implement is refused when it asks for anything
 * but its default, never silently ignored.
 */
import { type Static, type TSchema, Type } from '@sinclair/typebox';
import { LearningRate, learningRateProblem } from '../../api/training-jobs.ts';
import type { LossConfig } from '../../engine/protocol.ts';
import type { FieldProblem } from '../../errors.ts';
import { LOGPROB_CHUNK_SIZE, lossEpsilons } from '../defaults.ts';

const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);
const ImportanceSamplingLevel = Type.Union([
  Type.Literal('token'),
  Type.Literal('sequence'),
  Type.Literal('average'),
  Type.Literal('geometric_average'),
]);
const KlPenaltySource = Type.Union([Type.Literal('sample'), Type.Literal('current_learner')]);
const IMPORTANCE_SAMPLING_LEVELS = ImportanceSamplingLevel.anyOf.map((literal) => literal.const);
const KL_PENALTY_SOURCES = KlPenaltySource.anyOf.map((literal) => literal.const);

/**
 * An RL job's training configuration, named as `experimental_config` names it (the wire's snake_case, which is
 * also how job payloads store it: payloads.ts), every default in place.
 */
export const RlConfig = Type.Object(
  {
    learning_rate: LearningRate,
    advantage_balance: Type.Number({ minimum: -1, maximum: 1 }),
    scale_rewards: Type.Boolean(),
    ppo: Type.Boolean(),
    epsilon: Type.Number(),
    epsilon_high: Type.Number(),
    importance_sampling_level: ImportanceSamplingLevel,
    mask_prob_ratio: Type.Boolean(),
    max_negative_advantage_importance_sampling_weight: Nullable(Type.Number()),
    k2_tau: Nullable(Type.Number()),
    precalculate_logprobs: Type.Boolean(),
    allow_training_without_logprobs: Type.Boolean(),
    truncated_importance_sampling: Nullable(Type.Number()),
    packed_sequence_length: Nullable(Type.Integer()),
    /** Positions whose logits the engine computes at once (ART's `logprob_calculation_chunk_size`). */
    logprob_calculation_chunk_size: Type.Integer({ minimum: 1 }),
    /** Each step's learning rate × (sequences in its row)^power (ART's `num_trajectories_learning_rate_multiplier_power`). */
    num_trajectories_learning_rate_multiplier_power: Type.Number(),
    /** The job's learning rate × the trend of the model's reward spread (learning-rate.ts `rewardStdDevMultiplier`). */
    scale_learning_rate_by_reward_std_dev: Type.Boolean(),
    kl_penalty_coef: Type.Number({ minimum: 0 }),
    kl_penalty_source: KlPenaltySource,
    /** The checkpoint step whose adapter is the KL reference; null: the base model. */
    kl_penalty_reference_step: Nullable(Type.Integer({ minimum: 0 })),
    /** The KL reference is this many steps behind the step being trained (floored at step 0). */
    kl_penalty_step_lag: Nullable(Type.Integer({ minimum: 1 })),
    /** `kl_ref_adapter_path` as sent: a checkpoint name that job-service.ts resolves to `kl_reference`. */
    kl_ref_adapter_path: Nullable(Type.String()),
    /** The checkpoint `kl_ref_adapter_path` named, resolved at submission; null: none named. */
    kl_reference: Nullable(
      Type.Object({ model_id: Type.String(), step: Type.Integer({ minimum: 0 }) }, { additionalProperties: false }),
    ),
    /** Chat template kwargs for every trajectory of the job (a trajectory's own take precedence). */
    chat_template_kwargs: Nullable(Type.Record(Type.String(), Type.Unknown())),
  },
  { additionalProperties: false },
);
export type RlConfig = Static<typeof RlConfig>;

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
  const problem = (key: string, msg: string, type = 'value_error') =>
    problems.push({ loc: ['body', 'experimental_config', key], msg, type });
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
  const integer = (key: string, minimum: number) =>
    number(key, (v) => (Number.isInteger(v) && v >= minimum ? null : `must be an integer >= ${minimum}`));
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
    problem(
      key,
      'Unknown experimental_config key; this server does not implement it (send null to leave it unset)',
      'not_implemented',
    );
  }
  for (const key of NO_EFFECT) bool(key);
}

/** The loss function and its clip bounds: `loss_fn` and `ppo` must agree; ε defaults per training/defaults.ts. */
function lossChoice(
  values: Record<string, unknown>,
  { problem, number, bool, oneOf }: Readers,
): Pick<RlConfig, 'ppo' | 'epsilon' | 'epsilon_high'> {
  const lossFn = oneOf('loss_fn', ['ppo', 'cispo'] as const);
  const ppoFlag = bool('ppo');
  if (lossFn !== null && ppoFlag !== null && (lossFn === 'ppo') !== ppoFlag)
    problem('loss_fn', `conflicts with ppo=${ppoFlag}`);
  const ppo = ppoFlag ?? lossFn === 'ppo';
  const epsilon = number('epsilon', (v) => (v > 0 ? null : 'must be > 0'));
  const epsilonHigh = number('epsilon_high', (v) => (v > 0 ? null : 'must be > 0'));
  return { ppo, ...lossEpsilons(ppo, epsilon, 'epsilon_high' in values ? epsilonHigh : undefined) };
}

/** The KL penalty: its coefficient, whose logprobs it measures, and which checkpoint is its reference (one way of naming it at most). */
function klPenalty({
  problem,
  number,
  oneOf,
  integer,
  string,
}: Readers): Pick<
  RlConfig,
  | 'kl_penalty_coef'
  | 'kl_penalty_source'
  | 'kl_penalty_reference_step'
  | 'kl_penalty_step_lag'
  | 'kl_ref_adapter_path'
  | 'kl_reference'
> {
  const klPenaltyCoef = number('kl_penalty_coef', (v) => (v >= 0 ? null : 'must be >= 0')) ?? 0;
  const klPenaltyReferenceStep = integer('kl_penalty_reference_step', 0);
  const klPenaltyStepLag = integer('kl_penalty_step_lag', 1);
  const klRefAdapterPath = string('kl_ref_adapter_path');
  if (klPenaltyReferenceStep !== null && klPenaltyStepLag !== null)
    problem('kl_penalty_step_lag', 'Only one of kl_penalty_reference_step and kl_penalty_step_lag may be set');
  if (klRefAdapterPath !== null && (klPenaltyReferenceStep !== null || klPenaltyStepLag !== null)) {
    problem(
      'kl_ref_adapter_path',
      'Only one of kl_ref_adapter_path, kl_penalty_reference_step and kl_penalty_step_lag may name the KL reference',
    );
  }
  const klPenaltySource =
    oneOf('kl_penalty_source', KL_PENALTY_SOURCES) ?? (klPenaltyCoef > 0 ? 'sample' : 'current_learner');
  return {
    kl_penalty_coef: klPenaltyCoef,
    kl_penalty_source: klPenaltySource,
    kl_penalty_reference_step: klPenaltyReferenceStep,
    kl_penalty_step_lag: klPenaltyStepLag,
    kl_ref_adapter_path: klRefAdapterPath,
    kl_reference: null,
  };
}

/**
 * Truncated importance sampling bounds the trainer/sampler ratio exp(old − original), which exists only when
 * the old logprobs are precalculated (ART 0.5.23 skips it otherwise): without them it is refused, not ignored.
 */
function truncatedImportanceSampling({ problem, number }: Readers, precalculateLogprobs: boolean): number | null {
  const bound = number('truncated_importance_sampling', (v) => (v > 0 ? null : 'must be > 0'));
  if (bound !== null && !precalculateLogprobs) {
    problem(
      'truncated_importance_sampling',
      "needs precalculate_logprobs: true (it truncates the ratio of the precalculated logprobs to the sampler's; ART skips it otherwise)",
    );
  }
  return bound;
}

/** The learning-rate knobs: the rate itself and the two multipliers ART derives from the data. */
function learningRateKnobs(
  { number, bool }: Readers,
  defaultLearningRate: number,
): Pick<
  RlConfig,
  'learning_rate' | 'num_trajectories_learning_rate_multiplier_power' | 'scale_learning_rate_by_reward_std_dev'
> {
  return {
    learning_rate: number('learning_rate', learningRateProblem) ?? defaultLearningRate,
    num_trajectories_learning_rate_multiplier_power: number('num_trajectories_learning_rate_multiplier_power') ?? 0,
    scale_learning_rate_by_reward_std_dev: bool('scale_learning_rate_by_reward_std_dev') ?? false,
  };
}

export function parseRlConfig(
  raw: Record<string, unknown> | null | undefined,
  defaultLearningRate: number,
): { config: RlConfig; problems: FieldProblem[] } {
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
  if (kwargs !== null && kwargs !== undefined && (typeof kwargs !== 'object' || Array.isArray(kwargs)))
    problem('chat_template_kwargs', 'Input should be a valid dictionary', 'dict_type');
  const precalculateLogprobs = bool('precalculate_logprobs') ?? false;

  return {
    config: {
      ...learningRateKnobs(readers, defaultLearningRate),
      advantage_balance:
        number('advantage_balance', (v) => (v >= -1 && v <= 1 ? null : 'must be between -1 and 1')) ?? 0,
      scale_rewards: (scaleRewards ?? true) && (normalizeAdvantages ?? true),
      ...loss,
      importance_sampling_level: oneOf('importance_sampling_level', IMPORTANCE_SAMPLING_LEVELS) ?? 'token',
      mask_prob_ratio: bool('mask_prob_ratio') ?? false,
      max_negative_advantage_importance_sampling_weight: number(
        'max_negative_advantage_importance_sampling_weight',
        (v) => (v > 0 ? null : 'must be > 0'),
      ),
      k2_tau: k2TauKey ? number(k2TauKey) : null,
      precalculate_logprobs: precalculateLogprobs,
      allow_training_without_logprobs: bool('allow_training_without_logprobs') ?? false,
      truncated_importance_sampling: truncatedImportanceSampling(readers, precalculateLogprobs),
      packed_sequence_length: number('packed_sequence_length', (v) =>
        Number.isInteger(v) && v >= 16 ? null : 'must be an integer >= 16',
      ),
      logprob_calculation_chunk_size: integer('logprob_calculation_chunk_size', 1) ?? LOGPROB_CHUNK_SIZE,
      ...kl,
      chat_template_kwargs:
        kwargs && typeof kwargs === 'object' && !Array.isArray(kwargs) ? (kwargs as Record<string, unknown>) : null,
    },
    problems,
  };
}

/** The job's loss knobs as every RL `train_step` sends them to the engine. */
export function engineLossConfig(config: RlConfig): LossConfig {
  return {
    ppo: config.ppo,
    epsilon: config.epsilon,
    epsilon_high: config.epsilon_high,
    importance_sampling_level: config.importance_sampling_level,
    max_negative_advantage_importance_sampling_weight: config.max_negative_advantage_importance_sampling_weight,
    mask_prob_ratio: config.mask_prob_ratio,
    k2_tau: config.k2_tau,
    truncated_importance_sampling: config.truncated_importance_sampling,
    kl_penalty_coef: config.kl_penalty_coef,
    kl_penalty_source: config.kl_penalty_source,
  };
}
