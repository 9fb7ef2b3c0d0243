/**
 * A line chart on uPlot (canvas; 2,000 steps × several runs stay fast): one line per series with its raw
 * values faint behind the EMA-smoothed line, an optional band (mean ± std) clipped to the metric's range,
 * drag to zoom (double-click or "Reset zoom" undoes it), a hover readout synced across every chart on the
 * page at the same x, the same cursor on the keyboard (focus the chart, then ← → Home End), and a click on a
 * point reports its step. The figure's data-* attributes say what is drawn (series, x range), for tests.
 */
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { h, replace, uid } from './dom.ts';
import { num } from './format.ts';
import { alignSeries, COLUMNS_PER_SERIES, extent, type AlignedChart, type ChartSeries, type ChartView } from './chart-data.ts';

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
/** Steps are whole numbers: no tick at step 1.5. */
const STEP_INCREMENTS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10000, 20000, 50000, 100000];
const DEFAULT_VIEW: ChartView = { xMode: 'step', smoothing: 0 };

function uplotSeries(series: ChartSeries[], aligned: AlignedChart): uPlot.Series[] {
  const lines: uPlot.Series[] = [{}];
  for (const entry of series) {
    const common = { spanGaps: true, points: { show: false } };
    lines.push(
      { ...common, label: `${entry.label} (raw)`, stroke: `${entry.color}40`, width: 1, dash: entry.dash },
      { ...common, label: entry.label, stroke: entry.color, width: 2, dash: entry.dash, points: { show: aligned.data[0].length <= 60, size: 5, fill: entry.color } },
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
    return h('li', { 'data-series': entry.key, 'data-points': entry.points.length }, swatch, h('span', entry.label), last ? h('span', { class: 'legend-value' }, num(last.y)) : null);
  });
}

