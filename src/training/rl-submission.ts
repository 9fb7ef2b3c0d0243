/**
 * An RL job request made ready to queue, by functions that need no database or engine, so that the server can run
 * them on a worker thread for a large request (http/large-body.ts): first what it names (its model and its
 * configuration), then, once that model is known, ART's defaults in place, the shape checks (sampled token ids
 * against the base's vocabulary), the check that every message can be rendered for the model (a captured
 * trajectory's exchanges must name it), and the groups as the JSON text the job's payload file holds.
 */
import { withGroupDefaults } from '../api/models.ts';
import type { RlJobBody } from '../api/training-jobs.ts';
import type { FieldProblem } from '../errors.ts';
import type { ModelIdentity } from '../trajectories/exchanges.ts';
import { checkRenderable, checkTrajectoryGroups } from '../trajectories/shape.ts';
import { rlGroupsJson } from './rl/payload.ts';

const LOC = ['body', 'trajectory_groups'];

/** What an RL request names. */
export interface RlJobTarget {
  modelId: string;
  experimentalConfig: Record<string, unknown> | null;
}

/** What the checks need of the model the request names. */
export interface RlJobContext {
  vocabSize: number | null;
  model: ModelIdentity;
}

export interface PreparedRlJob {
  /** Shape problems, or when there are none the messages the model's chat template cannot take. */
  problems: FieldProblem[];
  /** The groups with ART's defaults as JSON ('' when there are problems). */
  groupsJson: string;
}

export function rlJobTarget(body: RlJobBody): RlJobTarget {
  return { modelId: body.model_id, experimentalConfig: body.experimental_config ?? null };
}

export function prepareRlJob(body: RlJobBody, context: RlJobContext): PreparedRlJob {
  const groups = body.trajectory_groups.map(withGroupDefaults);
  const shape = checkTrajectoryGroups(groups, LOC, context.vocabSize);
  const problems = shape.length > 0 ? shape : checkRenderable(groups, LOC, context.model);
  return { problems, groupsJson: problems.length > 0 ? '' : rlGroupsJson(groups) };
}
