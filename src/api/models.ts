/** Wire schemas of models, checkpoints and trajectory logging; they produce the TypeScript types. */
import { Type, type Static } from '@sinclair/typebox';

/** Names of projects, models and log splits: safe as path segments and in `entity/project/name` strings. */
export const NAME_PATTERN = '^[A-Za-z0-9._-]{1,128}$';
export const SPLIT_PATTERN = '^[A-Za-z0-9_-]{1,64}$';

export const ModelCreateBody = Type.Object(
  {
    project: Type.String({ pattern: NAME_PATTERN }),
    name: Type.String({ pattern: NAME_PATTERN }),
    base_model: Type.String({ minLength: 1 }),
    entity: Type.Optional(Type.Union([Type.String({ minLength: 1 }), Type.Null()])),
    return_existing: Type.Optional(Type.Boolean({ default: false })),
  },
  { additionalProperties: true },
);
export type ModelCreateBody = Static<typeof ModelCreateBody>;

export const ModelResponse = Type.Object({
  id: Type.String(),
  entity: Type.String(),
  project: Type.String(),
  name: Type.String(),
  base_model: Type.String(),
  run_id: Type.String(),
});
export type ModelResponse = Static<typeof ModelResponse>;

export function toModelResponse(row: ModelRow): ModelResponse {
  return { id: row.id, entity: row.entity_name, project: row.project, name: row.name, base_model: row.base_model, run_id: row.run_id };
}

export const ModelDeleteResponse = Type.Object({
  model_id: Type.String(),
  deleted_checkpoints: Type.Integer(),
  deleted_run: Type.Boolean(),
});

export const Checkpoint = Type.Object({
  id: Type.String(),
  step: Type.Integer(),
  metrics: Type.Record(Type.String(), Type.Unknown()),
  created_at: Type.String(),
});
export type Checkpoint = Static<typeof Checkpoint>;

export function toCheckpointResponse(checkpoint: CheckpointRecord): Checkpoint {
  return { id: checkpoint.id, step: checkpoint.step, metrics: checkpoint.metrics, created_at: checkpoint.createdAt };
}

export const CheckpointDeleteBody = Type.Object(
  { steps: Type.Array(Type.Integer({ minimum: 0 }), { maxItems: 100000 }) },
  { additionalProperties: true },
);
export type CheckpointDeleteBody = Static<typeof CheckpointDeleteBody>;

export const CheckpointDeleteResponse = Type.Object({
  deleted_count: Type.Integer(),
  not_found_steps: Type.Array(Type.Integer()),
});
export type CheckpointDeleteResponse = Static<typeof CheckpointDeleteResponse>;

const ToolDefinition = Type.Object(
  {
    type: Type.String(),
    function: Type.Object(
      {
        name: Type.String(),
        description: Type.Optional(Type.Union([Type.String(), Type.Null()])),
        parameters: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()])),
        strict: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
      },
      { additionalProperties: true },
    ),
  },
  { additionalProperties: true },
);

/** A chat message (has `role`) or a serialized OpenAI `Choice` (has `message`); which one is checked in the service. */
const MessageOrChoice = Type.Record(Type.String(), Type.Unknown());

const History = Type.Object(
  {
    messages_and_choices: Type.Array(MessageOrChoice),
    tools: Type.Optional(Type.Union([Type.Array(ToolDefinition), Type.Null()])),
  },
  { additionalProperties: true },
);

export const Trajectory = Type.Object(
  {
    messages_and_choices: Type.Array(MessageOrChoice),
    tools: Type.Optional(Type.Union([Type.Array(ToolDefinition), Type.Null()])),
    additional_histories: Type.Optional(Type.Union([Type.Array(History), Type.Null()])),
    reward: Type.Number(),
    initial_policy_version: Type.Optional(Type.Union([Type.Integer(), Type.Null()])),
    final_policy_version: Type.Optional(Type.Union([Type.Integer(), Type.Null()])),
    metrics: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()])),
    metadata: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()])),
    logs: Type.Optional(Type.Union([Type.Array(Type.Unknown()), Type.Null()])),
    start_time: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    /** The kwargs the client sent with its chat requests (e.g. enable_thinking): the training render uses them too. */
    chat_template_kwargs: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()])),
  },
  { additionalProperties: true },
);
export type Trajectory = Static<typeof Trajectory>;

