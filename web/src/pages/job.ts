/**
 * One training job, followed live through the public events endpoint (`after=<last id>`, twice a second):
 * a progress bar over `num_sequences`, the latest step's metrics and their curves, the event log,
 * the failure message when it fails, and cancel.
 */

import { metricsAt } from '../../../src/api/training-vocabulary.ts';
import {
  get,
  isActive,
  type Job,
  type JobConfig,
  type JobEvent,
  type ListPage,
  type Model,
  request,
  TERMINAL_STATUSES,
} from '../api.ts';
import { type Chart, lineChart, SERIES_COLORS } from '../chart.ts';
import { badge, confirmDialog, emptyState, errorBox, h, replace, spinner, toast } from '../dom.ts';
import { absoluteTime, duration, metricLabel, num, relativeTime, shortId } from '../format.ts';
import { href, type RouteContext } from '../router.ts';

const POLL_MS = 500;
const CHART_METRICS = metricsAt('job_chart');
const CARD_METRICS = metricsAt('job_card');
const EVENT_LINE = ['step', ...metricsAt('event_line')];
const MAX_EVENT_ROWS = 200;

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });

type StepEvent = Extract<JobEvent, { type: 'gradient_step' }>;

function eventSummary(event: JobEvent): string {
  const data: unknown = event.data;
  switch (event.type) {
    case 'training_started':
      return `${String(event.data.num_sequences)} gradient steps planned`;
    case 'gradient_step': {
      const metrics = event.data;
      return EVENT_LINE.filter((key) => typeof metrics[key] === 'number')
        .map((key) => `${key} ${num(metrics[key])}`)
        .join(' · ');
    }
    case 'training_ended':
      return `checkpoint step ${String(event.data.step)}`;
    case 'training_failed':
      return String(event.data.error_message ?? 'failed');
    case 'checkpoints_deleted':
      return `retention deleted step${event.data.steps.length === 1 ? '' : 's'} ${event.data.steps.join(', ')}`;
    default:
      // An event this dashboard does not know by name (sampler_logprobs_missing, or one a later server adds).
      return JSON.stringify(data);
  }
}

/** Gradient steps per second over the steps seen so far (the first step's own time is not measured). */
export function stepRate(steps: StepEvent[]): number | null {
  if (steps.length < 2) return null;
  const seconds = (Date.parse(steps.at(-1)!.created_at) - Date.parse(steps[0].created_at)) / 1000;
  return seconds > 0 ? (steps.length - 1) / seconds : null;
}

function rateText(steps: StepEvent[], total: number, running: boolean): string {
  const rate = stepRate(steps);
  if (rate === null) return running && total > 0 ? 'ETA after the second step' : '';
  const perSecond = `${num(rate, 3)} steps/s`;
  if (!running) return `${perSecond} on average`;
  const remaining = Math.max(0, total - steps.length);
  return `${perSecond} · ETA ${remaining === 0 ? 'now' : `${Math.ceil(remaining / rate)} s`}`;
}

const configValue = (value: unknown) =>
  typeof value === 'number' ? num(value, 6) : typeof value === 'string' ? value : JSON.stringify(value);

/** The configuration the job ran with (defaults filled in), and how much data it got. */
function configSection(jobId: string, signal: AbortSignal): HTMLElement {
  const body = h('div', spinner('Loading configuration…'));
  get<JobConfig>(`/v1/dashboard/jobs/${jobId}/config`, signal)
    .then((view) => {
      if (!view.config) {
        replace(
          body,
          emptyState('Configuration not kept', h('p', 'The request this job was queued with is no longer on disk.')),
        );
        return;
      }
      const entries = Object.entries(view.config).sort(([a], [b]) => a.localeCompare(b));
      const data =
        view.num_trajectory_groups === null
          ? null
          : `${view.num_trajectory_groups} groups · ${view.num_trajectories} trajectories`;
      replace(
        body,
        data ? h('p', { class: 'muted' }, data) : null,
        h(
          'dl',
          { class: 'kv job-config' },
          entries.map(([key, value]) => [h('dt', key), h('dd', { 'data-key': key }, configValue(value))]),
        ),
      );
    })
    .catch((error) => {
      if (!signal.aborted) replace(body, errorBox(error));
    });
  return h(
    'section',
    { class: 'card', 'aria-labelledby': 'config-title' },
    h('h2', { id: 'config-title' }, 'Configuration'),
    body,
  );
}

