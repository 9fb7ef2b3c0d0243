/**
 * A small SVG line chart: several series over integer steps, an optional band (mean ± std) per series,
 * one marker per point, a crosshair with a tooltip on hover, and the same cursor on the keyboard
 * (focus the chart, then ← → Home End). Redrawn at the container's width, so text is never scaled.
 */
import { h, s, replace, uid } from './dom.ts';
import { num, tick } from './format.ts';

export interface ChartPoint {
  x: number;
  y: number;
  lo?: number;
  hi?: number;
}

export interface ChartSeries {
  key: string;
  label: string;
  color: string;
  points: ChartPoint[];
}

export interface ChartOptions {
  title: string;
  xLabel: string;
  series: ChartSeries[];
  height?: number;
  /** Whether the band is a standard deviation (tooltip shows ±). */
  bandLabel?: string;
}

const MARGIN = { top: 12, right: 16, bottom: 30, left: 56 };
/** Above this many points per series markers are dropped (the line alone stays readable). */
const MAX_MARKERS = 600;

export const SERIES_COLORS = ['#3b5bdb', '#e8590c', '#2b8a3e', '#ae3ec9', '#1098ad', '#c92a2a', '#5f3dc4', '#a61e4d'];

export function niceTicks(min: number, max: number, count: number, integer = false): number[] {
  if (!(max > min)) return [min];
  const raw = (max - min) / Math.max(1, count);
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  let step = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((candidate) => candidate >= raw) ?? 10 * magnitude;
  if (integer) step = Math.max(1, Math.round(step));
  const ticks: number[] = [];
  for (let value = Math.ceil(min / step) * step; value <= max + step * 1e-9; value += step) ticks.push(Number(value.toPrecision(12)));
  return ticks;
}

function extent(values: number[]): [number, number] {
  let min = Infinity;
  let max = -Infinity;
  for (const value of values) {
    if (!Number.isFinite(value)) continue;
    if (value < min) min = value;
    if (value > max) max = value;
  }
  return [min, max];
}

export interface Chart {
  element: HTMLElement;
  update(series: ChartSeries[]): void;
}

