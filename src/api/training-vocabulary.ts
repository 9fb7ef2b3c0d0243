/**
 * The words a training job is told in, each declared once: its statuses, its events (each type with the shape of
 * its data), and the metrics its steps and checkpoints report (each with its label and the chart it is drawn on).
 * The queue, the runners, the CLI and the dashboard (web/src) all read these; the file imports nothing, so the
 * dashboard's bundle takes it as it is.
 */

export const JOB_STATUSES = ['QUEUED', 'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED'] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];
/** Statuses a job never leaves. */
export const TERMINAL_JOB_STATUSES = ['COMPLETED', 'FAILED', 'CANCELLED'] as const satisfies readonly JobStatus[];
/** Statuses of a job that is still to run or running. */
export const ACTIVE_JOB_STATUSES = ['QUEUED', 'RUNNING'] as const satisfies readonly JobStatus[];
export const isActiveJobStatus = (status: string): boolean =>
  (ACTIVE_JOB_STATUSES as readonly string[]).includes(status);

/** Every event a job records, with its data. A job's events end with exactly one `training_ended` or `training_failed`. */
export interface JobEventData {
  /** The job's rows are packed (RL) or its batches counted (SFT): this many gradient steps follow. */
  training_started: { num_sequences: number };
  /** Trained tokens without a sampler logprob (ratio 1, not importance-weighted), by location in the request. */
  sampler_logprobs_missing: { trajectories: string[]; frac_sampler_logprobs: number };
  /** One optimizer step: its number (from 1) and its metrics, named as in TRAINING_METRICS where known. */
  gradient_step: { step: number } & Record<string, number>;
  /** Retention deleted these checkpoints once the job's own was written. */
  checkpoints_deleted: { steps: number[]; reason: 'retention'; after_step: number };
  /** The job's checkpoint is written and servable. */
  training_ended: { step: number; checkpoint_id: string };
  /** The job failed or was cancelled; no checkpoint was written. */
  training_failed: { error_message: string };
}
export type JobEventType = keyof JobEventData;
/** One event, its type telling its data's shape. */
export type JobEvent = { [T in JobEventType]: { type: T; data: JobEventData[T] } }[JobEventType];

/** Where the dashboard shows a metric without being asked. */
export type MetricPlace =
  /** Model page: charts sort these first, in table order (others follow by name). */
  | 'chart_order'
  /** Model page: charted when the page opens. */
  | 'default_chart'
  /** Job page: charted over the job's gradient steps. */
  | 'job_chart'
  /** Job page: a card with the latest step's value. */
  | 'job_card'
  /** Job page: in the event log's one-line summary of a `gradient_step`. */
  | 'event_line'
  /** Model page: a column of the checkpoints table. */
  | 'checkpoint_column'
  /** Model page: its `val/` split (logged by ART's evaluation) as a column beside it. */
  | 'checkpoint_val_column';

export interface TrainingMetric {
  label: string;
  /** The chart it is drawn on: the family's first metric (loss, policy_loss and sft_loss share one chart). */
  family: string;
  places: readonly MetricPlace[];
}

/** The metrics the engine, the runners and ART's logs report that the dashboard knows by name, in display order. */
export const TRAINING_METRICS: Record<string, TrainingMetric> = {
  reward: {
    label: 'Reward',
    family: 'reward',
    places: ['chart_order', 'default_chart', 'job_card', 'event_line', 'checkpoint_column', 'checkpoint_val_column'],
  },
  loss: {
    label: 'Loss',
    family: 'loss',
    places: ['chart_order', 'default_chart', 'job_chart', 'job_card', 'event_line', 'checkpoint_column'],
  },
  policy_loss: { label: 'Policy loss', family: 'loss', places: ['chart_order', 'job_card'] },
  sft_loss: { label: 'SFT loss', family: 'loss', places: ['chart_order', 'job_chart', 'job_card', 'event_line'] },
  grad_norm: {
    label: 'Grad norm',
    family: 'grad_norm',
    places: ['chart_order', 'default_chart', 'job_chart', 'job_card', 'event_line', 'checkpoint_column'],
  },
  entropy: {
    label: 'Entropy',
    family: 'entropy',
    places: ['chart_order', 'default_chart', 'job_chart', 'job_card', 'checkpoint_column'],
  },
  tokens_per_second: {
    label: 'Tokens / s',
    family: 'tokens_per_second',
    places: ['chart_order', 'default_chart', 'job_chart', 'job_card', 'checkpoint_column'],
  },
  learning_rate: { label: 'Learning rate', family: 'learning_rate', places: ['chart_order', 'job_card'] },
  num_trainable_tokens: {
    label: 'Trainable tokens',
    family: 'num_trainable_tokens',
    places: ['chart_order', 'job_card'],
  },
  exception_rate: { label: 'Exception rate', family: 'exception_rate', places: ['chart_order'] },
  num_trajectories: { label: 'Trajectories', family: 'num_trajectories', places: ['chart_order'] },
  num_groups_submitted: { label: 'Groups submitted', family: 'num_groups_submitted', places: [] },
  num_groups_trainable: { label: 'Groups trainable', family: 'num_groups_trainable', places: [] },
  num_gradient_steps: { label: 'Gradient steps', family: 'num_gradient_steps', places: [] },
};

/** The metrics shown at `place`, in table order. */
export function metricsAt(place: MetricPlace): string[] {
  return Object.entries(TRAINING_METRICS)
    .filter(([, metric]) => metric.places.includes(place))
    .map(([name]) => name);
}
