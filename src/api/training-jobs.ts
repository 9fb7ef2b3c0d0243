/** Wire schemas of training jobs (RL and SFT submissions, the job record, events). */
import { Type, type Static } from '@sinclair/typebox';
import { TrajectoryGroup } from './models.ts';

export const RlJobBody = Type.Object(
  {
    model_id: Type.String({ minLength: 1 }),
    trajectory_groups: Type.Array(TrajectoryGroup),
    experimental_config: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()])),
  },
  { additionalProperties: true },
);
export type RlJobBody = Static<typeof RlJobBody>;

export const JobCreated = Type.Object({ id: Type.String() });

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

export const TrainingJobEvent = Type.Object({
  id: Type.String(),
  type: Type.String(),
  created_at: Type.String(),
  data: Type.Record(Type.String(), Type.Unknown()),
});

export const SftJobBody = Type.Object(
  {
    model_id: Type.String({ minLength: 1 }),
    training_data_url: Type.String({ minLength: 1 }),
    config: Type.Optional(
      Type.Union([
        Type.Object(
          {
            batch_size: Type.Optional(Type.Union([Type.Integer({ minimum: 1, maximum: 4096 }), Type.Literal('auto'), Type.Null()])),
            // A per-batch schedule may reach 0: ART's linear decay (train_sft_from_file) ends every schedule on 0.
            learning_rate: Type.Optional(Type.Union([Type.Number({ exclusiveMinimum: 0 }), Type.Array(Type.Number({ minimum: 0 }), { minItems: 1 }), Type.Null()])),
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
