/**
 * A line chart on uPlot (canvas; 2,000 steps × several runs stay fast): one line per series with its raw
 * values faint behind the EMA-smoothed line, an optional band (mean ± std) clipped to the metric's range,
 * drag to zoom (double-click or "Reset zoom" undoes it), a hover readout synced across every chart on the
 * page at the same x, the same cursor on the keyboard (focus the chart, then ← → Home End), and a click on a
 * point reports its step. The figure's data-* attributes say what is drawn (series, x range), for tests.
 */
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import {
  type AlignedChart,
  alignSeries,
  type ChartSeries,
  type ChartView,
  COLUMNS_PER_SERIES,
  extent,
} from './chart-data.ts';
import { h, replace, uid } from './dom.ts';
import { num, tick } from './format.ts';

export type { ChartPoint, ChartSeries, ChartView } from './chart-data.ts';

export interface ChartOptions {
  title: string;
  xLabel: string;
  series: ChartSeries[];
  height?: number;
  view?: ChartView;
  /** Bands never leave this range (a reward in [0, 1]); without it, the range of the plotted values. */
  bandRange?: [number, number];
  /** Charts with the same key share the hover cursor. */
  syncKey?: string;
  /** A click on the plot (not a drag): the series nearest the pointer and the step there. */
  onPick?: (seriesKey: string, step: number) => void;
}

export interface Chart {
  element: HTMLElement;
  update(series: ChartSeries[], bandRange?: [number, number]): void;
  setView(view: ChartView): void;
}

export const SERIES_COLORS = ['#3b5bdb', '#e8590c', '#2b8a3e', '#ae3ec9', '#1098ad', '#c92a2a', '#5f3dc4', '#a61e4d'];
/** Tick labels with as many digits as the tick spacing needs (0.0015 and 0.002 stay apart). */
const yTicks = (_u: uPlot, splits: number[]) =>
  splits.map((value) => tick(value, splits.length > 1 ? Math.abs(splits[1] - splits[0]) : 0));

/** Steps are whole numbers: no tick at step 1.5. */
const STEP_INCREMENTS = [
  1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10000, 20000, 50000, 100000,
];
const DEFAULT_VIEW: ChartView = { xMode: 'step', smoothing: 0 };

function uplotSeries(series: ChartSeries[], aligned: AlignedChart): uPlot.Series[] {
  const lines: uPlot.Series[] = [{}];
  for (const entry of series) {
    const common = { spanGaps: true, points: { show: false } };
    lines.push(
      { ...common, label: `${entry.label} (raw)`, stroke: `${entry.color}40`, width: 1, dash: entry.dash },
      {
        ...common,
        label: entry.label,
        stroke: entry.color,
        width: 2,
        dash: entry.dash,
        points: { show: aligned.data[0].length <= 60, size: 5, fill: entry.color },
      },
      { ...common, label: `${entry.label} low`, stroke: 'transparent', width: 0 },
      { ...common, label: `${entry.label} high`, stroke: 'transparent', width: 0 },
    );
  }
  return lines;
}

function legendItems(series: ChartSeries[]): HTMLElement[] {
  return series.map((entry) => {
    const last = entry.points.at(-1);
    const swatch = h('span', { class: 'swatch', 'aria-hidden': 'true' });
    swatch.style.background = entry.color;
    return h(
      'li',
      { 'data-series': entry.key, 'data-points': entry.points.length },
      swatch,
      h('span', entry.label),
      last ? h('span', { class: 'legend-value' }, num(last.y)) : null,
    );
  });
}

/** One readout row per series with a value at this index: raw, EMA when smoothing, band. */
function tooltipRows(series: ChartSeries[], u: uPlot, index: number, smoothing: number): HTMLElement[] {
  return series.flatMap((entry, position) => {
    const column = 1 + position * COLUMNS_PER_SERIES;
    const raw = u.data[column][index];
    if (raw === null || raw === undefined) return [];
    const [smooth, lo, hi] = [u.data[column + 1][index], u.data[column + 2][index], u.data[column + 3][index]];
    const swatch = h('span', { class: 'swatch', 'aria-hidden': 'true' });
    swatch.style.background = entry.color;
    return [
      h(
        'div',
        { class: 'tooltip-row', 'data-series': entry.key },
        swatch,
        `${entry.label}: `,
        h('strong', num(raw)),
        smoothing > 0 && typeof smooth === 'number' ? h('span', { class: 'muted' }, ` (EMA ${num(smooth)})`) : null,
        typeof lo === 'number' && typeof hi === 'number'
          ? h('span', { class: 'muted' }, ` [${num(lo, 3)}, ${num(hi, 3)}]`)
          : null,
      ),
    ];
  });
}

