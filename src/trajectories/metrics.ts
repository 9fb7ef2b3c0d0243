/**
 * Per-split aggregates of logged trajectories, named as ART names them:
 * `{split}/reward`, `{split}/reward_std_dev`, `{split}/exception_rate`, `{split}/num_trajectories`,
 * `{split}/{metric}` for every numeric trajectory metric and `{split}/group_{metric}` for group metrics.
 */
import type { FullTrajectoryGroup } from '../api/models.ts';

function mean(values: number[]): number {
  return values.reduce((sum, value) => sum + value, 0) / values.length;
}

export function populationStd(values: number[]): number {
  const mu = mean(values);
  return Math.sqrt(mean(values.map((value) => (value - mu) ** 2)));
}

function numericEntries(record: Record<string, unknown> | null | undefined): [string, number][] {
  return Object.entries(record ?? {}).flatMap(([key, value]): [string, number][] => {
    if (typeof value === 'number' && Number.isFinite(value)) return [[key, value]];
    if (typeof value === 'boolean') return [[key, value ? 1 : 0]];
    return [];
  });
}

function averageByKey(records: (Record<string, unknown> | null | undefined)[]): Map<string, number> {
  const samples = new Map<string, number[]>();
  for (const record of records) {
    for (const [key, value] of numericEntries(record)) {
      const values = samples.get(key);
      if (values) values.push(value);
      else samples.set(key, [value]);
    }
  }
  return new Map([...samples].map(([key, values]) => [key, mean(values)]));
}

export function splitMetrics(split: string, groups: FullTrajectoryGroup[]): Record<string, number> {
  const trajectories = groups.flatMap((group) => group.trajectories);
  const exceptions = groups.reduce((count, group) => count + group.exceptions.length, 0);
  const metrics: Record<string, number> = {};
  for (const [key, value] of averageByKey(trajectories.map((t) => t.metrics))) metrics[`${split}/${key}`] = value;
  for (const [key, value] of averageByKey(groups.map((g) => g.metrics))) metrics[`${split}/group_${key}`] = value;

  metrics[`${split}/num_trajectories`] = trajectories.length;
  metrics[`${split}/exception_rate`] =
    exceptions + trajectories.length > 0 ? exceptions / (exceptions + trajectories.length) : 0;
  if (trajectories.length > 0) metrics[`${split}/reward`] = mean(trajectories.map((t) => t.reward));
  const spreads = groups
    .filter((g) => g.trajectories.length > 1)
    .map((g) => populationStd(g.trajectories.map((t) => t.reward)));
  if (spreads.length > 0) metrics[`${split}/reward_std_dev`] = mean(spreads);
  return metrics;
}
