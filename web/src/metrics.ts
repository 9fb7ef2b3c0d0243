/**
 * Turns runs' metric rows into chartable series: one chart per metric family (loss with policy_loss and
 * sft_loss), one series per run and split (`train` rows carry bare keys, `log:<split>` rows carry
 * `<split>/<key>`), one point per step with its wall-clock time, and a band from `<name>_std_dev` when the
 * split has one.
 */

import { metricsAt, TRAINING_METRICS } from '../../src/api/training-vocabulary.ts';
import type { MetricRow } from './api.ts';
import { type ChartSeries, SERIES_COLORS } from './chart.ts';
import { extent } from './chart-data.ts';

export const PREFERRED_METRICS = metricsAt('chart_order');
export const DEFAULT_METRICS = metricsAt('default_chart');

export interface MetricTable {
  /** metric name → split → step → value */
  values: Map<string, Map<string, Map<number, number>>>;
  splits: string[];
  /** step → wall-clock seconds of its latest row, for the time axis. */
  times: Map<number, number>;
}

/** One run to draw: the model's name labels its lines when several are overlaid. */
export interface RunTable {
  label: string;
  table: MetricTable;
}

/** Members of a family share its chart; a member identical to one already drawn adds no line. */
const familyHead = (name: string) => TRAINING_METRICS[name]?.family ?? name;
const membersOfFamily = (family: string) => {
  const members = Object.keys(TRAINING_METRICS).filter((name) => TRAINING_METRICS[name].family === family);
  return members.length > 0 ? members : [family];
};

export function splitKey(split: string, key: string): { split: string; name: string } {
  // Rows of `log:<split>` name their keys `<split>/<name>`; a `train` row's keys are bare.
  const slash = key.indexOf('/');
  if (slash > 0) return { split: key.slice(0, slash), name: key.slice(slash + 1) };
  return { split, name: key };
}

export function metricTable(rows: MetricRow[]): MetricTable {
  const values: MetricTable['values'] = new Map();
  const splits = new Set<string>();
  const times = new Map<number, number>();
  const ordered = [...rows].sort((a, b) => a.step - b.step || Number(a.id) - Number(b.id));
  for (const row of ordered) {
    times.set(row.step, Date.parse(row.created_at) / 1000);
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
  const splitOrder = [...splits].sort((a, b) =>
    a === 'train' ? -1 : b === 'train' ? 1 : a === 'val' ? -1 : b === 'val' ? 1 : a.localeCompare(b),
  );
  return { values, splits: splitOrder, times };
}

/** Metric families worth a chart: everything but the std-dev companions of a charted metric, one name per family. */
export function chartableMetrics(tables: MetricTable[]): string[] {
  const all = new Set(tables.flatMap((table) => [...table.values.keys()]));
  const isCompanion = (name: string) => name.endsWith('_std_dev') && all.has(name.slice(0, -'_std_dev'.length));
  const names = [...new Set([...all].filter((name) => !isCompanion(name)).map(familyHead))];
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

function sameValues(a: Map<number, number>, b: Map<number, number>): boolean {
  for (const [step, value] of a) {
    const other = b.get(step);
    if (other !== undefined && Math.abs(other - value) > 1e-6 * Math.max(1, Math.abs(value))) return false;
  }
  return true;
}

/** The family's members with values in this table, dropping one that repeats a member already kept. */
function membersOf(table: MetricTable, family: string): string[] {
  const kept: string[] = [];
  for (const name of membersOfFamily(family)) {
    const bySplit = table.values.get(name);
    if (!bySplit) continue;
    const repeats = kept.some((other) =>
      [...bySplit].every(([split, steps]) => {
        const mine = table.values.get(other)!.get(split);
        return mine !== undefined && sameValues(steps, mine);
      }),
    );
    if (!repeats) kept.push(name);
  }
  return kept;
}

/**
 * The lines of one family's chart. A single run colours by split; overlaid runs colour by run and dash
 * every split but train. Series keys are `<run index>:<split>:<metric>`.
 */
export function seriesOf(runs: RunTable[], family: string): ChartSeries[] {
  const overlaid = runs.length > 1;
  return runs.flatMap(({ label, table }, run) => {
    const members = membersOf(table, family);
    return members.flatMap((name, member) => {
      const bySplit = table.values.get(name)!;
      const stds = table.values.get(`${name}_std_dev`);
      return table.splits
        .filter((split) => bySplit.has(split))
        .map((split) => {
          const std = stds?.get(split);
          const points = [...bySplit.get(split)!].map(([x, y]) => {
            const spread = std?.get(x);
            const t = table.times.get(x);
            return spread === undefined ? { x, y, t } : { x, y, t, lo: y - spread, hi: y + spread };
          });
          const parts = [overlaid ? label : '', split, members.length > 1 ? name : ''].filter(Boolean);
          const color = overlaid ? SERIES_COLORS[run % SERIES_COLORS.length] : colorOfSplit(table, split);
          const dash = (overlaid && split !== 'train') || member > 0 ? [6, 4] : undefined;
          return {
            key: `${run}:${split}:${name}`,
            label: parts.join(' · '),
            color,
            dash,
            points: points.sort((a, b) => a.x - b.x),
          };
        });
    });
  });
}

/**
 * Where a family's bands may go: a reward whose values all lie in [0, 1] stays in [0, 1]; anything else
 * stays within the values observed (a σ band of a skewed metric says nothing past them).
 */
export function bandRangeOf(family: string, series: ChartSeries[]): [number, number] {
  const means = series.flatMap((entry) => entry.points.map((point) => point.y));
  if (family.endsWith('reward') && means.every((value) => value >= 0 && value <= 1)) return [0, 1];
  const [min, max] = extent(means);
  return [min, max];
}
