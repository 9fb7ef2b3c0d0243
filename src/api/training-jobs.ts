/** Wire schemas of training jobs (RL and SFT submissions, the job record, events). */
import { type Static, Type } from '@sinclair/typebox';
import { TrainingGroup } from './models.ts';
import type { JobEvent, JobEventType, JobStatus } from './training-vocabulary.ts';

export const RlJobBody = Type.Object(
  {
    model_id: Type.String({ minLength: 1 }),
    trajectory_groups: Type.Array(TrainingGroup),
    experimental_config: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()])),
  },
  { additionalProperties: true },
);
export type RlJobBody = Static<typeof RlJobBody>;

export const JobCreated = Type.Object({ id: Type.String() });
export type JobCreated = Static<typeof JobCreated>;

export const TrainingJob = Type.Object({
  id: Type.String(),
  object: Type.Literal('training_job'),
  type: Type.String(),
  model_id: Type.String(),
  status: Type.String(),
  created_at: Type.String(),
  started_at: Type.Union([Type.String(), Type.Null()]),
  finished_at: Type.Union([Type.String(), Type.Null()]),
  error: Type.Union([Type.Object({ code: Type.String(), message: Type.String() }), Type.Null()]),
  checkpoint_step: Type.Union([Type.Integer(), Type.Null()]),
  num_sequences: Type.Union([Type.Integer(), Type.Null()]),
  metrics: Type.Record(Type.String(), Type.Number()),
});
export type TrainingJob = Static<typeof TrainingJob>;

export function toTrainingJob(job: JobRow): TrainingJob {
  return {
    id: job.id,
    object: 'training_job',
    type: job.type,
    model_id: job.model_id,
    status: job.status,
    created_at: job.created_at,
    started_at: job.started_at,
    finished_at: job.finished_at,
    error: job.error_code ? { code: job.error_code, message: job.error_message ?? '' } : null,
    checkpoint_step: job.checkpoint_step,
    num_sequences: job.num_sequences,
    metrics: job.metrics,
  };
}

export const TrainingJobEvent = Type.Object({
  id: Type.String(),
  type: Type.String(),
  created_at: Type.String(),
  data: Type.Record(Type.String(), Type.Unknown()),
});
export type TrainingJobEvent = Static<typeof TrainingJobEvent>;

/** An event as the events endpoint answers it, its data typed by its type (for readers: the CLI, the dashboard). */
export type TypedTrainingJobEvent = Omit<TrainingJobEvent, 'type' | 'data'> & JobEvent;

export function toTrainingJobEvent(event: EventRecord): TrainingJobEvent {
  return { id: event.id, type: event.type, created_at: event.created_at, data: event.data };
}

/**
 * ART 0.5.20+ (`SFTMetricLoggingConfig`): the server, not the client, logs the job's metrics to the run history, at
 * `target_training_step` (ART sends its latest step + 1: the checkpoint this job writes) or, left out, at the step the
 * job writes; `enabled: false` logs none. Left out altogether (older clients), the job logs at the step it writes.
 */
export const SftMetricLogging = Type.Object(
  {
    enabled: Type.Boolean(),
    target_training_step: Type.Optional(Type.Union([Type.Integer({ minimum: 1 }), Type.Null()])),
  },
  { additionalProperties: false },
);
export type SftMetricLogging = Static<typeof SftMetricLogging>;

export const SftJobBody = Type.Object(
  {
    model_id: Type.String({ minLength: 1 }),
    training_data_url: Type.String({ minLength: 1 }),
    config: Type.Optional(
      Type.Union([
        Type.Object(
          {
            batch_size: Type.Optional(
              Type.Union([Type.Integer({ minimum: 1, maximum: 4096 }), Type.Literal('auto'), Type.Null()]),
            ),
            // Held to the learning-rate rule by sft/config.ts, which names the bad entry (a schedule may decay to 0).
            learning_rate: Type.Optional(
              Type.Union([Type.Number(), Type.Array(Type.Number(), { minItems: 1 }), Type.Null()]),
            ),
            assistant_turns: Type.Optional(Type.Union([Type.Literal('all'), Type.Literal('last'), Type.Null()])),
            chat_template_kwargs: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()])),
            metric_logging: Type.Optional(Type.Union([SftMetricLogging, Type.Null()])),
          },
          { additionalProperties: true },
        ),
        Type.Null(),
      ]),
    ),
    experimental_config: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()])),
  },
  { additionalProperties: true },
);
export type SftJobBody = Static<typeof SftJobBody>;

/** A job as the repository answers it: counts as numbers, metrics parsed. */
export interface JobRow {
  id: string;
  model_id: string;
  type: 'rl' | 'sft';
  status: JobStatus;
  /** The request as submitted, in a file written and synced before the row exists. */
  payload_path: string;
  attempts: number;
  lease_owner: string | null;
  lease_expires_at: string | null;
  cancel_requested: number;
  num_sequences: number | null;
  checkpoint_step: number | null;
  metrics: Record<string, number>;
  error_code: string | null;
  error_message: string | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
}

/** A job event as the repository answers it (data parsed). */
export interface EventRecord {
  id: string;
  job_id: string;
  type: JobEventType;
  data: Record<string, unknown>;
  created_at: string;
}