/** The job as last read, its events so far, and the page's live parts; one per visit. */
interface JobPage {
  job: Job;
  events: JobEvent[];
  /** Id of the last event read: the next poll asks for what came after it. */
  cursor: string;
  statusSlot: HTMLSpanElement;
  meta: HTMLParagraphElement;
  modelSlot: HTMLSpanElement;
  cancelButton: HTMLButtonElement;
  outcome: HTMLDivElement;
  progress: HTMLProgressElement;
  progressLabel: HTMLSpanElement;
  progressRate: HTMLSpanElement;
  cards: HTMLDivElement;
  chartsGrid: HTMLDivElement;
  charts: Map<string, Chart>;
  eventRows: HTMLTableSectionElement;
  eventCount: HTMLSpanElement;
}

function createJobPage(job: Job): JobPage {
  return {
    job,
    events: [],
    cursor: '',
    statusSlot: h('span', { class: 'status-slot', 'aria-live': 'polite' }),
    meta: h('p', { class: 'subtitle' }),
    modelSlot: h('span', h('code', job.model_id)),
    cancelButton: h('button', { class: 'btn btn-danger', type: 'button' }, 'Cancel job'),
    outcome: h('div', { class: 'outcome' }),
    progress: h('progress', { max: 1, value: 0, id: 'job-progress', 'aria-label': 'Gradient steps done' }),
    progressLabel: h('span', { class: 'progress-label' }),
    progressRate: h('span', { class: 'progress-rate muted' }),
    cards: h('div', { class: 'stats' }),
    chartsGrid: h('div', { class: 'charts' }),
    charts: new Map<string, Chart>(),
    eventRows: h('tbody'),
    eventCount: h('span', { class: 'count' }),
  };
}

function renderMeta(jp: JobPage): void {
  const { job } = jp;
  replace(jp.statusSlot, badge(job.status));
  replace(
    jp.meta,
    'Model ',
    jp.modelSlot,
    ' · created ',
    h('span', { title: absoluteTime(job.created_at) }, relativeTime(job.created_at)),
    job.started_at ? ` · ran ${duration(job.started_at, job.finished_at)}${job.finished_at ? '' : ' so far'}` : '',
  );
  jp.cancelButton.hidden = !isActive(job.status);
}

function renderProgress(jp: JobPage, steps: StepEvent[]): void {
  const { job, events } = jp;
  const started = events.find((event) => event.type === 'training_started');
  const total = Number(started?.data.num_sequences ?? job.num_sequences ?? 0);
  const done = job.status === 'COMPLETED' ? total : Math.min(steps.length, total);
  jp.progress.max = Math.max(1, total);
  jp.progress.value = done;
  jp.progress.setAttribute('aria-valuetext', `${done} of ${total} gradient steps`);
  jp.progressLabel.textContent =
    job.status === 'QUEUED'
      ? 'Waiting in the queue…'
      : !started && job.status === 'RUNNING'
        ? 'Preparing the data…'
        : total > 0
          ? `${done} / ${total} gradient steps`
          : 'No gradient steps';
  jp.progressRate.textContent = rateText(steps, total, job.status === 'RUNNING');
}

