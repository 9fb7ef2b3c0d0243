/**
 * One model: its numbers at a glance, metric charts per step (pick metrics; reward with its std band),
 * the checkpoints table (delete with confirmation) and its recent jobs.
 */
import {
  get,
  getAll,
  isActive,
  type JobListItem,
  type ListPage,
  type MetricRow,
  type ModelSummary,
  query,
  type TrajectorySteps,
} from '../api.ts';
import { badge, emptyState, errorBox, h, replace, spinner } from '../dom.ts';
import { absoluteTime, duration, num, relativeTime, shortId } from '../format.ts';
import { metricTable } from '../metrics.ts';
import { href, type RouteContext, replaceQuery } from '../router.ts';
import { checkpointsSection } from './model-checkpoints.ts';
import { loadRunMetrics, type MetricsState, metricsSection } from './model-metrics.ts';

const REFRESH_MS = 2000;
/** Without a running job, look for new jobs every this many ticks. */
const IDLE_TICKS = 5;

export function modelHeader(model: ModelSummary, current: 'overview' | 'trajectories' | 'groups'): HTMLElement {
  const tab = (label: string, target: string, name: string) =>
    h('a', { href: target, class: 'tab', 'aria-current': current === name ? 'page' : undefined }, label);
  return h(
    'div',
    { class: 'page-head' },
    h(
      'nav',
      { class: 'breadcrumb', 'aria-label': 'Breadcrumb' },
      h('a', { href: href('/') }, 'Models'),
      h('span', { 'aria-hidden': 'true' }, ' / '),
      `${model.entity} / ${model.project}`,
    ),
    h(
      'div',
      { class: 'title-row' },
      h('h1', model.name),
      h('a', { href: href('/playground', { model: model.id }), class: 'btn btn-primary' }, 'Chat with it'),
    ),
    h(
      'p',
      { class: 'subtitle' },
      'Base model ',
      h('code', model.base_model),
      ' · serve as ',
      h('code', { class: 'copyable', title: 'Model name for chat completions' }, model.inference_name),
      ' · created ',
      h('span', { title: absoluteTime(model.created_at) }, relativeTime(model.created_at)),
    ),
    h(
      'nav',
      { class: 'tabs', 'aria-label': 'Model sections' },
      tab('Overview', href(`/models/${model.id}`), 'overview'),
      tab('Trajectories', href(`/models/${model.id}/trajectories`), 'trajectories'),
      tab('Groups', href(`/models/${model.id}/groups`), 'groups'),
      tab('Jobs', href('/jobs', { model: model.id }), 'jobs'),
    ),
  );
}

/**
 * The start of a model's trajectory pages (trajectories, groups): a spinner until the model and its trajectory steps
 * have loaded, then the page's title, and its header to show; null when loading failed (the error shown) or the page
 * was left meanwhile.
 */
export async function loadTrajectoryPage(
  id: string,
  page: 'trajectories' | 'groups',
  main: HTMLElement,
  signal: AbortSignal,
): Promise<{ index: TrajectorySteps; head: HTMLElement } | null> {
  main.append(spinner(`Loading ${page}…`));
  let model: ModelSummary;
  let index: TrajectorySteps;
  try {
    [model, index] = await Promise.all([
      get<ModelSummary>(`/v1/dashboard/models/${id}`, signal),
      get<TrajectorySteps>(`/v1/dashboard/models/${id}/trajectory-steps`, signal),
    ]);
  } catch (error) {
    if (!signal.aborted) main.replaceChildren(errorBox(error));
    return null;
  }
  document.title = `${page === 'groups' ? 'Groups' : 'Trajectories'} · ${model.name} · agent-trainer`;
  return { index, head: modelHeader(model, page) };
}