/** What is drawn, on the figure's data-* attributes: series count, x and y ranges, the band's extent. Returns whether x is zoomed in. */
function describe(element: HTMLElement, u: uPlot, seriesCount: number): boolean {
  element.dataset.seriesCount = String(seriesCount);
  element.dataset.xMin = String(u.scales.x.min ?? '');
  element.dataset.xMax = String(u.scales.x.max ?? '');
  element.dataset.yMin = String(u.scales.y.min ?? '');
  element.dataset.yMax = String(u.scales.y.max ?? '');
  const bands = u.data.filter((_column, index) => index > 0 && (index - 1) % COLUMNS_PER_SERIES >= 2);
  const [bandMin, bandMax] = extent(bands.flatMap((column) => Array.from(column)));
  element.dataset.bandMin = Number.isFinite(bandMin) ? String(bandMin) : '';
  element.dataset.bandMax = Number.isFinite(bandMax) ? String(bandMax) : '';
  const xs = u.data[0];
  return xs.length > 1 && ((u.scales.x.min ?? xs[0]) > xs[0] || (u.scales.x.max ?? xs.at(-1)!) < xs.at(-1)!);
}

/** The series whose smoothed line passes nearest this height at this index; −1 when none has a value. */
function nearestSeries(u: uPlot, seriesCount: number, index: number, top: number): number {
  let best = -1;
  let bestDistance = Infinity;
  for (let position = 0; position < seriesCount; position += 1) {
    const value = u.data[1 + position * COLUMNS_PER_SERIES + 1][index];
    if (typeof value !== 'number') continue;
    const distance = Math.abs(u.valToPos(value, 'y') - top);
    if (distance < bestDistance) [best, bestDistance] = [position, distance];
  }
  return best;
}

class LineChart implements Chart {
  readonly element: HTMLElement;
  private readonly legend = h('ul', { class: 'chart-legend' });
  private readonly plot = h('div', { class: 'chart-plot' });
  private readonly tooltip = h('div', { class: 'chart-tooltip', hidden: true, role: 'status', 'aria-live': 'polite' });
  private readonly resetZoom = h(
    'button',
    { type: 'button', class: 'btn btn-small chart-reset', hidden: true },
    'Reset zoom',
  );
  private series: ChartSeries[];
  private view: ChartView;
  private bandRange?: [number, number];
  private aligned: AlignedChart;
  private uplot: uPlot | null = null;
  private width = 0;
  private zoomed = false;

  constructor(private readonly options: ChartOptions) {
    this.series = options.series;
    this.view = options.view ?? DEFAULT_VIEW;
    this.bandRange = options.bandRange;
    this.aligned = alignSeries(this.series, this.view, this.bandRange);
    const titleId = uid('chart-title');
    this.element = h(
      'figure',
      { class: 'chart', tabindex: '0', 'aria-labelledby': titleId, 'data-chart': options.title },
      h('figcaption', { id: titleId }, h('span', { class: 'chart-title' }, options.title), this.legend, this.resetZoom),
      this.plot,
      this.tooltip,
    );
    this.resetZoom.addEventListener('click', () => {
      const xs = this.uplot?.data[0];
      if (xs && xs.length > 0) this.uplot!.setScale('x', { min: xs[0], max: xs.at(-1)! });
    });
    keyboardCursor(
      this.element,
      () => this.uplot,
      (u) => this.pick(u, -1),
    );
    new ResizeObserver((entries) => this.resize(Math.floor(entries[0].contentRect.width))).observe(this.plot);
    replace(this.legend, legendItems(this.series));
  }

  update(series: ChartSeries[], bandRange?: [number, number]): void {
    this.series = series;
    this.bandRange = bandRange ?? this.bandRange;
    this.redraw();
  }

  setView(view: ChartView): void {
    const rebuild = view.xMode !== this.view.xMode;
    this.view = view;
    if (!rebuild) {
      this.redraw();
      return;
    }
    this.zoomed = false;
    this.aligned = alignSeries(this.series, this.view, this.bandRange);
    if (this.width > 0) this.create();
  }

  private resize(width: number): void {
    if (width === this.width || width <= 0) return;
    this.width = width;
    if (this.uplot) this.uplot.setSize({ width, height: this.options.height ?? 220 });
    else this.create();
  }

  private redraw(): void {
    this.aligned = alignSeries(this.series, this.view, this.bandRange);
    replace(this.legend, legendItems(this.series));
    const sameShape =
      this.uplot &&
      this.uplot.series.length === 1 + this.series.length * COLUMNS_PER_SERIES &&
      this.aligned.data[0].length > 0;
    if (this.uplot && sameShape) {
      // Keep the user's zoom while new steps arrive.
      this.uplot.setData(this.aligned.data, !this.zoomed);
      this.described(this.uplot);
    } else if (this.width > 0) this.create();
  }

