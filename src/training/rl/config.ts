/**
 * `experimental_config` of an RL job → the training configuration, per rl-loss.md. ART sends every key with
 * unset ones null; null means the default. A key we do not implement is refused when it asks for anything
 * but its default, never silently ignored. `RlConfig` is the one list of keys and bounds: a value is read against
 * its property's schema, and the keys a job may send are that schema's properties (less two derived ones, plus
 * two that ART spells another way).
 */
import { KindGuard, type Static, type TInteger, type TNumber, type TSchema, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import type { LossConfig } from '../../engine/protocol.ts';
import type { FieldProblem } from '../../errors.ts';
import { LOGPROB_CHUNK_SIZE, lossEpsilons } from '../defaults.ts';
import { LearningRate, learningRateProblem } from '../learning-rate.ts';

const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);
const Positive = Type.Number({ exclusiveMinimum: 0 });
const ImportanceSamplingLevel = Type.Union([
  Type.Literal('token'),
  Type.Literal('sequence'),
  Type.Literal('average'),
  Type.Literal('geometric_average'),
]);
const KlPenaltySource = Type.Union([Type.Literal('sample'), Type.Literal('current_learner')]);

/**
 * An RL job's training configuration, named as `experimental_config` names it (the wire's snake_case, which is
 * also how job payloads store it: payload.ts), every default in place.
 */
