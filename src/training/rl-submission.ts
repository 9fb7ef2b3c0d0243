/**
 * An RL job request made ready to queue, by a function that needs no database or engine, so that the server can
 * run it on a worker thread for a large request (http/large-body.ts): ART's defaults in place, the shape checks
 * (token ids against the base model's vocabulary when its size is given), the check that every message can be
 * rendered, and the groups as the JSON text the job's payload file holds. The largest sampled token id comes back
 * too, so that a request prepared before its model's vocabulary was known is checked again only when it must be.
 */
import { withGroupDefaults } from '../api/models.ts';
import type { RlJobBody } from '../api/training-jobs.ts';
import type { FieldProblem } from '../errors.ts';
import { largestSampledTokenId } from '../services/trajectory-items.ts';
import { checkRenderable, checkTrajectoryGroups } from '../services/trajectory-shape.ts';
import { rlGroupsJson } from './rl/payload.ts';

const LOC = ['body', 'trajectory_groups'];

export interface PreparedRlJob {
  modelId: string;
  experimentalConfig: Record<string, unknown> | null;
  /** Shape problems, or when there are none the messages no chat template can take. */
  problems: FieldProblem[];
  largestTokenId: number;
  /** The groups with ART's defaults as JSON ('' when there are problems). */
  groupsJson: string;
}

export function prepareRlJob(body: RlJobBody, options: { vocabSize: number | null }): PreparedRlJob {
  const groups = body.trajectory_groups.map(withGroupDefaults);
  const shape = checkTrajectoryGroups(groups, LOC, options.vocabSize);
  const problems = shape.length > 0 ? shape : checkRenderable(groups, LOC);
  let largestTokenId = -1;
  for (const group of groups) {
    for (const trajectory of group.trajectories) {
      largestTokenId = Math.max(largestTokenId, largestSampledTokenId(trajectory.messages_and_choices));
      for (const history of trajectory.additional_histories)
        largestTokenId = Math.max(largestTokenId, largestSampledTokenId(history.messages_and_choices));
    }
  }
  return {
    modelId: body.model_id,
    experimentalConfig: body.experimental_config ?? null,
    problems,
    largestTokenId,
    groupsJson: problems.length > 0 ? '' : rlGroupsJson(groups),
  };
}