function statCards(model: ModelSummary): HTMLElement {
  const card = (label: string, value: HTMLElement | string, hint?: string) =>
    h(
      'div',
      { class: 'stat' },
      h('div', { class: 'stat-label' }, label),
      h('div', { class: 'stat-value' }, value),
      hint ? h('div', { class: 'stat-hint' }, hint) : null,
    );
  const reward = (split: string) => {
    const point = model.rewards[split];
    return point
      ? card(
          `${split} reward`,
          num(point.value),
          `step ${point.step}${point.std_dev !== null ? ` · σ ${num(point.std_dev, 3)}` : ''}`,
        )
      : null;
  };
  const otherSplits = Object.keys(model.rewards).filter((split) => split !== 'train');
  return h(
    'div',
    { class: 'stats' },
    card('Latest step', String(model.latest_step ?? '—')),
    card('Checkpoints', String(model.checkpoint_count)),
    reward('train') ?? card('train reward', '—', 'no training yet'),
    otherSplits.map(reward),
    card(
      'Last job',
      model.last_job ? h('a', { href: href(`/jobs/${model.last_job.id}`) }, badge(model.last_job.status)) : '—',
    ),
  );
}

export function jobsTable(jobs: JobListItem[], options: { showModel: boolean }): HTMLElement {
  return h(
    'table',
    { class: 'table jobs' },
    h(
      'thead',
      h(
        'tr',
        h('th', { scope: 'col' }, 'Status'),
        h('th', { scope: 'col' }, 'Job'),
        options.showModel ? h('th', { scope: 'col' }, 'Model') : null,
        h('th', { scope: 'col' }, 'Progress'),
        h('th', { scope: 'col', class: 'num' }, 'Reward'),
        h('th', { scope: 'col', class: 'num' }, 'Checkpoint'),
        h('th', { scope: 'col' }, 'Created'),
        h('th', { scope: 'col' }, 'Duration'),
      ),
    ),
    h(
      'tbody',
      jobs.map((job) => {
        const total = job.num_sequences;
        const done =
          job.status === 'COMPLETED' && total !== null
            ? total
            : Math.min(job.completed_steps, total ?? job.completed_steps);
        return h(
          'tr',
          { 'data-job': job.id, 'data-status': job.status },
          h('td', badge(job.status)),
          h(
            'th',
            { scope: 'row' },
            h('a', { href: href(`/jobs/${job.id}`), class: 'mono' }, `${job.type.toUpperCase()} ${shortId(job.id)}`),
          ),
          options.showModel
            ? h('td', h('a', { href: href(`/models/${job.model.id}`) }, `${job.model.project} / ${job.model.name}`))
            : null,
          h(
            'td',
            total
              ? h(
                  'div',
                  { class: 'mini-progress', title: `${done} of ${total} gradient steps` },
                  h('progress', { max: total, value: done, 'aria-label': `${done} of ${total} gradient steps` }),
                  h('span', { class: 'small muted' }, `${done}/${total}`),
                )
              : h('span', { class: 'muted' }, job.status === 'QUEUED' ? 'waiting' : '—'),
          ),
          h('td', { class: 'num' }, num(job.metrics.reward)),
          h('td', { class: 'num' }, job.checkpoint_step ?? '—'),
          h('td', { title: absoluteTime(job.created_at) }, relativeTime(job.created_at)),
          h('td', duration(job.started_at, job.finished_at)),
        );
      }),
    ),
  );
}

function metricsStateFrom(search: URLSearchParams): MetricsState {
  const list = (name: string) => (search.get(name) ?? '').split(',').filter(Boolean);
  return {
    metrics: list('metrics'),
    compare: list('compare'),
    smoothing: Math.min(0.99, Math.max(0, Number(search.get('smooth')) || 0)),
    xMode: search.get('x') === 'time' ? 'time' : 'step',
  };
}

/** What the page re-reads while it is open. */
interface LiveParts {
  /** Re-reads the summary, metrics and recent jobs and shows them; answers the jobs. */
  refresh(): Promise<ListPage<JobListItem>>;
  loadJobs(): Promise<ListPage<JobListItem>>;
  renderJobs(page: ListPage<JobListItem>): void;
  reloadCheckpoints(): void;
}

