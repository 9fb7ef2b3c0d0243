/**
 * An SFT job's `config` → its training configuration, every default in place: the batch size, the learning rate
 * or a schedule of one per batch (each entry held to the learning-rate rule, the base's default read only when
 * none is given), which assistant turns are trained, template kwargs, and where its metrics are logged.
 * `experimental_config` has no key SFT implements: any non-null one is refused, named.
 */
import { type Static, type TSchema, Type } from '@sinclair/typebox';
import { type SftJobBody, SftMetricLogging } from '../../api/training-jobs.ts';
import type { FieldProblem } from '../../errors.ts';
import { LearningRate, learningRateProblem } from '../learning-rate.ts';

/** Conversations per optimizer step when an SFT job says `batch_size: "auto"` or nothing (ART's own default). */
export const DEFAULT_SFT_BATCH_SIZE = 2;

const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

/** An SFT job's training configuration, named as its `config` names it (and as its payload stores it). */
export const SftConfig = Type.Object(
  {
    batch_size: Type.Integer({ minimum: 1 }),
    /** One rate for every batch, or one per batch. */
    learning_rate: Type.Union([LearningRate, Type.Array(LearningRate, { minItems: 1 })]),
    /** Which assistant spans of each conversation are trained. */
    assistant_turns: Type.Union([Type.Literal('all'), Type.Literal('last')]),
    chat_template_kwargs: Nullable(Type.Record(Type.String(), Type.Unknown())),
    /** ART's `config.metric_logging` as sent (null: logged at the step the job writes). */
    metric_logging: Nullable(SftMetricLogging),
  },
  { additionalProperties: false },
);
export type SftConfig = Static<typeof SftConfig>;

/** The defaults that depend on nothing else (a job's batch size and learning rate are always filled in). */
export const SFT_CONFIG_DEFAULTS = {
  assistant_turns: 'all',
  chat_template_kwargs: null,
  metric_logging: null,
} as const satisfies Partial<SftConfig>;

/** `experimental_config`: every non-null key is one SFT does not implement. */
export function unimplementedKeyProblems(experimental: Record<string, unknown> | null | undefined): FieldProblem[] {
  return Object.entries(experimental ?? {})
    .filter(([, value]) => value !== null)
    .map(([key]) => ({
      loc: ['body', 'experimental_config', key],
      msg: 'Not implemented by this server for SFT (send null)',
      type: 'not_implemented',
    }));
}

/** A rate, or a schedule with one per batch: each entry held to the learning-rate rule. */
function learningRateProblems(rate: number | number[]): FieldProblem[] {
  const loc = ['body', 'config', 'learning_rate'];
  const problem = (value: number, at: (string | number)[]): FieldProblem[] => {
    const msg = learningRateProblem(value);
    return msg ? [{ loc: at, msg, type: 'value_error' }] : [];
  };
  return Array.isArray(rate) ? rate.flatMap((value, index) => problem(value, [...loc, index])) : problem(rate, loc);
}

/** An SFT job's `config` for data of `numConversations`, every default in place, and what is wrong with it. */
export function parseSftConfig(
  raw: SftJobBody['config'],
  numConversations: number,
  defaultLearningRate: () => number,
): { config: SftConfig; problems: FieldProblem[] } {
  const given = raw ?? {};
  const batchSize = typeof given.batch_size === 'number' ? given.batch_size : DEFAULT_SFT_BATCH_SIZE;
  const learningRate = given.learning_rate ?? defaultLearningRate();
  const problems = learningRateProblems(learningRate);
  const numBatches = Math.ceil(numConversations / batchSize);
  if (Array.isArray(learningRate) && learningRate.length !== numBatches) {
    problems.push({
      loc: ['body', 'config', 'learning_rate'],
      msg: `a learning-rate schedule needs one value per batch: ${numConversations} conversations in batches of ${batchSize} make ${numBatches} batches, not ${learningRate.length}`,
      type: 'value_error',
    });
  }
  return {
    config: {
      batch_size: batchSize,
      learning_rate: learningRate,
      assistant_turns: given.assistant_turns ?? SFT_CONFIG_DEFAULTS.assistant_turns,
      chat_template_kwargs: given.chat_template_kwargs ?? SFT_CONFIG_DEFAULTS.chat_template_kwargs,
      metric_logging: given.metric_logging ?? SFT_CONFIG_DEFAULTS.metric_logging,
    },
    problems,
  };
}