  private described(u: uPlot): void {
    this.zoomed = describe(this.element, u, this.series.length);
    this.resetZoom.hidden = !this.zoomed;
  }

  private create(): void {
    this.uplot?.destroy();
    this.uplot = null;
    if (this.aligned.data[0].length === 0) {
      replace(this.plot, h('p', { class: 'chart-empty' }, 'No data yet'));
      this.element.dataset.seriesCount = '0';
      return;
    }
    replace(this.plot);
    const bands = this.aligned.banded.flatMap((banded, position) => {
      const base = 1 + position * COLUMNS_PER_SERIES;
      return banded
        ? [{ series: [base + 3, base + 2] as [number, number], fill: `${this.series[position].color}24` }]
        : [];
    });
    const time = this.view.xMode === 'time';
    const opts: uPlot.Options = {
      width: Math.max(120, this.width),
      height: this.options.height ?? 220,
      series: uplotSeries(this.series, this.aligned),
      bands,
      scales: { x: { time } },
      axes: [
        time ? { size: 36 } : { label: this.options.xLabel, labelSize: 16, size: 36, incrs: STEP_INCREMENTS },
        { size: 56, values: yTicks },
      ],
      legend: { show: false },
      cursor: {
        sync: this.options.syncKey ? { key: this.options.syncKey } : undefined,
        drag: { x: true, y: false },
        points: { show: false },
      },
      hooks: {
        setCursor: [(u) => this.showTooltip(u)],
        setScale: [(u) => this.described(u)],
        ready: [(u) => this.described(u)],
      },
    };
    const u = new uPlot(opts, this.aligned.data, this.plot);
    this.uplot = u;
    let downAt = -1;
    u.over.addEventListener('mousedown', (event) => (downAt = event.clientX));
    // A drag zooms; only a still click picks.
    u.over.addEventListener(
      'click',
      (event) => Math.abs(event.clientX - downAt) <= 3 && this.pick(u, u.cursor.top ?? 0),
    );
  }

  private showTooltip(u: uPlot): void {
    const index = u.cursor.idx;
    if (index === null || index === undefined) {
      this.tooltip.hidden = true;
      return;
    }
    const x = u.data[0][index];
    const step = this.aligned.steps
      .map((column) => column[index])
      .find((value) => value !== null && value !== undefined);
    const title =
      this.view.xMode === 'time'
        ? `${step !== undefined ? `step ${step} · ` : ''}${new Date(x * 1000).toLocaleString()}`
        : `${this.options.xLabel} ${x}`;
    replace(
      this.tooltip,
      h('div', { class: 'tooltip-title' }, title),
      tooltipRows(this.series, u, index, this.view.smoothing),
    );
    this.tooltip.hidden = false;
    const left = u.valToPos(x, 'x') + u.over.offsetLeft;
    this.tooltip.style.left = `${Math.min(Math.max(0, left + 12), Math.max(0, this.width - 220))}px`;
  }

  private pick(u: uPlot, top: number): void {
    const index = u.cursor.idx;
    if (index === null || index === undefined || !this.options.onPick) return;
    const position = nearestSeries(u, this.series.length, index, top);
    const step = position >= 0 ? this.aligned.steps[position][index] : null;
    if (position >= 0 && step !== null) this.options.onPick(this.series[position].key, step);
  }
}

export function lineChart(options: ChartOptions): Chart {
  return new LineChart(options);
}

/**
 * ← → move the cursor point by point, Home End jump, Escape hides it (uPlot syncs it to the other charts);
 * Enter opens the point under it, as a click does.
 */
function keyboardCursor(element: HTMLElement, current: () => uPlot | null, pick: (u: uPlot) => void): void {
  let index: number | null = null;
  const moveTo = (u: uPlot, next: number | null) => {
    index = next === null ? null : Math.max(0, Math.min(u.data[0].length - 1, next));
    if (index === null) u.setCursor({ left: -10, top: -10 });
    else u.setCursor({ left: u.valToPos(u.data[0][index], 'x'), top: u.over.clientHeight / 2 });
  };
  element.addEventListener('keydown', (event) => {
    const u = current();
    if (!u || u.data[0].length === 0) return;
    const last = u.data[0].length - 1;
    if (event.key === 'ArrowRight') moveTo(u, index === null ? 0 : index + 1);
    else if (event.key === 'ArrowLeft') moveTo(u, index === null ? last : index - 1);
    else if (event.key === 'Home') moveTo(u, 0);
    else if (event.key === 'End') moveTo(u, last);
    else if (event.key === 'Escape') moveTo(u, null);
    else if (event.key === 'Enter' && index !== null) pick(u);
    else return;
    event.preventDefault();
  });
  element.addEventListener('blur', () => {
    const u = current();
    if (u) moveTo(u, null);
  });
}
