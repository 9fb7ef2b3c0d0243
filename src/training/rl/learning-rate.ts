/**
 * The learning rate each RL train step applies, derived from the job's rate as ART's trainers derive it:
 * `num_trajectories_learning_rate_multiplier_power` scales it by the number of sequences a step trains on
 * (ART's unsloth trainer), `scale_learning_rate_by_reward_std_dev` by the trend of the model's reward spread
 * (ART's LocalBackend, the last trainer that read the flag: 0.5.0–0.5.7). Pure functions.
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

/** The rate × (sequences packed in the row)^power: ART counts a row's completions, here its segments. */
export function rowLearningRate(rate: number, row: Pick<PackedRow, 'segment_ids'>, power: number): number {
  if (!power) return rate;
  return rate * new Set(row.segment_ids).size ** power;
}
