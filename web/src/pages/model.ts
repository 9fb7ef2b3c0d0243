/**
 * One model: its numbers at a glance, metric charts per step (pick metrics; reward with its std band),
 * the checkpoints table (delete with confirmation) and its recent jobs.
 */
import { get, getAll, isActive, query, request, type Checkpoint, type JobListItem, type ListPage, type MetricRow, type ModelSummary } from '../api.ts';
import { badge, confirmDialog, emptyState, errorBox, h, replace, spinner, toast } from '../dom.ts';
import { absoluteTime, duration, metricLabel, num, relativeTime, shortId } from '../format.ts';
import { metricTable } from '../metrics.ts';
import { loadRunMetrics, metricsSection, type MetricsState } from './model-metrics.ts';
import { href, replaceQuery, type RouteContext } from '../router.ts';

const CHECKPOINT_PAGE = 100;
const CHECKPOINT_COLUMNS = ['reward', 'val/reward', 'loss', 'grad_norm', 'entropy', 'tokens_per_second'];
const REFRESH_MS = 2000;
/** Without a running job, look for new jobs every this many ticks. */
const IDLE_TICKS = 5;

export function modelHeader(model: ModelSummary, current: 'overview' | 'trajectories' | 'groups'): HTMLElement {
  const tab = (label: string, target: string, name: string) =>
    h('a', { href: target, class: 'tab', 'aria-current': current === name ? 'page' : undefined }, label);
  return h(
    'div',
    { class: 'page-head' },
    h('nav', { class: 'breadcrumb', 'aria-label': 'Breadcrumb' }, h('a', { href: href('/') }, 'Models'), h('span', { 'aria-hidden': 'true' }, ' / '), `${model.entity} / ${model.project}`),
    h('div', { class: 'title-row' }, h('h1', model.name), h('a', { href: href('/playground', { model: model.id }), class: 'btn btn-primary' }, 'Chat with it')),
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

function statCards(model: ModelSummary): HTMLElement {
  const card = (label: string, value: HTMLElement | string, hint?: string) => h('div', { class: 'stat' }, h('div', { class: 'stat-label' }, label), h('div', { class: 'stat-value' }, value), hint ? h('div', { class: 'stat-hint' }, hint) : null);
  const reward = (split: string) => {
    const point = model.rewards[split];
    return point ? card(`${split} reward`, num(point.value), `step ${point.step}${point.std_dev !== null ? ` · σ ${num(point.std_dev, 3)}` : ''}`) : null;
  };
  const otherSplits = Object.keys(model.rewards).filter((split) => split !== 'train');
  return h(
    'div',
    { class: 'stats' },
    card('Latest step', String(model.latest_step ?? '—')),
    card('Checkpoints', String(model.checkpoint_count)),
    reward('train') ?? card('train reward', '—', 'no training yet'),
    otherSplits.map(reward),
    card('Last job', model.last_job ? h('a', { href: href(`/jobs/${model.last_job.id}`) }, badge(model.last_job.status)) : '—'),
  );
}

function checkpointsSection(model: ModelSummary, signal: AbortSignal, onDeleted: () => void): { element: HTMLElement; reload(): void } {
  const checkpoints: Checkpoint[] = [];
  const selected = new Set<number>();
  const body = h('div', { class: 'table-wrap' }, spinner('Loading checkpoints…'));
  const more = h('button', { class: 'btn', type: 'button', hidden: true }, 'Load more checkpoints');
  const deleteButton = h('button', { class: 'btn btn-danger', type: 'button', disabled: true }, 'Delete selected');
  const count = h('span', { class: 'count' });
  let after: string | undefined;

  const refreshSelection = () => {
    deleteButton.disabled = selected.size === 0;
    deleteButton.textContent = selected.size === 0 ? 'Delete selected' : `Delete ${selected.size} selected`;
  };

  const render = () => {
    if (checkpoints.length === 0) {
      replace(body, emptyState('No checkpoints', h('p', 'Every checkpoint of this model was deleted; training continues from the no-op adapter.')));
      return;
    }
    const keys = new Set(checkpoints.flatMap((checkpoint) => Object.keys(checkpoint.metrics)));
    const columns = CHECKPOINT_COLUMNS.filter((key) => keys.has(key));
    const all = h('input', { type: 'checkbox', 'aria-label': 'Select all listed checkpoints', checked: selected.size > 0 && selected.size === checkpoints.length });
    all.addEventListener('change', () => {
      for (const checkpoint of checkpoints) {
        if (all.checked) selected.add(checkpoint.step);
        else selected.delete(checkpoint.step);
      }
      render();
    });
    replace(
      body,
      h(
        'table',
        { class: 'table checkpoints' },
        h(
          'thead',
          h(
            'tr',
            h('th', { scope: 'col', class: 'select' }, all),
            h('th', { scope: 'col', class: 'num' }, 'Step'),
            h('th', { scope: 'col' }, 'Created'),
            columns.map((key) => h('th', { scope: 'col', class: 'num' }, key.includes('/') ? key : metricLabel(key))),
            h('th', { scope: 'col' }, 'All metrics'),
            h('th', { scope: 'col' }, h('span', { class: 'sr-only' }, 'Actions')),
          ),
        ),
        h(
          'tbody',
          checkpoints.map((checkpoint) => {
            const box = h('input', { type: 'checkbox', 'aria-label': `Select step ${checkpoint.step}`, checked: selected.has(checkpoint.step) });
            box.addEventListener('change', () => {
              if (box.checked) selected.add(checkpoint.step);
              else selected.delete(checkpoint.step);
              refreshSelection();
            });
            const entries = Object.entries(checkpoint.metrics).sort(([a], [b]) => a.localeCompare(b));
            return h(
              'tr',
              { 'data-step': checkpoint.step },
              h('td', { class: 'select' }, box),
              h('th', { scope: 'row', class: 'num' }, String(checkpoint.step)),
              h('td', { title: absoluteTime(checkpoint.created_at) }, relativeTime(checkpoint.created_at)),
              columns.map((key) => h('td', { class: 'num' }, num(checkpoint.metrics[key]))),
              h(
                'td',
                entries.length === 0
                  ? h('span', { class: 'muted' }, 'none')
                  : h(
                      'details',
                      { class: 'metrics-details' },
                      h('summary', `${entries.length} metrics`),
                      h('dl', { class: 'kv' }, entries.map(([key, value]) => [h('dt', key), h('dd', typeof value === 'number' ? num(value) : JSON.stringify(value))])),
                    ),
              ),
              h('td', { class: 'actions' }, h('a', { class: 'btn btn-small', href: href('/playground', { model: model.id, step: checkpoint.step }) }, 'Chat')),
            );
          }),
        ),
      ),
    );
    refreshSelection();
  };

  const load = async (reset = false) => {
    if (reset) {
      checkpoints.length = 0;
      after = undefined;
    }
    try {
      const page = await get<ListPage<Checkpoint>>(`/v1/preview/models/${model.id}/checkpoints${query({ order: 'desc', limit: CHECKPOINT_PAGE, after })}`, signal);
      checkpoints.push(...page.data);
      after = page.last_id || after;
      more.hidden = !page.has_more;
      count.textContent = `${model.checkpoint_count} total`;
      render();
    } catch (error) {
      if (!signal.aborted) replace(body, errorBox(error));
    }
  };

  deleteButton.addEventListener('click', async () => {
    const steps = [...selected].sort((a, b) => a - b);
    const confirmed = await confirmDialog({
      title: steps.length === 1 ? `Delete checkpoint step ${steps[0]}?` : `Delete ${steps.length} checkpoints?`,
      body: [
        h('p', steps.length === 1 ? `Step ${steps[0]} and its adapter files will be removed. This cannot be undone.` : `Steps ${steps.join(', ')} and their adapter files will be removed. This cannot be undone.`),
        h('p', { class: 'muted' }, 'Training continues from the highest remaining step. Their metrics stay in the run history.'),
      ],
      confirm: steps.length === 1 ? 'Delete checkpoint' : `Delete ${steps.length} checkpoints`,
      danger: true,
    });
    if (!confirmed) return;
    try {
      const result = await request<{ deleted_count: number; not_found_steps: number[] }>('DELETE', `/v1/preview/models/${model.id}/checkpoints`, { steps });
      toast(`Deleted ${result.deleted_count} checkpoint${result.deleted_count === 1 ? '' : 's'}`);
      selected.clear();
      await load(true);
      onDeleted();
    } catch (error) {
      toast(error instanceof Error ? error.message : String(error), 'error');
    }
  });
  more.addEventListener('click', () => void load());
  void load();

  return {
    element: h(
      'section',
      { class: 'card', 'aria-labelledby': 'checkpoints-title' },
      h('div', { class: 'section-head' }, h('h2', { id: 'checkpoints-title' }, 'Checkpoints', count), deleteButton),
      body,
      more,
    ),
    reload() {
      // A reload keeps what the user is doing: never under a selection.
      if (selected.size === 0) void load(true);
    },
  };
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
        const done = job.status === 'COMPLETED' && total !== null ? total : Math.min(job.completed_steps, total ?? job.completed_steps);
        return h(
          'tr',
          { 'data-job': job.id, 'data-status': job.status },
          h('td', badge(job.status)),
          h('th', { scope: 'row' }, h('a', { href: href(`/jobs/${job.id}`), class: 'mono' }, `${job.type.toUpperCase()} ${shortId(job.id)}`)),
          options.showModel ? h('td', h('a', { href: href(`/models/${job.model.id}`) }, `${job.model.project} / ${job.model.name}`)) : null,
          h(
            'td',
            total
              ? h('div', { class: 'mini-progress', title: `${done} of ${total} gradient steps` }, h('progress', { max: total, value: done, 'aria-label': `${done} of ${total} gradient steps` }), h('span', { class: 'small muted' }, `${done}/${total}`))
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

export async function renderModel({ params, query: search, main, signal }: RouteContext) {
  main.append(spinner('Loading model…'));
  const id = params.id;
  const list = (name: string) => (search.get(name) ?? '').split(',').filter(Boolean);
  const state: MetricsState = { metrics: list('metrics'), compare: list('compare'), smoothing: Math.min(0.99, Math.max(0, Number(search.get('smooth')) || 0)), xMode: search.get('x') === 'time' ? 'time' : 'step' };
  const loadMetrics = () => loadRunMetrics(id, signal);
  const loadJobs = () => get<ListPage<JobListItem>>(`/v1/dashboard/jobs${query({ model_id: id, limit: 5 })}`, signal);
  let model: ModelSummary;
  let rows: MetricRow[];
  let jobs: ListPage<JobListItem>;
  let others: ModelSummary[];
  try {
    [model, rows, jobs, others] = await Promise.all([get<ModelSummary>(`/v1/dashboard/models/${id}`, signal), loadMetrics(), loadJobs(), getAll<ModelSummary>('/v1/dashboard/models', { limit: 100 }, signal)]);
  } catch (error) {
    if (signal.aborted) return;
    main.replaceChildren(errorBox(error), h('p', h('a', { href: href('/') }, 'Back to models')));
    return;
  }
  document.title = `${model.name} · agent-trainer`;
  const stats = h('div', statCards(model));
  const metrics = metricsSection(model, metricTable(rows), others, state, signal, () =>
    replaceQuery({ metrics: state.metrics.join(','), compare: state.compare.join(',') || undefined, smooth: state.smoothing || undefined, x: state.xMode === 'time' ? 'time' : undefined }),
  );
  const jobsBody = h('div', { class: 'table-wrap' });
  const renderJobs = (page: ListPage<JobListItem>) =>
    replace(jobsBody, page.data.length === 0 ? emptyState('No jobs yet', h('p', 'Submit one with POST /v1/preview/training-jobs.')) : jobsTable(page.data, { showModel: false }));
  renderJobs(jobs);

  const refresh = async () => {
    const [nextModel, nextRows, nextJobs] = await Promise.all([get<ModelSummary>(`/v1/dashboard/models/${id}`, signal), loadMetrics(), loadJobs()]);
    model = nextModel;
    replace(stats, statCards(model));
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
      h('div', { class: 'section-head' }, h('h2', { id: 'recent-jobs-title' }, 'Recent jobs'), h('a', { href: href('/jobs', { model: model.id }) }, 'All jobs of this model →')),
      jobsBody,
    ),
  );

  // While a job of this model runs, keep the numbers, curves and checkpoints current; otherwise look for
  // new jobs now and then.
  let active = jobs.data.some((job) => isActive(job.status));
  let ticks = 0;
  let busy = false;
  const timer = setInterval(async () => {
    ticks += 1;
    if (busy || signal.aborted || (!active && ticks % IDLE_TICKS !== 0)) return;
    busy = true;
    try {
      const wasActive = active;
      const next = active ? await refresh() : await loadJobs();
      active = next.data.some((job) => isActive(job.status));
      if (!wasActive && active) renderJobs(next);
      if (wasActive && !active) {
        await refresh();
        checkpoints.reload();
      }
    } catch {
      // The next tick tries again; a lasting failure shows on the next navigation.
    } finally {
      busy = false;
    }
  }, REFRESH_MS);
  return () => clearInterval(timer);
}
