/** Wire schemas of models, checkpoints and trajectory logging; they produce the TypeScript types. */
import { type Static, Type } from '@sinclair/typebox';

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

/** The fields of a model row that its response (and the dashboard's summary of it) names. */
export type ModelNames = Pick<ModelRow, 'id' | 'entity_name' | 'project' | 'name' | 'base_model' | 'run_id'>;

export function toModelResponse(row: ModelNames): ModelResponse {
  return {
    id: row.id,
    entity: row.entity_name,
    project: row.project,
    name: row.name,
    base_model: row.base_model,
    run_id: row.run_id,
  };
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

/**
 * ART's own defaults for every trajectory and group field it may leave out (`art/trajectories`, 0.5.23): from 0.5.20 on
 * ART's JSON leaves out each field still at its default (a reward of 0.0, no tools, empty lists and maps, no policy
 * versions), and 0.5.18 and other clients may send null for a list or map. The one statement of them: the schemas
 * below declare them, and every reader reads trajectories through `withGroupDefaults` / `withTrajectoryDefaults`.
 * Not among them: `messages_and_choices` and `exchanges` (ART's defaults, none, leave nothing to train or log, so a
 * trajectory carries one of them: see `Trajectory`) and a training group's `trajectories`.
 */
export const TRAJECTORY_DEFAULTS = {
  tools: null,
  additional_histories: [],
  reward: 0,
  initial_policy_version: null,
  final_policy_version: null,
  metrics: {},
  metadata: {},
  logs: [],
} as const;
export const TRAJECTORY_GROUP_DEFAULTS = {
  trajectories: [],
  exceptions: [],
  metadata: {},
  metrics: {},
  logs: [],
} as const;

/** Optional fields that read as their default when left out: a map, a list, a tool list, a policy version (each may be null). */
const mapOr = (fallback: object) =>
  Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()], { default: fallback }));
const listOr = (fallback: readonly unknown[]) =>
  Type.Optional(Type.Union([Type.Array(Type.Unknown()), Type.Null()], { default: fallback }));
const toolsOr = (fallback: null) =>
  Type.Optional(Type.Union([Type.Array(ToolDefinition), Type.Null()], { default: fallback }));
const versionOr = (fallback: null) => Type.Optional(Type.Union([Type.Integer(), Type.Null()], { default: fallback }));

/** One of a trajectory's `additional_histories`: left without tools, it is rendered with its trajectory's. */
const History = Type.Object(
  {
    messages_and_choices: Type.Array(MessageOrChoice),
    tools: Type.Optional(Type.Union([Type.Array(ToolDefinition), Type.Null()])),
  },
  { additionalProperties: true },
);
type History = Static<typeof History>;

/**
 * One HTTP exchange ART 0.5.20+ captured inside `with art.Trajectory()`: the request body as the client sent it and
 * the response as it came back (a stream already assembled by ART). What each kind's request and response must hold
 * is checked by trajectories/exchanges.ts, which names the field of a malformed one.
 */
const CapturedExchange = Type.Object(
  {
    request: Type.Record(Type.String(), Type.Unknown()),
    response: Type.Record(Type.String(), Type.Unknown()),
    start_time: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    end_time: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    /** ART's computed field: the request's `model`, else the response's. */
    model: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  },
  { additionalProperties: true },
);

/** ART's `TrajectoryExchanges`: the exchanges of each API a trajectory's clients called, each in call order. */
export const TrajectoryExchanges = Type.Object(
  {
    chat_completions: Type.Optional(Type.Union([Type.Array(CapturedExchange), Type.Null()])),
    completions: Type.Optional(Type.Union([Type.Array(CapturedExchange), Type.Null()])),
    responses: Type.Optional(Type.Union([Type.Array(CapturedExchange), Type.Null()])),
    messages: Type.Optional(Type.Union([Type.Array(CapturedExchange), Type.Null()])),
  },
  // A kind this server cannot read is refused by name rather than dropped.
  { additionalProperties: false },
);
export type TrajectoryExchanges = Static<typeof TrajectoryExchanges>;
export type CapturedExchange = Static<typeof CapturedExchange>;

/**
 * A trajectory in one of ART's two forms (`art/trajectories`, 0.5.20+): legacy (`messages_and_choices`, `tools`,
 * `additional_histories`) or captured (`exchanges`). The schema asks for `messages_and_choices` (non-empty) whenever
 * `exchanges` is absent, so a body of empty objects fails at its first item (validation.ts); a trajectory carrying
 * both forms is refused by trajectories/shape.ts, as ART's own model validator refuses it.
 */
