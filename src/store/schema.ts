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

export interface Database {
  entities: EntityTable;
  memberships: MembershipTable;
  api_keys: ApiKeyTable;
  runs: RunTable;
  models: ModelTable;
  checkpoints: CheckpointTable;
  run_metrics: RunMetricTable;
  trajectories: TrajectoryTable;
  pending_file_deletions: PendingFileDeletionTable;
  schema_version: SchemaVersionTable;
}
