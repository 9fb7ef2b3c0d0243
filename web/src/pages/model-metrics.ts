/**
 * The model page's charts: a metric picker, one chart per metric family, other models' runs overlaid
 * ("Compare with"), EMA smoothing, x by step or wall-clock time. Every chart shares one hover cursor; a
 * click on a point opens the trajectories behind it.
 */
import { getAll, type MetricRow, type ModelSummary } from '../api.ts';
import { type Chart, type ChartView, lineChart } from '../chart.ts';
import { emptyState, field, h, replace, uid } from '../dom.ts';
import { metricLabel } from '../format.ts';
import {
  bandRangeOf,
  chartableMetrics,
  DEFAULT_METRICS,
  type MetricTable,
  metricTable,
  type RunTable,
  seriesOf,
} from '../metrics.ts';
import { navigate } from '../router.ts';

export interface MetricsState {
  metrics: string[];
  compare: string[];
  smoothing: number;
  xMode: ChartView['xMode'];
}

export interface MetricsSection {
  element: HTMLElement;
  update(table: MetricTable): void;
}

export const loadRunMetrics = (modelId: string, signal: AbortSignal) =>
  getAll<MetricRow>(`/v1/dashboard/models/${modelId}/metrics`, { limit: 1000 }, signal);

/**
 * Where a point's rollouts are: a `train` row at step N was computed from the trajectories sampled from
 * checkpoint N − 1 (they are stored at that step); a logged split's row sits at its trajectories' step.
 */
export function trajectoryStepOf(split: string, step: number): number {
  return split === 'train' ? Math.max(0, step - 1) : step;
}

function controls(state: MetricsState, others: ModelSummary[], onChange: () => void): HTMLElement {
  const slider = h('input', {
    type: 'range',
    min: '0',
    max: '0.99',
    step: '0.01',
    value: String(state.smoothing),
    id: uid('smoothing'),
  });
  const readout = h('output', { for: slider.id, class: 'mono' }, state.smoothing.toFixed(2));
  slider.addEventListener('input', () => {
    state.smoothing = Number(slider.value);
    readout.textContent = state.smoothing.toFixed(2);
    onChange();
  });
  const axis = h(
    'select',
    { id: uid('x-axis') },
    h('option', { value: 'step', selected: state.xMode === 'step' }, 'step'),
    h('option', { value: 'time', selected: state.xMode === 'time' }, 'wall-clock time'),
  );
  axis.addEventListener('change', () => {
    state.xMode = axis.value === 'time' ? 'time' : 'step';
    onChange();
  });
  const compare = h(
    'select',
    { id: uid('compare'), multiple: true, size: String(Math.min(4, Math.max(2, others.length))) },
    others.map((model) =>
      h('option', { value: model.id, selected: state.compare.includes(model.id) }, `${model.project} / ${model.name}`),
    ),
  );
  compare.addEventListener('change', () => {
    state.compare = [...compare.selectedOptions].map((option) => option.value);
    onChange();
  });
  const smoothing = field('Smoothing (EMA)', slider);
  smoothing.append(readout);
  return h(
    'div',
    { class: 'chart-controls' },
    smoothing,
    field('X axis', axis),
    others.length > 0 ? field('Compare with', compare, 'Ctrl/⌘-click for several runs') : null,
  );
}

/** The family's chart, made once and updated after: zoom and hover survive new data. */
function chartFor(
  charts: Map<string, Chart>,
  name: string,
  tables: RunTable[],
  options: { view: ChartView; syncKey: string; onPick: (key: string, step: number) => void },
): Chart {
  const series = seriesOf(tables, name);
  const range = bandRangeOf(name, series);
  let chart = charts.get(name);
  if (chart) {
    chart.setView(options.view);
    chart.update(series, range);
  } else {
    chart = lineChart({ title: metricLabel(name), xLabel: 'step', series, bandRange: range, ...options });
    charts.set(name, chart);
  }
  return chart;
}

/** The section's runs, selection and charts; one per model page. */
interface MetricsView {
  model: ModelSummary;
  others: ModelSummary[];
  state: MetricsState;
  signal: AbortSignal;
  onState: () => void;
  /** This model's own metrics, replaced on every update. */
  own: MetricTable;
  compared: Map<string, MetricTable>;
  picker: HTMLDivElement;
  grid: HTMLDivElement;
  charts: Map<string, Chart>;
  syncKey: string;
}