/**
 * While a job of this model runs, keep the numbers, curves and checkpoints current; otherwise look for
 * new jobs now and then. Answers the cleanup that stops it.
 */
function pollWhileActive(initiallyActive: boolean, signal: AbortSignal, live: LiveParts): () => void {
  let active = initiallyActive;
  let ticks = 0;
  let busy = false;
  const timer = setInterval(async () => {
    ticks += 1;
    if (busy || signal.aborted || (!active && ticks % IDLE_TICKS !== 0)) return;
    busy = true;
    try {
      const wasActive = active;
      const next = active ? await live.refresh() : await live.loadJobs();
      active = next.data.some((job) => isActive(job.status));
      if (!wasActive && active) live.renderJobs(next);
      if (wasActive && !active) {
        await live.refresh();
        live.reloadCheckpoints();
      }
    } catch {
      // The next tick tries again; a lasting failure shows on the next navigation.
    } finally {
      busy = false;
    }
  }, REFRESH_MS);
  return () => clearInterval(timer);
}

export async function renderModel({ params, query: search, main, signal }: RouteContext) {
  main.append(spinner('Loading model…'));
  const id = params.id;
  const state = metricsStateFrom(search);
  const loadMetrics = () => loadRunMetrics(id, signal);
  const loadJobs = () => get<ListPage<JobListItem>>(`/v1/dashboard/jobs${query({ model_id: id, limit: 5 })}`, signal);
  let model: ModelSummary;
  let rows: MetricRow[];
  let jobs: ListPage<JobListItem>;
  let others: ModelSummary[];
  try {
    [model, rows, jobs, others] = await Promise.all([
      get<ModelSummary>(`/v1/dashboard/models/${id}`, signal),
      loadMetrics(),
      loadJobs(),
      getAll<ModelSummary>('/v1/dashboard/models', { limit: 100 }, signal),
    ]);
  } catch (error) {
    if (signal.aborted) return;
    main.replaceChildren(errorBox(error), h('p', h('a', { href: href('/') }, 'Back to models')));
    return;
  }
  document.title = `${model.name} · agent-trainer`;
  const stats = h('div', statCards(model));
  const metrics = metricsSection(model, metricTable(rows), others, state, signal, () =>
    replaceQuery({
      metrics: state.metrics.join(','),
      compare: state.compare.join(',') || undefined,
      smooth: state.smoothing || undefined,
      x: state.xMode === 'time' ? 'time' : undefined,
    }),
  );
  const jobsBody = h('div', { class: 'table-wrap' });
  const renderJobs = (page: ListPage<JobListItem>) =>
    replace(
      jobsBody,
      page.data.length === 0
        ? emptyState('No jobs yet', h('p', 'Submit one with POST /v1/preview/training-jobs.'))
        : jobsTable(page.data, { showModel: false }),
    );
  renderJobs(jobs);

  const refresh = async () => {
    const [nextModel, nextRows, nextJobs] = await Promise.all([
      get<ModelSummary>(`/v1/dashboard/models/${id}`, signal),
      loadMetrics(),
      loadJobs(),
    ]);
    replace(stats, statCards(nextModel));
    metrics.update(metricTable(nextRows));
    renderJobs(nextJobs);
    return nextJobs;
  };
  const checkpoints = checkpointsSection(model, signal, () => void refresh().catch(() => {}));

  main.replaceChildren(
    modelHeader(model, 'overview'),
    stats,
    metrics.element,
    checkpoints.element,
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'recent-jobs-title' },
      h(
        'div',
        { class: 'section-head' },
        h('h2', { id: 'recent-jobs-title' }, 'Recent jobs'),
        h('a', { href: href('/jobs', { model: model.id }) }, 'All jobs of this model →'),
      ),
      jobsBody,
    ),
  );
  return pollWhileActive(
    jobs.data.some((job) => isActive(job.status)),
    signal,
    { refresh, loadJobs, renderJobs, reloadCheckpoints: () => checkpoints.reload() },
  );
}
