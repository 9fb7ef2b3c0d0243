/**
 * Logged trajectories made ready to store, by functions that need no database: ART's defaults in place, the shape
 * checks, the split's metrics, and one row per trajectory as columns (each trajectory's JSON text, its indexes and
 * reward), which the server may compute on a worker thread for a large request and receive cheaply.
 */
import { type FullTrajectoryGroup, type LogBody, withGroupDefaults } from '../api/models.ts';
import type { FieldProblem } from '../errors.ts';
import { splitMetrics } from './metrics.ts';
import { checkTrajectoryGroups } from './shape.ts';

/** One row per trajectory, column by column. */
export interface TrajectoryRows {
  groupIndex: Int32Array;
  trajectoryIndex: Int32Array;
  reward: Float64Array;
  /** Each trajectory as given (extra keys kept), with ART's defaults in place, as JSON. */
  data: string[];
}

export function trajectoryRows(groups: FullTrajectoryGroup[]): TrajectoryRows {
  const count = groups.reduce((sum, group) => sum + group.trajectories.length, 0);
  const rows: TrajectoryRows = {
    groupIndex: new Int32Array(count),
    trajectoryIndex: new Int32Array(count),
    reward: new Float64Array(count),
    data: [],
  };
  for (const [groupIndex, group] of groups.entries()) {
    for (const [trajectoryIndex, trajectory] of group.trajectories.entries()) {
      const row = rows.data.length;
      rows.groupIndex[row] = groupIndex;
      rows.trajectoryIndex[row] = trajectoryIndex;
      rows.reward[row] = trajectory.reward;
      rows.data.push(JSON.stringify(trajectory));
    }
  }
  return rows;
}

/** A `/log` request made ready to store: its problems (none stored when there is one), or its metrics and rows. */
export interface PreparedLog {
  split: string;
  problems: FieldProblem[];
  metrics: Record<string, number>;
  rows: TrajectoryRows;
}

export function prepareLog(body: LogBody): PreparedLog {
  const groups = body.trajectory_groups.map(withGroupDefaults);
  const problems = checkTrajectoryGroups(groups, ['body', 'trajectory_groups']);
  if (problems.length > 0) return { split: body.split, problems, metrics: {}, rows: trajectoryRows([]) };
  return { split: body.split, problems, metrics: splitMetrics(body.split, groups), rows: trajectoryRows(groups) };
}