export function lineChart(options: ChartOptions): Chart {
  const height = options.height ?? 220;
  let series = options.series;
  const titleId = uid('chart-title');
  const legend = h('ul', { class: 'chart-legend' });
  const plot = h('div', { class: 'chart-plot' });
  const tooltip = h('div', { class: 'chart-tooltip', hidden: true, role: 'status', 'aria-live': 'polite' });
  const element = h(
    'figure',
    { class: 'chart', tabindex: '0', 'aria-labelledby': titleId, 'data-chart': options.title },
    h('figcaption', { id: titleId }, h('span', { class: 'chart-title' }, options.title), legend),
    plot,
    tooltip,
  );
  let width = 0;
  let cursor: number | null = null;
  let xs: number[] = [];
  let scaleX = (x: number) => x;
  let crosshair: SVGLineElement | null = null;

  function allXs(): number[] {
    return [...new Set(series.flatMap((entry) => entry.points.map((point) => point.x)))].sort((a, b) => a - b);
  }

  function renderLegend(): void {
    replace(
      legend,
      series.map((entry) => {
        const last = entry.points.at(-1);
        return h(
          'li',
          h('span', { class: `swatch swatch-${SERIES_COLORS.indexOf(entry.color)}`, 'aria-hidden': 'true' }),
          h('span', entry.label),
          last ? h('span', { class: 'legend-value' }, num(last.y)) : null,
        );
      }),
    );
  }

  function draw(): void {
    renderLegend();
    if (width <= 0) return;
    const innerWidth = Math.max(10, width - MARGIN.left - MARGIN.right);
    const innerHeight = height - MARGIN.top - MARGIN.bottom;
    xs = allXs();
    const points = series.flatMap((entry) => entry.points);
    if (points.length === 0) {
      replace(plot, h('p', { class: 'chart-empty' }, 'No data yet'));
      return;
    }
    let [xMin, xMax] = extent(xs);
    if (xMin === xMax) {
      // One step: centre it, with no neighbouring (perhaps negative) steps on the axis.
      xMin -= 0.5;
      xMax += 0.5;
    }
    let [yMin, yMax] = extent(points.flatMap((point) => [point.y, point.lo ?? point.y, point.hi ?? point.y]));
    if (yMin === yMax) {
      const pad = Math.abs(yMin) * 0.1 || 1;
      yMin -= pad;
      yMax += pad;
    } else {
      const pad = (yMax - yMin) * 0.06;
      yMin -= pad;
      yMax += pad;
    }
    scaleX = (x: number) => MARGIN.left + ((x - xMin) / (xMax - xMin)) * innerWidth;
    const scaleY = (y: number) => MARGIN.top + (1 - (y - yMin) / (yMax - yMin)) * innerHeight;

    const svg = s('svg', { width, height, viewBox: `0 0 ${width} ${height}`, 'aria-hidden': 'true', class: 'chart-svg' });
    const grid = s('g', { class: 'grid' });
    const yTicks = niceTicks(yMin, yMax, 4);
    const yStep = yTicks.length > 1 ? yTicks[1] - yTicks[0] : 0;
    for (const value of yTicks) {
      const y = scaleY(value);
      grid.append(
        s('line', { x1: MARGIN.left, x2: MARGIN.left + innerWidth, y1: y, y2: y }),
        s('text', { x: MARGIN.left - 8, y: y + 4, 'text-anchor': 'end', class: 'tick' }, tick(value, yStep)),
      );
    }
    const xTicks = niceTicks(xMin, xMax, Math.max(2, Math.floor(innerWidth / 70)), true).filter((value) => value >= xMin && value <= xMax && Number.isInteger(value));
    const xStep = xTicks.length > 1 ? xTicks[1] - xTicks[0] : 1;
    for (const value of xTicks) {
      const x = scaleX(value);
      grid.append(
        s('line', { x1: x, x2: x, y1: MARGIN.top + innerHeight, y2: MARGIN.top + innerHeight + 4, class: 'tick-mark' }),
        s('text', { x, y: MARGIN.top + innerHeight + 18, 'text-anchor': 'middle', class: 'tick' }, tick(value, xStep)),
      );
    }
    grid.append(
      s('line', { x1: MARGIN.left, x2: MARGIN.left + innerWidth, y1: MARGIN.top + innerHeight, y2: MARGIN.top + innerHeight, class: 'axis' }),
      s('text', { x: MARGIN.left + innerWidth, y: height - 2, 'text-anchor': 'end', class: 'axis-label' }, options.xLabel),
    );
    svg.append(grid);

    for (const entry of series) {
      const sorted = [...entry.points].sort((a, b) => a.x - b.x);
      const banded = sorted.filter((point) => point.lo !== undefined && point.hi !== undefined);
      if (banded.length > 1) {
        const upper = banded.map((point) => `${scaleX(point.x).toFixed(1)},${scaleY(point.hi!).toFixed(1)}`);
        const lower = banded.map((point) => `${scaleX(point.x).toFixed(1)},${scaleY(point.lo!).toFixed(1)}`).reverse();
        svg.append(s('polygon', { points: [...upper, ...lower].join(' '), fill: entry.color, class: 'band', 'data-series': entry.key }));
      } else if (banded.length === 1) {
        const point = banded[0];
        svg.append(s('line', { x1: scaleX(point.x), x2: scaleX(point.x), y1: scaleY(point.lo!), y2: scaleY(point.hi!), stroke: entry.color, class: 'band-bar', 'data-series': entry.key }));
      }
      if (sorted.length > 1) {
        const d = sorted.map((point, index) => `${index === 0 ? 'M' : 'L'}${scaleX(point.x).toFixed(1)},${scaleY(point.y).toFixed(1)}`).join('');
        svg.append(s('path', { d, stroke: entry.color, class: 'line', 'data-series': entry.key }));
      }
      if (sorted.length <= MAX_MARKERS) {
        const markers = s('g', { class: 'markers', fill: entry.color });
        for (const point of sorted) {
          markers.append(s('circle', { cx: scaleX(point.x).toFixed(1), cy: scaleY(point.y).toFixed(1), r: sorted.length > 150 ? 2 : 3, class: 'pt', 'data-series': entry.key, 'data-x': point.x }));
        }
        svg.append(markers);
      }
    }
    crosshair = s('line', { y1: MARGIN.top, y2: MARGIN.top + innerHeight, class: 'crosshair', visibility: 'hidden' });
    svg.append(crosshair);
    replace(plot, svg);
    if (cursor !== null) showCursor(cursor);
  }

  function showCursor(index: number | null): void {
    cursor = index;
    if (index === null || xs.length === 0 || !crosshair) {
      tooltip.hidden = true;
      crosshair?.setAttribute('visibility', 'hidden');
      return;
    }
    const x = xs[Math.max(0, Math.min(xs.length - 1, index))];
    const px = scaleX(x);
    crosshair.setAttribute('x1', String(px));
    crosshair.setAttribute('x2', String(px));
    crosshair.setAttribute('visibility', 'visible');
    const rows = series
      .map((entry) => ({ entry, point: entry.points.find((point) => point.x === x) }))
      .filter((row) => row.point)
      .map(({ entry, point }) =>
        h(
          'div',
          { class: 'tooltip-row' },
          h('span', { class: `swatch swatch-${SERIES_COLORS.indexOf(entry.color)}`, 'aria-hidden': 'true' }),
          `${entry.label}: `,
          h('strong', num(point!.y)),
          point!.lo !== undefined && point!.hi !== undefined ? h('span', { class: 'muted' }, ` ± ${num((point!.hi - point!.lo) / 2, 3)}`) : null,
        ),
      );
    replace(tooltip, h('div', { class: 'tooltip-title' }, `${options.xLabel} ${x}`), rows);
    tooltip.hidden = false;
    const left = Math.min(Math.max(0, px + 12), Math.max(0, width - 200));
    tooltip.style.left = `${left}px`;
  }

  plot.addEventListener('mousemove', (event) => {
    if (xs.length === 0) return;
    const rect = plot.getBoundingClientRect();
    const px = event.clientX - rect.left;
    let best = 0;
    for (let index = 1; index < xs.length; index += 1) {
      if (Math.abs(scaleX(xs[index]) - px) < Math.abs(scaleX(xs[best]) - px)) best = index;
    }
    showCursor(best);
  });
  plot.addEventListener('mouseleave', () => showCursor(null));
  element.addEventListener('keydown', (event) => {
    if (xs.length === 0) return;
    const moves: Record<string, number> = { ArrowRight: 1, ArrowLeft: -1 };
    if (event.key in moves) showCursor(Math.max(0, Math.min(xs.length - 1, (cursor ?? (moves[event.key] > 0 ? -1 : xs.length)) + moves[event.key])));
    else if (event.key === 'Home') showCursor(0);
    else if (event.key === 'End') showCursor(xs.length - 1);
    else if (event.key === 'Escape') showCursor(null);
    else return;
    event.preventDefault();
  });
  element.addEventListener('blur', () => showCursor(null));

  const observer = new ResizeObserver((entries) => {
    const next = Math.floor(entries[0].contentRect.width);
    if (next !== width) {
      width = next;
      draw();
    }
  });
  observer.observe(plot);

  return {
    element,
    update(next: ChartSeries[]) {
      series = next;
      draw();
    },
  };
}
