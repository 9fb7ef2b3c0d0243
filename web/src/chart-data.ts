/**
 * The numbers behind a chart, apart from drawing: series aligned on one x axis (step or wall-clock time),
 * EMA smoothing, and bands clipped to the metric's range. uPlot wants one shared x array with a column per
 * line, `null` where a line has no point.
 */
import uPlot from 'uplot';

export interface ChartPoint {
  /** The step. */
  x: number;
  /** Wall-clock seconds, for the time axis. */
  t?: number;
  y: number;
  lo?: number;
  hi?: number;
}

export interface ChartSeries {
  key: string;
  label: string;
  color: string;
  /** Dashed for a split other than train, so runs keep their colour and splits stay apart. */
  dash?: number[];
  points: ChartPoint[];
}

export type XMode = 'step' | 'time';

export interface ChartView {
  xMode: XMode;
  /** EMA weight in [0, 1): 0 draws the raw values. */
  smoothing: number;
}

/** Per series, in order: raw (faint), smoothed, band low, band high; `steps[i]` the step under each x. */
export interface AlignedChart {
  data: uPlot.AlignedData;
  steps: (number | null)[][];
  banded: boolean[];
}

export const COLUMNS_PER_SERIES = 4;

/** Debiased EMA (as TensorBoard's): early points are not dragged towards 0; gaps stay gaps. */
export function ema(values: (number | null)[], weight: number): (number | null)[] {
  if (weight <= 0) return values;
  let last = 0;
  let count = 0;
  return values.map((value) => {
    if (value === null) return null;
    count += 1;
    last = last * weight + (1 - weight) * value;
    return last / (1 - weight ** count);
  });
}

export function extent(values: Iterable<number | null | undefined>): [number, number] {
  let min = Infinity;
  let max = -Infinity;
  for (const value of values) {
    if (value === null || value === undefined || !Number.isFinite(value)) continue;
    if (value < min) min = value;
    if (value > max) max = value;
  }
  return [min, max];
}

const clamp = (value: number | null, [min, max]: [number, number]) =>
  value === null ? null : Math.min(max, Math.max(min, value));

function table(entry: ChartSeries, mode: XMode): number[][] {
  const byX = new Map<number, ChartPoint>();
  for (const point of entry.points) {
    const x = mode === 'time' ? point.t : point.x;
    if (x !== undefined && Number.isFinite(x)) byX.set(x, point);
  }
  const xs = [...byX.keys()].sort((a, b) => a - b);
  const column = (pick: (point: ChartPoint) => number | undefined) => xs.map((x) => pick(byX.get(x)!) ?? NaN);
  return [
    xs,
    column((point) => point.y),
    column((point) => point.lo),
    column((point) => point.hi),
    column((point) => point.x),
  ];
}

/**
 * Aligns the series on one x axis. A band never leaves `bandRange` (a reward in [0, 1] has no σ below 0),
 * and without one it stays within the values the chart shows.
 */
export function alignSeries(series: ChartSeries[], view: ChartView, bandRange?: [number, number]): AlignedChart {
  const tables = series.map((entry) => table(entry, view.xMode));
  const joined =
    tables.length === 0 ? [[]] : uPlot.join(tables.map((columns) => columns as unknown as uPlot.AlignedData));
  const range = bandRange ?? extent(series.flatMap((entry) => entry.points.map((point) => point.y)));
  const nullable = (column: ArrayLike<number | null | undefined>) =>
    Array.from(column, (value) => (value === undefined || value === null || Number.isNaN(value) ? null : value));
  const data: (number | null)[][] = [Array.from(joined[0] as ArrayLike<number>)];
  const steps: (number | null)[][] = [];
  const banded: boolean[] = [];
  series.forEach((_entry, index) => {
    const base = 1 + index * 4;
    const raw = nullable(joined[base]);
    const lo = nullable(joined[base + 1]).map((value) => clamp(value, range));
    const hi = nullable(joined[base + 2]).map((value) => clamp(value, range));
    data.push(raw, ema(raw, view.smoothing), lo, hi);
    steps.push(nullable(joined[base + 3]));
    banded.push(lo.some((value) => value !== null));
  });
  return { data: data as uPlot.AlignedData, steps, banded };
}