export const Trajectory = Type.Object(
  {
    messages_and_choices: Type.Optional(Type.Array(MessageOrChoice, { minItems: 1 })),
    exchanges: Type.Optional(TrajectoryExchanges),
    tools: toolsOr(TRAJECTORY_DEFAULTS.tools),
    additional_histories: Type.Optional(
      Type.Union([Type.Array(History), Type.Null()], { default: TRAJECTORY_DEFAULTS.additional_histories }),
    ),
    reward: Type.Optional(Type.Number({ default: TRAJECTORY_DEFAULTS.reward })),
    initial_policy_version: versionOr(TRAJECTORY_DEFAULTS.initial_policy_version),
    final_policy_version: versionOr(TRAJECTORY_DEFAULTS.final_policy_version),
    metrics: mapOr(TRAJECTORY_DEFAULTS.metrics),
    metadata: mapOr(TRAJECTORY_DEFAULTS.metadata),
    logs: listOr(TRAJECTORY_DEFAULTS.logs),
    start_time: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    /** The kwargs the client sent with its chat requests (e.g. enable_thinking): the training render uses them too. */
    chat_template_kwargs: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()])),
  },
  {
    additionalProperties: true,
    if: { not: { required: ['exchanges'] } },
    // biome-ignore lint/suspicious/noThenProperty: JSON Schema's conditional keyword, not a thenable.
    then: { required: ['messages_and_choices'] },
  },
);
export type Trajectory = Static<typeof Trajectory>;
/** A trajectory in the legacy form, as the chat-completions clients of this repository's tests and benches build it. */
export type LegacyTrajectory = Trajectory & { messages_and_choices: Record<string, unknown>[] };

const GroupFields = {
  exceptions: listOr(TRAJECTORY_GROUP_DEFAULTS.exceptions),
  metadata: mapOr(TRAJECTORY_GROUP_DEFAULTS.metadata),
  metrics: mapOr(TRAJECTORY_GROUP_DEFAULTS.metrics),
  logs: listOr(TRAJECTORY_GROUP_DEFAULTS.logs),
};

/**
 * A logged group: ART leaves out the (empty) trajectories of a group whose every rollout failed, so a group holds
 * trajectories or exceptions. (The branches cannot be met by the schema's own defaults: both ask for an item.)
 */
export const TrajectoryGroup = Type.Object(
  { trajectories: Type.Optional(Type.Array(Trajectory)), ...GroupFields },
  {
    additionalProperties: true,
    anyOf: [
      { required: ['trajectories'], properties: { trajectories: { type: 'array', minItems: 1 } } },
      { required: ['exceptions'], properties: { exceptions: { type: 'array', minItems: 1 } } },
    ],
  },
);
export type TrajectoryGroup = Static<typeof TrajectoryGroup>;

/** A group to train on: at least one trajectory. */
export const TrainingGroup = Type.Object(
  { trajectories: Type.Array(Trajectory, { minItems: 1 }), ...GroupFields },
  { additionalProperties: true },
);

/** A trajectory as every reader sees it: each field ART may leave out (or null) in place, with ART's default. */
export type FullTrajectory = Trajectory & {
  tools: Static<typeof ToolDefinition>[] | null;
  additional_histories: History[];
  reward: number;
  initial_policy_version: number | null;
  final_policy_version: number | null;
  metrics: Record<string, unknown>;
  metadata: Record<string, unknown>;
  logs: unknown[];
};
export type FullTrajectoryGroup = Omit<TrajectoryGroup, 'trajectories'> & {
  trajectories: FullTrajectory[];
  exceptions: unknown[];
  metadata: Record<string, unknown>;
  metrics: Record<string, unknown>;
  logs: unknown[];
};

/** `value` with every field of `defaults` that is absent or null set to its default (a fresh one: the defaults are empty). */
function withDefaults(value: object, defaults: object): Record<string, unknown> {
  const filled: Record<string, unknown> = { ...value };
  for (const [key, fallback] of Object.entries(defaults)) {
    filled[key] ??= Array.isArray(fallback) ? [] : fallback !== null && typeof fallback === 'object' ? {} : fallback;
  }
  return filled;
}

/** A trajectory as sent or stored, complete: what every reader of trajectories reads them through. */
export function withTrajectoryDefaults(trajectory: Trajectory): FullTrajectory {
  return withDefaults(trajectory, TRAJECTORY_DEFAULTS) as FullTrajectory;
}

export function withGroupDefaults(group: TrajectoryGroup): FullTrajectoryGroup {
  const filled = withDefaults(group, TRAJECTORY_GROUP_DEFAULTS);
  return {
    ...filled,
    trajectories: (filled.trajectories as Trajectory[]).map(withTrajectoryDefaults),
  } as FullTrajectoryGroup;
}

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
  description:
    'A tar archive holding adapter_config.json (base_model_name_or_path: the public base model id) and adapter_model.safetensors',
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
  keep_last: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], {
    description: 'Keep this many most recent checkpoints; null: no limit',
  }),
  keep_best: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], {
    description: 'Keep this many best checkpoints by best_metric; null: none for being best',
  }),
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
