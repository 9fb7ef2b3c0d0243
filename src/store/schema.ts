/**
 * Row types of every table, as Kysely sees them. JSON columns are text (parsed by the repositories)
 * and timestamps are ISO-8601 text, so one schema serves SQLite and PostgreSQL alike.
 */
import type { Generated } from 'kysely';

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

export interface ModelTable {
  id: string;
  entity_id: string;
  project: string;
  name: string;
  base_model: string;
  run_id: string;
  /** Highest step ever written; steps are never reused, even after their checkpoints are deleted. */
  last_step: number;
  created_at: string;
  /** The retention policy as JSON; null (or absent on insert) follows the server default. */
  retention?: string | null;
}

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

/** `tokens`: JSON of TrainedTokenArrays (see trained-token-repository.ts). */
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

export type JobStatus = 'QUEUED' | 'RUNNING' | 'COMPLETED' | 'FAILED' | 'CANCELLED';

export interface TrainingJobTable {
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
  metrics: string;
  error_code: string | null;
  error_message: string | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
}

export interface TrainingJobEventTable {
  id: string;
  job_id: string;
  type: string;
  data: string;
  created_at: string;
}

export interface ArtifactVersionTable {
  id: string;
  entity_id: string;
  project: string;
  name: string;
  version: number;
  /** JSON: [{name, size, sha256}] */
  files: string;
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

/** A checkpoint name a Tinker client chose ↔ the step it is; `state_path` holds `save_weights`' optimizer state. */
export interface TinkerCheckpointTable {
  model_id: string;
  kind: 'sampler' | 'training';
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
}
