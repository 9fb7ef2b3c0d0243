/**
 * Wire schemas of the read-only `/v1/dashboard/...` endpoints; they produce the TypeScript types the
 * service returns and the dashboard (web/src/api.ts) reads.
 */
import { type Static, Type } from '@sinclair/typebox';
import { servedModelName } from './model-name.ts';
import { type ModelNames, ModelResponse, toModelResponse } from './models.ts';
import { TrainedTokens } from './trained-tokens.ts';
import { type JobRow, TrainingJob, toTrainingJob } from './training-jobs.ts';
import type { JobStatus } from './training-vocabulary.ts';

const Json = Type.Record(Type.String(), Type.Unknown());
const NullableNumber = Type.Union([Type.Number(), Type.Null()]);

export const Overview = Type.Object({
  entity: Type.String(),
  entities: Type.Array(Type.String()),
  base_models: Type.Array(Type.String()),
  default_base_model: Type.String(),
});
export type Overview = Static<typeof Overview>;

export const RewardPoint = Type.Object({ value: Type.Number(), std_dev: NullableNumber, step: Type.Integer() });
export type RewardPoint = Static<typeof RewardPoint>;

export const ModelSummary = Type.Object({
  ...ModelResponse.properties,
  created_at: Type.String(),
  /** The model's served name, `entity/project/name` (model-name.ts; its `:stepN` form names a checkpoint). */
  inference_name: Type.String(),
  latest_step: Type.Union([Type.Integer(), Type.Null()]),
  checkpoint_count: Type.Integer(),
  /** The newest reward of any split, and the newest per split (`train` is the RL jobs' own reward). */
  last_reward: Type.Union([Type.Object({ ...RewardPoint.properties, split: Type.String() }), Type.Null()]),
  rewards: Type.Record(Type.String(), RewardPoint),
  last_job: Type.Union([Type.Object({ id: Type.String(), status: Type.String() }), Type.Null()]),
});
export type ModelSummary = Static<typeof ModelSummary>;

/** The newest reward of any split, and the newest of each split. */
export interface LatestRewards {
  last: (RewardPoint & { split: string }) | null;
  bySplit: Record<string, RewardPoint>;
}

export function toModelSummary(row: ModelSummaryRow, rewards: LatestRewards): ModelSummary {
  return {
    ...toModelResponse(row),
    created_at: row.created_at,
    inference_name: servedModelName({ entity: row.entity_name, project: row.project, name: row.name }),
    latest_step: row.latest_step,
    checkpoint_count: row.checkpoint_count,
    last_reward: rewards.last,
    rewards: rewards.bySplit,
    last_job: row.last_job_id && row.last_job_status ? { id: row.last_job_id, status: row.last_job_status } : null,
  };
}

/** One row of a run's metric history: a training job (`train`) or a log call (`log:<split>`). */
export const MetricRow = Type.Object({
  id: Type.String(),
  step: Type.Integer(),
  source: Type.String(),
  split: Type.String(),
  metrics: Json,
  created_at: Type.String(),
});
export type MetricRow = Static<typeof MetricRow>;

export const TrajectorySteps = Type.Object({
  splits: Type.Array(
    Type.Object({
      split: Type.String(),
      count: Type.Integer(),
      steps: Type.Array(Type.Object({ step: Type.Integer(), count: Type.Integer() })),
    }),
  ),
});
export type TrajectorySteps = Static<typeof TrajectorySteps>;

const TrajectoryFields = {
  id: Type.String(),
  split: Type.String(),
  step: Type.Integer(),
  group_index: Type.Integer(),
  trajectory_index: Type.Integer(),
  reward: NullableNumber,
  created_at: Type.String(),
};

export const TrajectorySummary = Type.Object({
  ...TrajectoryFields,
  num_messages: Type.Integer(),
  num_tool_calls: Type.Integer(),
  has_reasoning: Type.Boolean(),
  prompt_preview: Type.String(),
  response_preview: Type.String(),
  /** Characters the assistant wrote over the whole trajectory. */
  response_chars: Type.Integer(),
  /** Sampled tokens, from the choices' logprobs; null when no choice kept them. */
  completion_tokens: Type.Union([Type.Integer(), Type.Null()]),
  /** Of the last sampled choice; null when the trajectory holds plain messages only. */
  finish_reason: Type.Union([Type.String(), Type.Null()]),
  metrics: Type.Record(Type.String(), Type.Number()),
});
export type TrajectorySummary = Static<typeof TrajectorySummary>;

/**
 * A trajectory's conversations in the legacy form's shape, whichever form it was sent in: a captured trajectory's
 * exchanges grouped as ART groups them (trajectories/exchanges.ts `capturedConversations`), its first
 * conversation in `messages_and_choices` and each other branch in `additional_histories`.
 */
export const TrajectoryConversation = Type.Object({
  form: Type.Union([Type.Literal('legacy'), Type.Literal('captured')]),
  /** The APIs a captured trajectory's exchanges called (`chat_completions`, `completions`, …); empty for legacy. */
  kinds: Type.Array(Type.String()),
  messages_and_choices: Type.Array(Json),
  tools: Type.Union([Type.Array(Type.Unknown()), Type.Null()]),
  additional_histories: Type.Array(
    Type.Object({
      messages_and_choices: Type.Array(Json),
      tools: Type.Union([Type.Array(Type.Unknown()), Type.Null()]),
    }),
  ),
});
export type TrajectoryConversation = Static<typeof TrajectoryConversation>;

export const TrajectoryDetail = Type.Object({
  ...TrajectoryFields,
  /** The trajectory as it was sent (ART's defaults in place). */
  data: Json,
  conversation: TrajectoryConversation,
  trained_tokens: TrainedTokens,
});
export type TrajectoryDetail = Static<typeof TrajectoryDetail>;

export const JobListItem = Type.Object({
  ...TrainingJob.properties,
  completed_steps: Type.Integer(),
  model: Type.Object({ id: Type.String(), entity: Type.String(), project: Type.String(), name: Type.String() }),
});
export type JobListItem = Static<typeof JobListItem>;

export function toJobListItem(row: JobListRow): JobListItem {
  return {
    ...toTrainingJob(row),
    completed_steps: row.completed_steps,
    model: { id: row.model_id, entity: row.entity_name, project: row.project, name: row.model_name },
  };
}

export const JobConfig = Type.Object({
  job_id: Type.String(),
  type: Type.String(),
  /** RL: the parsed experimental_config with every default filled in; SFT: batch size, learning rate(s), conversations. Null once the request file is gone. */
  config: Type.Union([Json, Type.Null()]),
  num_trajectory_groups: Type.Union([Type.Integer(), Type.Null()]),
  num_trajectories: Type.Union([Type.Integer(), Type.Null()]),
});
export type JobConfig = Static<typeof JobConfig>;

/** A model with its latest step and last job, as the dashboard repository answers it. */
export interface ModelSummaryRow extends ModelNames {
  created_at: string;
  latest_step: number | null;
  checkpoint_count: number;
  last_job_id: string | null;
  last_job_status: JobStatus | null;
}

/** A job with its model's names and how many optimizer steps it has finished. */
export interface JobListRow extends JobRow {
  entity_name: string;
  project: string;
  model_name: string;
  completed_steps: number;
}