function renderOutcome(jp: JobPage): void {
  const { job, events, outcome } = jp;
  const failed = events.find((event) => event.type === 'training_failed');
  const ended = events.find((event) => event.type === 'training_ended');
  if (job.status === 'FAILED' || job.status === 'CANCELLED') {
    const message =
      job.error?.message ??
      String(failed?.data.error_message ?? (job.status === 'CANCELLED' ? 'The job was cancelled.' : 'The job failed.'));
    replace(
      outcome,
      h(
        'div',
        { class: job.status === 'FAILED' ? 'error-box' : 'notice-box', role: 'alert' },
        h('strong', job.status === 'FAILED' ? 'Training failed' : 'Cancelled'),
        job.error?.code ? h('code', { class: 'error-code' }, job.error.code) : null,
        h('p', { class: 'error-message' }, message),
      ),
    );
  } else if (job.status === 'COMPLETED') {
    const step = job.checkpoint_step ?? (ended?.data.step as number | undefined);
    replace(
      outcome,
      h(
        'div',
        { class: 'success-box', role: 'status' },
        h('strong', `Checkpoint step ${step ?? '?'} written`),
        ' · ',
        h('a', { href: href(`/models/${job.model_id}`) }, 'see the model'),
        ' · ',
        h('a', { href: href('/playground', { model: job.model_id, step }) }, 'chat with it'),
      ),
    );
  } else replace(outcome);
}

/** The latest step's metrics as cards, and one curve per metric the steps carry. */
function renderMetrics(jp: JobPage, steps: StepEvent[]): void {
  const last: Record<string, number> = steps.at(-1)?.data ?? jp.job.metrics;
  replace(
    jp.cards,
    CARD_METRICS.filter((key) => typeof last[key] === 'number').map((key) =>
      h(
        'div',
        { class: 'stat', 'data-metric': key },
        h('div', { class: 'stat-label' }, metricLabel(key)),
        h('div', { class: 'stat-value' }, num(last[key])),
      ),
    ),
  );
  const present = CHART_METRICS.filter((key) => steps.some((event) => typeof event.data[key] === 'number'));
  for (const [index, key] of present.entries()) {
    const series = [
      {
        key,
        label: metricLabel(key),
        color: SERIES_COLORS[index % SERIES_COLORS.length],
        points: steps
          .filter((event) => typeof event.data[key] === 'number')
          .map((event) => ({ x: Number(event.data.step), y: Number(event.data[key]) })),
      },
    ];
    const chart = jp.charts.get(key);
    if (chart) chart.update(series);
    else {
      const created = lineChart({ title: metricLabel(key), xLabel: 'gradient step', series, height: 180 });
      jp.charts.set(key, created);
      jp.chartsGrid.append(created.element);
    }
  }
}

function renderEvents(jp: JobPage): void {
  jp.eventCount.textContent = `${jp.events.length}`;
  replace(
    jp.eventRows,
    jp.events
      .slice(-MAX_EVENT_ROWS)
      .reverse()
      .map((event) =>
        h(
          'tr',
          { 'data-type': event.type },
          h('td', { title: absoluteTime(event.created_at) }, new Date(event.created_at).toLocaleTimeString('en-US')),
          h('td', h('code', event.type)),
          h('td', { class: 'event-data' }, eventSummary(event)),
        ),
      ),
  );
}

function render(jp: JobPage): void {
  renderMeta(jp);
  const steps = jp.events.filter((event): event is StepEvent => event.type === 'gradient_step');
  renderProgress(jp, steps);
  renderOutcome(jp);
  renderMetrics(jp, steps);
  renderEvents(jp);
}

async function cancelJob(jp: JobPage): Promise<void> {
  const confirmed = await confirmDialog({
    title: 'Cancel this job?',
    body: h(
      'p',
      jp.job.status === 'QUEUED'
        ? 'It has not started; it will never run.'
        : 'It stops before its next gradient step and writes no checkpoint.',
    ),
    confirm: 'Cancel job',
    danger: true,
  });
  if (!confirmed) return;
  try {
    jp.job = await request<Job>('POST', `/v1/preview/training-jobs/${jp.job.id}/cancel`);
    toast('Cancel requested');
    render(jp);
  } catch (error) {
    toast(error instanceof Error ? error.message : String(error), 'error');
  }
}

