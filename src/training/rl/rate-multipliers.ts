/**
 * What an RL job's learning rate is multiplied by, as ART's trainers derive it from the data: the trend of the
 * model's reward spread for the whole job (`scale_learning_rate_by_reward_std_dev`, ART's LocalBackend, the last
 * trainer that read the flag: 0.5.0–0.5.7), and the number of sequences each step trains on
 * (`num_trajectories_learning_rate_multiplier_power`, ART's unsloth trainer). Pure functions; the rate itself and
 * its rule are ../learning-rate.ts's.
 */

import type { SpreadPoint } from '../../services/trajectory-service.ts';
import type { PackedRow } from './data.ts';

const mean = (values: number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;

/**
 * The least-squares line through the history (points of one step averaged first) predicts the spread at the
 * last step; the multiplier is that prediction over the line's intercept. 1 with fewer than two steps or an
 * intercept ≤ 0, as in ART; floored at 0, where ART would step against the gradient.
 */
export function rewardStdDevMultiplier(history: SpreadPoint[]): number {
  const bySteps = new Map<number, number[]>();
  for (const point of history) bySteps.set(point.step, [...(bySteps.get(point.step) ?? []), point.value]);
  const points = [...bySteps].map(([step, values]) => ({ x: step, y: mean(values) })).sort((a, b) => a.x - b.x);
  if (points.length < 2) return 1;
  const xMean = mean(points.map((p) => p.x));
  const yMean = mean(points.map((p) => p.y));
  const slope =
    points.reduce((sum, p) => sum + (p.x - xMean) * (p.y - yMean), 0) /
    points.reduce((sum, p) => sum + (p.x - xMean) ** 2, 0);
  const intercept = yMean - slope * xMean;
  if (!(intercept > 0)) return 1;
  return Math.max(0, (slope * points[points.length - 1].x + intercept) / intercept);
}

/** (Sequences packed in the row)^power, a step's own multiplier: ART counts a row's completions, here its segments. */
export function rowSizeMultiplier(row: Pick<PackedRow, 'segment_ids'>, power: number): number {
  return power ? new Set(row.segment_ids).size ** power : 1;
}