export const RlConfig = Type.Object(
  {
    learning_rate: LearningRate,
    advantage_balance: Type.Number({ minimum: -1, maximum: 1 }),
    scale_rewards: Type.Boolean(),
    ppo: Type.Boolean(),
    epsilon: Positive,
    epsilon_high: Positive,
    importance_sampling_level: ImportanceSamplingLevel,
    mask_prob_ratio: Type.Boolean(),
    max_negative_advantage_importance_sampling_weight: Nullable(Positive),
    k2_tau: Nullable(Type.Number()),
    precalculate_logprobs: Type.Boolean(),
    allow_training_without_logprobs: Type.Boolean(),
    truncated_importance_sampling: Nullable(Positive),
    packed_sequence_length: Nullable(Type.Integer({ minimum: 16 })),
    /** Positions whose logits the engine computes at once (ART's `logprob_calculation_chunk_size`). */
    logprob_calculation_chunk_size: Type.Integer({ minimum: 1 }),
    /** Each step's learning rate × (sequences in its row)^power (ART's `num_trajectories_learning_rate_multiplier_power`). */
    num_trajectories_learning_rate_multiplier_power: Type.Number(),
    /** The job's learning rate × the trend of the model's reward spread (rate-multipliers.ts `rewardStdDevMultiplier`). */
    scale_learning_rate_by_reward_std_dev: Type.Boolean(),
    kl_penalty_coef: Type.Number({ minimum: 0 }),
    kl_penalty_source: KlPenaltySource,
    /** The checkpoint step whose adapter is the KL reference; null: the base model. */
    kl_penalty_reference_step: Nullable(Type.Integer({ minimum: 0 })),
    /** The KL reference is this many steps behind the step being trained (floored at step 0). */
    kl_penalty_step_lag: Nullable(Type.Integer({ minimum: 1 })),
    /** `kl_ref_adapter_path` as sent: a checkpoint name that job-service.ts resolves to `kl_reference`. */
    kl_ref_adapter_path: Nullable(Type.String({ minLength: 1 })),
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
type RlKey = keyof typeof RlConfig.properties;

/**
 * Properties a job does not send under their own name: `kl_reference` is resolved from `kl_ref_adapter_path` at
 * submission, and `k2_tau` is read from whichever key ends in `_k2_tau` (ART's name for it has changed).
 */
const DERIVED: ReadonlySet<string> = new Set<RlKey>(['kl_reference', 'k2_tau']);
const isK2Tau = (key: string) => key.endsWith('_k2_tau');

/** Keys ART sends that say what a property holds another way: `loss_fn` is `ppo`, `normalize_advantages` folds into `scale_rewards`. */
const ALIASES = {
  loss_fn: Type.Union([Type.Literal('ppo'), Type.Literal('cispo')]),
  normalize_advantages: Type.Boolean(),
};

/**
 * Keys whose every valid value trains the same: `plot_tensors` is ART's debug output (plots of the packed
 * tensors written beside the model), `save_checkpoint` is moot because every job writes a step.
 */
const NO_EFFECT = { plot_tensors: Type.Boolean(), save_checkpoint: Type.Boolean() };

/** Every key a job may send with a value: RlConfig's own, and ART's other spellings. */
const KNOWN: ReadonlySet<string> = new Set([
  ...Object.keys(RlConfig.properties).filter((key) => !DERIVED.has(key)),
  ...Object.keys(ALIASES),
]);

/** Numbers held to a rule of their own, whose message is the rule's. */
const RULES = new Map<TSchema, (value: number) => string | null>([[LearningRate, learningRateProblem]]);

/** The schema a non-null value must match: a `Nullable` property's other member. */
function nonNull(schema: TSchema): TSchema {
  if (!KindGuard.IsUnion(schema)) return schema;
  const members = schema.anyOf.filter((member) => !KindGuard.IsNull(member));
  return members.length === 1 ? members[0] : schema;
}

/** What a number's schema asks, as a problem says it: `must be between -1 and 1`, `must be an integer >= 16`. */
function boundText(schema: TNumber | TInteger): string {
  const what = KindGuard.IsInteger(schema) ? 'an integer ' : '';
  if (schema.minimum !== undefined && schema.maximum !== undefined)
    return `must be ${what}between ${schema.minimum} and ${schema.maximum}`;
  if (schema.exclusiveMinimum !== undefined) return `must be ${what}> ${schema.exclusiveMinimum}`;
  if (schema.minimum !== undefined) return `must be ${what}>= ${schema.minimum}`;
  return `must be ${what.trim()}`;
}

/** Why `value` does not match `schema`, with pydantic's type names (ART's server is FastAPI), or null when it does. */
function valueProblem(schema: TSchema, value: unknown): Pick<FieldProblem, 'msg' | 'type'> | null {
  if (KindGuard.IsNumber(schema) || KindGuard.IsInteger(schema)) {
    if (typeof value !== 'number' || !Number.isFinite(value))
      return { msg: 'Input should be a valid number', type: 'float_type' };
    const rule = RULES.get(schema)?.(value);
    if (rule) return { msg: rule, type: 'value_error' };
    return Value.Check(schema, value) ? null : { msg: boundText(schema), type: 'value_error' };
  }
  if (Value.Check(schema, value)) return null;
  if (KindGuard.IsBoolean(schema)) return { msg: 'Input should be a valid boolean', type: 'bool_type' };
  if (KindGuard.IsString(schema)) return { msg: 'Input should be a non-empty string', type: 'string_type' };
  if (KindGuard.IsRecord(schema)) return { msg: 'Input should be a valid dictionary', type: 'dict_type' };
  const allowed = KindGuard.IsUnion(schema) ? schema.anyOf.map((literal) => `'${literal.const}'`).join(', ') : '';
  return { msg: `Input should be ${allowed}`, type: 'literal_error' };
}

/**
 * A reader of experimental_config's values: a key read against a schema (by default its RlConfig property's),
 * null or absent reading as null, and a bad value as null plus a problem.
 */
function configReader(values: Record<string, unknown>, problems: FieldProblem[]) {
  const problem = (key: string, msg: string, type = 'value_error') =>
    problems.push({ loc: ['body', 'experimental_config', key], msg, type });
  function read<K extends RlKey>(key: K): Exclude<RlConfig[K], null> | null;
  function read<T extends TSchema>(key: string, schema: T): Static<T> | null;
  function read(key: string, schema: TSchema = RlConfig.properties[key as RlKey]): unknown {
    const value = values[key];
    if (value === null || value === undefined) return null;
    const found = valueProblem(nonNull(schema), value);
    if (!found) return value;
    problem(key, found.msg, found.type);
    return null;
  }
  return { problem, read };
}

type Reader = ReturnType<typeof configReader>;

/** Keys we do not know: refused unless null. Keys without effect are still type-checked. */
function unimplementedKeyProblems(values: Record<string, unknown>, { problem, read }: Reader): void {
  for (const [key, value] of Object.entries(values)) {
    if (value === null || KNOWN.has(key) || isK2Tau(key) || Object.hasOwn(NO_EFFECT, key)) continue;
    problem(
      key,
      'Unknown experimental_config key; this server does not implement it (send null to leave it unset)',
      'not_implemented',
    );
  }
  for (const [key, schema] of Object.entries(NO_EFFECT)) read(key, schema);
}

/** The loss function and its clip bounds: `loss_fn` and `ppo` must agree; ε defaults per training/defaults.ts. */
function lossChoice(
  values: Record<string, unknown>,
  { problem, read }: Reader,
): Pick<RlConfig, 'ppo' | 'epsilon' | 'epsilon_high'> {
  const lossFn = read('loss_fn', ALIASES.loss_fn);
  const ppoFlag = read('ppo');
  if (lossFn !== null && ppoFlag !== null && (lossFn === 'ppo') !== ppoFlag)
    problem('loss_fn', `conflicts with ppo=${ppoFlag}`);
  const ppo = ppoFlag ?? lossFn === 'ppo';
  const epsilon = read('epsilon');
  const epsilonHigh = read('epsilon_high');
  return { ppo, ...lossEpsilons(ppo, epsilon, 'epsilon_high' in values ? epsilonHigh : undefined) };
}

/** The KL penalty: its coefficient, whose logprobs it measures, and which checkpoint is its reference (one way of naming it at most). */
function klPenalty({
  problem,
  read,
}: Reader): Pick<
  RlConfig,
  | 'kl_penalty_coef'
  | 'kl_penalty_source'
  | 'kl_penalty_reference_step'
  | 'kl_penalty_step_lag'
  | 'kl_ref_adapter_path'
  | 'kl_reference'
> {
  const klPenaltyCoef = read('kl_penalty_coef') ?? 0;
  const klPenaltyReferenceStep = read('kl_penalty_reference_step');
  const klPenaltyStepLag = read('kl_penalty_step_lag');
  const klRefAdapterPath = read('kl_ref_adapter_path');
  if (klPenaltyReferenceStep !== null && klPenaltyStepLag !== null)
    problem('kl_penalty_step_lag', 'Only one of kl_penalty_reference_step and kl_penalty_step_lag may be set');
  if (klRefAdapterPath !== null && (klPenaltyReferenceStep !== null || klPenaltyStepLag !== null)) {
    problem(
      'kl_ref_adapter_path',
      'Only one of kl_ref_adapter_path, kl_penalty_reference_step and kl_penalty_step_lag may name the KL reference',
    );
  }
  return {
    kl_penalty_coef: klPenaltyCoef,
    kl_penalty_source: read('kl_penalty_source') ?? (klPenaltyCoef > 0 ? 'sample' : 'current_learner'),
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
function truncatedImportanceSampling({ problem, read }: Reader, precalculateLogprobs: boolean): number | null {
  const bound = read('truncated_importance_sampling');
  if (bound !== null && !precalculateLogprobs) {
    problem(
      'truncated_importance_sampling',
      "needs precalculate_logprobs: true (it truncates the ratio of the precalculated logprobs to the sampler's; ART skips it otherwise)",
    );
  }
  return bound;
}

/** The learning-rate knobs: the rate itself (the default read only when none is given) and ART's two multipliers. */
function learningRateKnobs(
  { read }: Reader,
  defaultLearningRate: () => number,
): Pick<
  RlConfig,
  'learning_rate' | 'num_trajectories_learning_rate_multiplier_power' | 'scale_learning_rate_by_reward_std_dev'
> {
  return {
    learning_rate: read('learning_rate') ?? defaultLearningRate(),
    num_trajectories_learning_rate_multiplier_power: read('num_trajectories_learning_rate_multiplier_power') ?? 0,
    scale_learning_rate_by_reward_std_dev: read('scale_learning_rate_by_reward_std_dev') ?? false,
  };
}

/** An RL job's `experimental_config`, every default in place, and what is wrong with it (empty: nothing). */
export function parseRlConfig(
  raw: Record<string, unknown> | null | undefined,
  defaultLearningRate: () => number,
): { config: RlConfig; problems: FieldProblem[] } {
  const problems: FieldProblem[] = [];
  const values = raw ?? {};
  const reader = configReader(values, problems);
  const { read } = reader;
  unimplementedKeyProblems(values, reader);
  const k2TauKey = Object.keys(values).find(isK2Tau);
  const precalculateLogprobs = read('precalculate_logprobs') ?? false;
  return {
    config: {
      ...learningRateKnobs(reader, defaultLearningRate),
      advantage_balance: read('advantage_balance') ?? 0,
      scale_rewards:
        (read('scale_rewards') ?? true) && (read('normalize_advantages', ALIASES.normalize_advantages) ?? true),
      ...lossChoice(values, reader),
      importance_sampling_level: read('importance_sampling_level') ?? 'token',
      mask_prob_ratio: read('mask_prob_ratio') ?? false,
      max_negative_advantage_importance_sampling_weight: read('max_negative_advantage_importance_sampling_weight'),
      k2_tau: k2TauKey ? read(k2TauKey, RlConfig.properties.k2_tau) : null,
      precalculate_logprobs: precalculateLogprobs,
      allow_training_without_logprobs: read('allow_training_without_logprobs') ?? false,
      truncated_importance_sampling: truncatedImportanceSampling(reader, precalculateLogprobs),
      packed_sequence_length: read('packed_sequence_length'),
      logprob_calculation_chunk_size: read('logprob_calculation_chunk_size') ?? LOGPROB_CHUNK_SIZE,
      ...klPenalty(reader),
      chat_template_kwargs: read('chat_template_kwargs'),
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