export const TrajectoryGroup = Type.Object(
  {
    trajectories: Type.Array(Trajectory),
    exceptions: Type.Optional(Type.Union([Type.Array(Type.Unknown()), Type.Null()])),
    metadata: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()])),
    metrics: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()])),
    logs: Type.Optional(Type.Union([Type.Array(Type.Unknown()), Type.Null()])),
  },
  { additionalProperties: true },
);
export type TrajectoryGroup = Static<typeof TrajectoryGroup>;

export const LogBody = Type.Object(
  {
    split: Type.String({ pattern: SPLIT_PATTERN }),
    trajectory_groups: Type.Array(TrajectoryGroup),
  },
  { additionalProperties: true },
);
export type LogBody = Static<typeof LogBody>;

export const LogResponse = Type.Object({
  step: Type.Integer(),
  metrics: Type.Record(Type.String(), Type.Number()),
});

/** A checkpoint's PEFT adapter as a tar archive (`GET …/checkpoints/{step}/adapter`). */
export const AdapterArchive = {
  description: 'A tar archive holding adapter_config.json (base_model_name_or_path: the public base model id) and adapter_model.safetensors',
  content: { 'application/x-tar': { schema: { type: 'string', format: 'binary' } } },
};

/** POST /v1/preview/models/{id}/fork: a new model of the same entity and base, starting from one checkpoint. */
export const ModelForkBody = Type.Object(
  {
    name: Type.String({ pattern: NAME_PATTERN }),
    /** Defaults to the parent's project. */
    project: Type.Optional(Type.String({ pattern: NAME_PATTERN })),
    /** Defaults to the parent's latest checkpoint. */
    step: Type.Optional(Type.Integer({ minimum: 0 })),
  },
  { additionalProperties: false },
);
export type ModelForkBody = Static<typeof ModelForkBody>;

/** POST /v1/preview/models/import?project=…&name=…&base_model=…: the body is the adapter tar itself. */
export const ModelImportQuery = Type.Object(
  {
    project: Type.String({ pattern: NAME_PATTERN }),
    name: Type.String({ pattern: NAME_PATTERN }),
    base_model: Type.String({ minLength: 1 }),
    entity: Type.Optional(Type.String({ minLength: 1 })),
  },
  { additionalProperties: false },
);
export type ModelImportQuery = Static<typeof ModelImportQuery>;

const RetentionFields = {
  keep_last: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], { description: 'Keep this many most recent checkpoints; null: no limit' }),
  keep_best: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], { description: 'Keep this many best checkpoints by best_metric; null: none for being best' }),
  best_metric: Type.Union([Type.String({ minLength: 1 }), Type.Null()]),
  best_mode: Type.Union([Type.Literal('max'), Type.Literal('min')]),
};

/** Which checkpoints a model keeps: its own policy (stored with the model) or the server default. */
export const RetentionPolicy = Type.Object(RetentionFields);
export type RetentionPolicy = Static<typeof RetentionPolicy>;

/** PUT /v1/preview/models/{id}/retention: fields left out keep everything on that axis (best_mode: max). */
export const RetentionBody = Type.Partial(Type.Object(RetentionFields, { additionalProperties: false }));
export type RetentionBody = Static<typeof RetentionBody>;

export const RetentionResponse = Type.Object({
  policy: RetentionPolicy,
  /** Whether the policy is the model's own or the server default. */
  source: Type.Union([Type.Literal('model'), Type.Literal('server')]),
  deleted_steps: Type.Optional(Type.Array(Type.Integer())),
});

/** A model as the repository answers it: its step a number (PostgreSQL answers bigints as text), its retention policy parsed. */
export interface ModelRow {
  id: string;
  entity_id: string;
  entity_name: string;
  project: string;
  name: string;
  base_model: string;
  run_id: string;
  /** Highest step ever written; steps are never reused, even after their checkpoints are deleted. */
  last_step: number;
  created_at: string;
  /** Null follows the server default. */
  retention: RetentionPolicy | null;
}

/** A checkpoint as the repository answers it (metrics parsed). */
export interface CheckpointRecord {
  id: string;
  modelId: string;
  step: number;
  metrics: Record<string, unknown>;
  adapterPath: string | null;
  createdAt: string;
}
