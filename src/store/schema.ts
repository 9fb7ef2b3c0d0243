/**
 * Row types of every table, as Kysely sees them. JSON columns are text (parsed by the repositories)
 * and timestamps are ISO-8601 text, so one schema serves SQLite and PostgreSQL alike.
 */
import type { Generated } from 'kysely';
import type { ModelRow } from '../api/models.ts';
import type { JobRow } from '../api/training-jobs.ts';
import type { JobEventType } from '../api/training-vocabulary.ts';

export interface EntityTable {
  id: string;
  name: string;
  kind: 'user' | 'team';
  created_at: string;
}

export interface MembershipTable {
  team_id: string;
  member_id: string;
  created_at: string;
}

export interface ApiKeyTable {
  id: string;
  entity_id: string;
  key_hash: string;
  key_prefix: string;
  created_at: string;
  revoked_at: string | null;
}

export interface RunTable {
  id: string;
  model_id: string;
  created_at: string;
}

/** A model's row: the record callers see (api/models.ts), less its owner's name, with the retention policy as JSON
 * text (null, or absent on insert, follows the server default). */
export type ModelTable = Omit<ModelRow, 'entity_name' | 'retention'> & { retention?: string | null };

export interface CheckpointTable {
  id: string;
  model_id: string;
  step: number;
  metrics: string;
  adapter_path: string | null;
  created_at: string;
}

export interface RunMetricTable {
  id: Generated<number>;
  run_id: string;
  step: number;
  source: string;
  metrics: string;
  created_at: string;
  /** The W&B history line a row came from (migration 010), which it is stored once for; null for other rows. */
  dedupe_key: string | null;
}

export interface TrajectoryTable {
  id: string;
  model_id: string;
  split: string;
  step: number;
  group_index: number;
  trajectory_index: number;
  reward: number | null;
  data: string;
  created_at: string;
}

/** `tokens`: JSON of the trained token arrays without the advantage (see trained-token-repository.ts). */
export interface TrainedTokenTable {
  model_id: string;
  step: number;
  group_index: number;
  trajectory_index: number;
  advantage: number;
  tokens: string;
}

/** Files whose removal was decided in a committed transaction but may not have happened yet (crash safety). */
export interface PendingFileDeletionTable {
  id: Generated<number>;
  path: string;
  created_at: string;
}

export interface SchemaVersionTable {
  version: number;
  applied_at: string;
}

/** A job's row: the record callers see (api/training-jobs.ts) with its metrics as JSON text. */
export type TrainingJobTable = Omit<JobRow, 'metrics'> & { metrics: string };

export interface TrainingJobEventTable {
  id: string;
  job_id: string;
  type: JobEventType;
  data: string;
  created_at: string;
}

export interface ArtifactVersionTable {
  id: string;
  entity_id: string;
  project: string;
  name: string;
  version: number;
  /** JSON: [{name, size, sha256, md5?}] */
  files: string;
  /** W&B artifact type and metadata (JSON text); null for versions uploaded through /v1/preview/artifacts. */
  type: string | null;
  metadata: string | null;
  created_at: string;
}

export interface TinkerSessionTable {
  id: string;
  entity_id: string;
  sdk_version: string;
  created_at: string;
  heartbeat_at: string;
}

/** A Tinker training client's model id (`<session>:train:<n>`) ↔ one of our models. */
export interface TinkerModelTable {
  id: string;
  model_id: string;
  session_id: string;
  lora_rank: number;
  seed: number;
  created_at: string;
}

export interface TinkerSamplingSessionTable {
  id: string;
  entity_id: string;
  base_model: string;
  /** The `tinker://` path sampled from; null: the base model. */
  model_path: string | null;
  created_at: string;
}

/**
 * A checkpoint name a Tinker client chose ↔ the step it is; `state_path` holds `save_weights`' optimizer state. An
 * `external` name is an export (`save_weights_external`): the step's adapter in Hugging Face PEFT's layout.
 */
export interface TinkerCheckpointTable {
  model_id: string;
  kind: 'sampler' | 'training' | 'external';
  name: string;
  step: number;
  state_path: string | null;
  created_at: string;
}

export interface TinkerFutureTable {
  id: string;
  entity_id: string;
  model_id: string | null;
  kind: string;
  status: 'pending' | 'complete' | 'failed';
  /** The result as JSON. */
  result: string | null;
  error: string | null;
  /** The SDK's RequestErrorCategory of a failure: `user`, `server` or `unknown`. */
  category: string | null;
  created_at: string;
  finished_at: string | null;
  /** `<scope>#<seq_id>` of a request the SDK numbers (its re-sends share it); null for the others. */
  request_key: string | null;
  /** The request's content, so a different request reusing a sequence number is refused, not answered. */
  request_hash: string | null;
}

/** A sequence a Tinker sample returned, recorded for StableReinforce (migration 010); arrays as JSON. */
export interface TinkerSampledSequenceTable {
  id: string;
  entity_id: string;
  prompt: string;
  tokens: string;
  logprobs: string;
  /** When it was sampled or last named by a training request: a sequence unused for a day is swept. */
  used_at: string;
}

/** A secret every server process on this database shares (e.g. the key signing download URLs). */
export interface ServerSecretTable {
  name: string;
  value: string;
  created_at: string;
}

/** A stored Responses API response: the object answered and the conversation it ends, both JSON text. */
export interface StoredResponseTable {
  id: string;
  entity_id: string;
  response: string;
  conversation: string;
  created_at: string;
}

export interface Database {
  entities: EntityTable;
  memberships: MembershipTable;
  api_keys: ApiKeyTable;
  runs: RunTable;
  models: ModelTable;
  checkpoints: CheckpointTable;
  run_metrics: RunMetricTable;
  trajectories: TrajectoryTable;
  trained_tokens: TrainedTokenTable;
  pending_file_deletions: PendingFileDeletionTable;
  schema_version: SchemaVersionTable;
  training_jobs: TrainingJobTable;
  training_job_events: TrainingJobEventTable;
  artifact_versions: ArtifactVersionTable;
  tinker_sessions: TinkerSessionTable;
  tinker_models: TinkerModelTable;
  tinker_sampling_sessions: TinkerSamplingSessionTable;
  tinker_checkpoints: TinkerCheckpointTable;
  tinker_futures: TinkerFutureTable;
  tinker_sampled_sequences: TinkerSampledSequenceTable;
  server_secrets: ServerSecretTable;
  stored_responses: StoredResponseTable;
}