function runs(mv: MetricsView): RunTable[] {
  return [
    { label: mv.model.name, table: mv.own },
    ...mv.state.compare.flatMap((id) => {
      const table = mv.compared.get(id);
      const other = mv.others.find((entry) => entry.id === id);
      return table && other ? [{ label: other.name, table }] : [];
    }),
  ];
}

/** A click on a point opens that run's trajectories of the split and step. */
function openPoint(mv: MetricsView, seriesKey: string, step: number): void {
  const [run, split] = seriesKey.split(':');
  const target = run === '0' ? mv.model.id : mv.state.compare.filter((id) => mv.compared.has(id))[Number(run) - 1];
  if (target) navigate(`/models/${target}/trajectories`, { split, step: trajectoryStepOf(split, step) });
}

function toggle(mv: MetricsView, name: string): void {
  const { state } = mv;
  state.metrics = state.metrics.includes(name)
    ? state.metrics.filter((other) => other !== name)
    : [...state.metrics, name];
  if (state.metrics.length === 0) state.metrics = [name];
  mv.onState();
  draw(mv);
  mv.picker.querySelector<HTMLButtonElement>(`[data-metric="${CSS.escape(name)}"]`)?.focus();
}

function draw(mv: MetricsView): void {
  const { state, charts } = mv;
  const tables = runs(mv);
  const available = chartableMetrics(tables.map((run) => run.table));
  if (state.metrics.length === 0) state.metrics = DEFAULT_METRICS.filter((name) => available.includes(name));
  replace(
    mv.picker,
    available.map((name) =>
      h(
        'button',
        {
          type: 'button',
          class: 'chip',
          'aria-pressed': String(state.metrics.includes(name)),
          'data-metric': name,
          onclick: () => toggle(mv, name),
        },
        metricLabel(name),
      ),
    ),
  );
  const shown = available.filter((name) => state.metrics.includes(name));
  if (shown.length === 0) {
    replace(
      mv.grid,
      emptyState('No metrics yet', h('p', 'Metrics appear here after the first training job or logged split.')),
    );
    charts.clear();
    return;
  }
  for (const name of [...charts.keys()]) if (!shown.includes(name)) charts.delete(name);
  const view: ChartView = { xMode: state.xMode, smoothing: state.smoothing };
  replace(
    mv.grid,
    shown.map(
      (name) =>
        chartFor(charts, name, tables, { view, syncKey: mv.syncKey, onPick: (key, step) => openPoint(mv, key, step) })
          .element,
    ),
  );
}

async function loadCompared(mv: MetricsView): Promise<void> {
  const missing = mv.state.compare.filter((id) => !mv.compared.has(id));
  const loaded = await Promise.all(
    missing.map(async (id) => [id, metricTable(await loadRunMetrics(id, mv.signal))] as const),
  );
  for (const [id, table] of loaded) mv.compared.set(id, table);
}

function changed(mv: MetricsView): void {
  mv.onState();
  void loadCompared(mv).then(
    () => draw(mv),
    () => {},
  );
}

export function metricsSection(
  model: ModelSummary,
  initial: MetricTable,
  others: ModelSummary[],
  state: MetricsState,
  signal: AbortSignal,
  onState: () => void,
): MetricsSection {
  const mv: MetricsView = {
    model,
    others,
    state,
    signal,
    onState,
    own: initial,
    compared: new Map<string, MetricTable>(),
    picker: h('div', { class: 'picker', role: 'group', 'aria-label': 'Metrics to chart' }),
    grid: h('div', { class: 'charts' }),
    charts: new Map<string, Chart>(),
    syncKey: uid('sync'),
  };
  const element = h(
    'section',
    { class: 'card', 'aria-labelledby': 'metrics-title' },
    h('h2', { id: 'metrics-title' }, 'Metrics per step'),
    controls(
      state,
      others.filter((entry) => entry.id !== model.id),
      () => changed(mv),
    ),
    mv.picker,
    mv.grid,
  );
  draw(mv);
  if (state.compare.length > 0) changed(mv);
  return {
    element,
    update(next) {
      mv.own = next;
      draw(mv);
    },
  };
}
