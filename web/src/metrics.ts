/**
 * Turns a run's metric rows into chartable series: one metric name (reward, loss, …) has one series per
 * split (`train` rows carry bare keys, `log:<split>` rows carry `<split>/<key>`), one point per step, and a
 * band from `<name>_std_dev` when the split has one.
 */
import type { MetricRow } from './api.ts';
import { SERIES_COLORS, type ChartSeries } from './chart.ts';

export const PREFERRED_METRICS = [
  'reward',
  'loss',
  'policy_loss',
  'sft_loss',
  'grad_norm',
  'entropy',
  'tokens_per_second',
  'learning_rate',
  'num_trainable_tokens',
  'exception_rate',
  'num_trajectories',
];
export const DEFAULT_METRICS = ['reward', 'loss', 'grad_norm', 'entropy', 'tokens_per_second'];

export interface MetricTable {
  /** metric name → split → step → value */
  values: Map<string, Map<string, Map<number, number>>>;
  splits: string[];
}

export function splitKey(split: string, key: string): { split: string; name: string } {
  // Rows of `log:<split>` name their keys `<split>/<name>`; a `train` row's keys are bare.
  const slash = key.indexOf('/');
  if (slash > 0) return { split: key.slice(0, slash), name: key.slice(slash + 1) };
  return { split, name: key };
}

export function metricTable(rows: MetricRow[]): MetricTable {
  const values: MetricTable['values'] = new Map();
  const splits = new Set<string>();
  const ordered = [...rows].sort((a, b) => a.step - b.step || Number(a.id) - Number(b.id));
  for (const row of ordered) {
    for (const [key, value] of Object.entries(row.metrics)) {
      if (typeof value !== 'number' || !Number.isFinite(value)) continue;
      const { split, name } = splitKey(row.split, key);
      splits.add(split);
      if (!values.has(name)) values.set(name, new Map());
      const bySplit = values.get(name)!;
      if (!bySplit.has(split)) bySplit.set(split, new Map());
      // A later row at the same step wins: one point per step.
      bySplit.get(split)!.set(row.step, value);
    }
  }
  const splitOrder = [...splits].sort((a, b) => (a === 'train' ? -1 : b === 'train' ? 1 : a === 'val' ? -1 : b === 'val' ? 1 : a.localeCompare(b)));
  return { values, splits: splitOrder };
}

/** Metric names worth a chart: everything but the std-dev companions of a charted metric. */
export function chartableMetrics(table: MetricTable): string[] {
  const names = [...table.values.keys()].filter((name) => !(name.endsWith('_std_dev') && table.values.has(name.slice(0, -'_std_dev'.length))));
  return names.sort((a, b) => {
    const ia = PREFERRED_METRICS.indexOf(a);
    const ib = PREFERRED_METRICS.indexOf(b);
    if (ia !== -1 || ib !== -1) return (ia === -1 ? 1e9 : ia) - (ib === -1 ? 1e9 : ib);
    return a.localeCompare(b);
  });
}

const SPLIT_COLORS = ['train', 'val', 'test'];

/** One colour per split on every chart: train, val and test keep theirs; other splits take the rest in order. */
export function colorOfSplit(table: MetricTable, split: string): string {
  const known = SPLIT_COLORS.indexOf(split);
  if (known !== -1) return SERIES_COLORS[known];
  const others = table.splits.filter((name) => !SPLIT_COLORS.includes(name));
  return SERIES_COLORS[(SPLIT_COLORS.length + others.indexOf(split)) % SERIES_COLORS.length];
}

export function seriesOf(table: MetricTable, name: string): ChartSeries[] {
  const bySplit = table.values.get(name);
  if (!bySplit) return [];
  const stds = table.values.get(`${name}_std_dev`);
  return table.splits
    .filter((split) => bySplit.has(split))
    .map((split) => {
      const std = stds?.get(split);
      const points = [...bySplit.get(split)!].map(([x, y]) => {
        const spread = std?.get(x);
        return spread === undefined ? { x, y } : { x, y, lo: y - spread, hi: y + spread };
      });
      return { key: split, label: split, color: colorOfSplit(table, split), points: points.sort((a, b) => a.x - b.x) };
    });
}