function layout(jp: JobPage, signal: AbortSignal): HTMLElement[] {
  const { job } = jp;
  return [
    h(
      'div',
      { class: 'page-head' },
      h(
        'nav',
        { class: 'breadcrumb', 'aria-label': 'Breadcrumb' },
        h('a', { href: href('/jobs') }, 'Jobs'),
        h('span', { 'aria-hidden': 'true' }, ' / '),
        shortId(job.id),
      ),
      h(
        'div',
        { class: 'title-row' },
        h('h1', `${job.type.toUpperCase()} job `, h('span', { class: 'mono' }, shortId(job.id)), ' ', jp.statusSlot),
        jp.cancelButton,
      ),
      jp.meta,
    ),
    jp.outcome,
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'progress-title' },
      h('h2', { id: 'progress-title' }, 'Progress'),
      h('div', { class: 'progress-row' }, jp.progress, jp.progressLabel, jp.progressRate),
      jp.cards,
    ),
    configSection(job.id, signal),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'live-title' },
      h('h2', { id: 'live-title' }, 'Metrics per gradient step'),
      jp.chartsGrid,
    ),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'events-title' },
      h('h2', { id: 'events-title' }, 'Events', jp.eventCount),
      h(
        'div',
        { class: 'table-wrap events-wrap' },
        h(
          'table',
          { class: 'table events' },
          h(
            'thead',
            h(
              'tr',
              h('th', { scope: 'col' }, 'Time'),
              h('th', { scope: 'col' }, 'Type'),
              h('th', { scope: 'col' }, 'Data'),
            ),
          ),
          jp.eventRows,
        ),
      ),
    ),
  ];
}

/** Reads every event after the cursor; answers how many arrived. */
async function drainEvents(jp: JobPage, id: string, signal: AbortSignal): Promise<number> {
  let received = 0;
  for (;;) {
    const page = await get<ListPage<JobEvent>>(
      `/v1/preview/training-jobs/${id}/events?limit=100${jp.cursor ? `&after=${jp.cursor}` : ''}`,
      signal,
    );
    for (const event of page.data) jp.events.push(event);
    received += page.data.length;
    if (page.data.length > 0) jp.cursor = page.last_id;
    if (!page.has_more) return received;
  }
}

/** Follow: drain new events, re-read the job, until it is terminal and nothing new arrives. */
async function follow(jp: JobPage, id: string, signal: AbortSignal): Promise<void> {
  while (!signal.aborted) {
    try {
      const received = await drainEvents(jp, id, signal);
      const wasTerminal = TERMINAL_STATUSES.includes(jp.job.status);
      if (received > 0 || !wasTerminal) jp.job = await get<Job>(`/v1/preview/training-jobs/${id}`, signal);
      render(jp);
      if (wasTerminal && received === 0) return;
    } catch (error) {
      if (signal.aborted) return;
      replace(jp.outcome, errorBox(error));
    }
    await sleep(POLL_MS, signal);
  }
}

export async function renderJob({ params, main, signal }: RouteContext) {
  main.append(spinner('Loading job…'));
  const id = params.id;
  let job: Job;
  try {
    job = await get<Job>(`/v1/preview/training-jobs/${id}`, signal);
  } catch (error) {
    if (!signal.aborted) main.replaceChildren(errorBox(error), h('p', h('a', { href: href('/jobs') }, 'Back to jobs')));
    return;
  }
  document.title = `Job ${shortId(job.id)} · agent-trainer`;
  const jp = createJobPage(job);
  get<Model>(`/v1/preview/models/${job.model_id}`, signal)
    .then((model) =>
      replace(
        jp.modelSlot,
        h('a', { href: href(`/models/${model.id}`) }, `${model.entity} / ${model.project} / ${model.name}`),
      ),
    )
    .catch(() => {});
  jp.cancelButton.addEventListener('click', () => void cancelJob(jp));
  replace(main, layout(jp, signal));
  render(jp);
  void follow(jp, id, signal);
}