export function lineChart(options: ChartOptions): Chart {
  const height = options.height ?? 220;
  let series = options.series;
  let view = options.view ?? DEFAULT_VIEW;
  let bandRange = options.bandRange;
  let aligned = alignSeries(series, view, bandRange);
  const titleId = uid('chart-title');
  const legend = h('ul', { class: 'chart-legend' });
  const plot = h('div', { class: 'chart-plot' });
  const tooltip = h('div', { class: 'chart-tooltip', hidden: true, role: 'status', 'aria-live': 'polite' });
  const resetZoom = h('button', { type: 'button', class: 'btn btn-small chart-reset', hidden: true }, 'Reset zoom');
  const element = h(
    'figure',
    { class: 'chart', tabindex: '0', 'aria-labelledby': titleId, 'data-chart': options.title },
    h('figcaption', { id: titleId }, h('span', { class: 'chart-title' }, options.title), legend, resetZoom),
    plot,
    tooltip,
  );
  let plotInstance: uPlot | null = null;
  let width = 0;
  let zoomed = false;

  const xValue = (x: number) => (view.xMode === 'time' ? new Date(x * 1000).toLocaleString() : `${options.xLabel} ${x}`);

  function showTooltip(u: uPlot): void {
    const index = u.cursor.idx;
    if (index === null || index === undefined) {
      tooltip.hidden = true;
      return;
    }
    const rows = series.flatMap((entry, position) => {
      const column = 1 + position * COLUMNS_PER_SERIES;
      const raw = u.data[column][index];
      if (raw === null || raw === undefined) return [];
      const lo = u.data[column + 2][index];
      const hi = u.data[column + 3][index];
      const smooth = u.data[column + 1][index];
      const swatch = h('span', { class: 'swatch', 'aria-hidden': 'true' });
      swatch.style.background = entry.color;
      return [
        h(
          'div',
          { class: 'tooltip-row', 'data-series': entry.key },
          swatch,
          `${entry.label}: `,
          h('strong', num(raw)),
          view.smoothing > 0 && typeof smooth === 'number' ? h('span', { class: 'muted' }, ` (EMA ${num(smooth)})`) : null,
          typeof lo === 'number' && typeof hi === 'number' ? h('span', { class: 'muted' }, ` [${num(lo, 3)}, ${num(hi, 3)}]`) : null,
        ),
      ];
    });
    const step = aligned.steps.map((column) => column[index]).find((value) => value !== null && value !== undefined);
    const title = view.xMode === 'time' && step !== undefined ? `step ${step} · ${xValue(u.data[0][index])}` : xValue(u.data[0][index]);
    replace(tooltip, h('div', { class: 'tooltip-title' }, title), rows);
    tooltip.hidden = false;
    const left = u.valToPos(u.data[0][index], 'x') + u.over.offsetLeft;
    tooltip.style.left = `${Math.min(Math.max(0, left + 12), Math.max(0, width - 220))}px`;
  }

  function describe(u: uPlot): void {
    element.dataset.seriesCount = String(series.length);
    element.dataset.xMin = String(u.scales.x.min ?? '');
    element.dataset.xMax = String(u.scales.x.max ?? '');
    element.dataset.yMin = String(u.scales.y.min ?? '');
    element.dataset.yMax = String(u.scales.y.max ?? '');
    const bands = u.data.filter((_column, index) => index > 0 && (index - 1) % COLUMNS_PER_SERIES >= 2);
    const [bandMin, bandMax] = extent(bands.flatMap((column) => Array.from(column)));
    element.dataset.bandMin = Number.isFinite(bandMin) ? String(bandMin) : '';
    element.dataset.bandMax = Number.isFinite(bandMax) ? String(bandMax) : '';
    const xs = u.data[0];
    zoomed = xs.length > 1 && ((u.scales.x.min ?? xs[0]) > xs[0] || (u.scales.x.max ?? xs.at(-1)!) < xs.at(-1)!);
    resetZoom.hidden = !zoomed;
  }

  function nearestSeries(u: uPlot, index: number, top: number): number {
    let best = -1;
    let bestDistance = Infinity;
    series.forEach((_entry, position) => {
      const value = u.data[1 + position * COLUMNS_PER_SERIES + 1][index];
      if (typeof value !== 'number') return;
      const distance = Math.abs(u.valToPos(value, 'y') - top);
      if (distance < bestDistance) [best, bestDistance] = [position, distance];
    });
    return best;
  }

  function create(): void {
    plotInstance?.destroy();
    if (aligned.data[0].length === 0) {
      plotInstance = null;
      replace(plot, h('p', { class: 'chart-empty' }, 'No data yet'));
      element.dataset.seriesCount = '0';
      return;
    }
    replace(plot);
    const bands = aligned.banded.flatMap((banded, position) => {
      const base = 1 + position * COLUMNS_PER_SERIES;
      return banded ? [{ series: [base + 3, base + 2] as [number, number], fill: `${series[position].color}24` }] : [];
    });
    const opts: uPlot.Options = {
      width: Math.max(120, width),
      height,
      series: uplotSeries(series, aligned),
      bands,
      scales: { x: { time: view.xMode === 'time' } },
      axes: [view.xMode === 'time' ? { size: 36 } : { label: options.xLabel, labelSize: 16, size: 36, incrs: STEP_INCREMENTS }, { size: 56 }],
      legend: { show: false },
      cursor: { sync: options.syncKey ? { key: options.syncKey } : undefined, drag: { x: true, y: false }, points: { show: false } },
      hooks: { setCursor: [showTooltip], setScale: [describe], ready: [describe] },
    };
    plotInstance = new uPlot(opts, aligned.data, plot);
    attachPick(plotInstance);
  }

  function attachPick(u: uPlot): void {
    let downAt = -1;
    u.over.addEventListener('mousedown', (event) => (downAt = event.clientX));
    u.over.addEventListener('click', (event) => {
      // A drag zooms; only a still click picks.
      if (Math.abs(event.clientX - downAt) <= 3) pick(u, u.cursor.top ?? 0);
    });
  }

  function pick(u: uPlot, top: number): void {
    const index = u.cursor.idx;
    if (index === null || index === undefined || !options.onPick) return;
    const position = nearestSeries(u, index, top);
    const step = position >= 0 ? aligned.steps[position][index] : null;
    if (position >= 0 && step !== null) options.onPick(series[position].key, step);
  }

  function redraw(): void {
    aligned = alignSeries(series, view, bandRange);
    replace(legend, legendItems(series));
    const sameShape = plotInstance && plotInstance.series.length === 1 + series.length * COLUMNS_PER_SERIES && aligned.data[0].length > 0;
    if (sameShape && plotInstance) {
      plotInstance.setData(aligned.data, !zoomed);
      describe(plotInstance);
    } else if (width > 0) create();
  }

  resetZoom.addEventListener('click', () => {
    if (!plotInstance) return;
    const xs = plotInstance.data[0];
    plotInstance.setScale('x', { min: xs[0], max: xs.at(-1)! });
  });
  keyboardCursor(element, () => plotInstance, (u) => pick(u, -1));

  const observer = new ResizeObserver((entries) => {
    const next = Math.floor(entries[0].contentRect.width);
    if (next === width || next <= 0) return;
    width = next;
    if (plotInstance) plotInstance.setSize({ width, height });
    else create();
  });
  observer.observe(plot);
  replace(legend, legendItems(series));

  return {
    element,
    update(next, nextRange) {
      series = next;
      bandRange = nextRange ?? bandRange;
      redraw();
    },
    setView(next) {
      const rebuild = next.xMode !== view.xMode;
      view = next;
      if (rebuild) {
        zoomed = false;
        aligned = alignSeries(series, view, bandRange);
        if (width > 0) create();
      } else redraw();
    },
  };
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
