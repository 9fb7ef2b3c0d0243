/** Training jobs of every model the key can see (or of one model), newest first, refreshed while any runs. */

import { ACTIVE_JOB_STATUSES, TERMINAL_JOB_STATUSES } from '../../../src/api/training-vocabulary.ts';
import { get, type JobListItem, type ListPage, type Model, query } from '../api.ts';
import { emptyState, errorBox, field, h, replace, spinner } from '../dom.ts';
import { href, navigate, type RouteContext } from '../router.ts';
import { jobsTable } from './model.ts';

const PAGE_SIZE = 50;
const REFRESH_MS = 2000;
const FILTERS: Record<string, string | undefined> = {
  all: undefined,
  active: ACTIVE_JOB_STATUSES.join(','),
  ...Object.fromEntries(TERMINAL_JOB_STATUSES.map((status) => [status.toLowerCase(), status])),
};

/** The listed jobs (first page, then whatever "Load more" brought) and the list's parts. */
interface JobsList {
  modelId: string | undefined;
  filter: string;
  signal: AbortSignal;
  jobs: JobListItem[];
  /** Cursor of the next page. */
  after: string | undefined;
  body: HTMLDivElement;
  more: HTMLButtonElement;
}

const listParams = (jl: JobsList) => ({ model_id: jl.modelId, status: FILTERS[jl.filter], limit: PAGE_SIZE });

function render(jl: JobsList): void {
  if (jl.jobs.length === 0)
    replace(
      jl.body,
      emptyState(
        'No training jobs',
        h(
          'p',
          'Jobs appear here when they are submitted (POST /v1/preview/training-jobs or /v1/preview/sft-training-jobs).',
        ),
      ),
    );
  else replace(jl.body, jobsTable(jl.jobs, { showModel: !jl.modelId }));
}

async function load(jl: JobsList): Promise<void> {
  try {
    const page = await get<ListPage<JobListItem>>(
      `/v1/dashboard/jobs${query({ ...listParams(jl), after: jl.after })}`,
      jl.signal,
    );
    for (const job of page.data) jl.jobs.push(job);
    jl.after = page.last_id || jl.after;
    jl.more.hidden = !page.has_more;
    render(jl);
  } catch (error) {
    if (!jl.signal.aborted) replace(jl.body, errorBox(error));
  }
}

/** The fresh first page, then whatever "Load more" brought that lies beyond it; null when nothing changed. */
function mergedFirstPage(jobs: JobListItem[], first: ListPage<JobListItem>): JobListItem[] | null {
  const fresh = new Set(first.data.map((job) => job.id));
  const oldest = first.data.at(-1)?.id ?? '';
  const merged = [...first.data, ...jobs.filter((job) => !fresh.has(job.id) && job.id < oldest)];
  const changed =
    merged.length !== jobs.length ||
    merged.some(
      (job, index) =>
        job.id !== jobs[index].id ||
        job.status !== jobs[index].status ||
        job.completed_steps !== jobs[index].completed_steps,
    );
  return changed ? merged : null;
}

/** Keep the first page current: new jobs appear at the top, running ones advance. Answers the cleanup. */
function keepCurrent(jl: JobsList): () => void {
  let busy = false;
  const timer = setInterval(async () => {
    if (busy || jl.signal.aborted) return;
    busy = true;
    try {
      const first = await get<ListPage<JobListItem>>(`/v1/dashboard/jobs${query(listParams(jl))}`, jl.signal);
      const merged = mergedFirstPage(jl.jobs, first);
      if (merged) {
        jl.jobs.length = 0;
        for (const job of merged) jl.jobs.push(job);
        render(jl);
      }
    } catch {
      // Try again on the next tick.
    } finally {
      busy = false;
    }
  }, REFRESH_MS);
  return () => clearInterval(timer);
}

function statusFilter(modelId: string | undefined, filter: string): HTMLSelectElement {
  const statusSelect = h(
    'select',
    { id: 'status-filter' },
    Object.keys(FILTERS).map((name) =>
      h('option', { value: name, selected: name === filter }, name[0].toUpperCase() + name.slice(1)),
    ),
  );
  statusSelect.addEventListener('change', () =>
    navigate('/jobs', { model: modelId, status: statusSelect.value === 'all' ? undefined : statusSelect.value }),
  );
  return statusSelect;
}

export async function renderJobs({ query: search, main, signal }: RouteContext) {
  document.title = 'Jobs · agent-trainer';
  const modelId = search.get('model') ?? undefined;
  const filter = search.get('status') ?? 'all';
  const subtitle = h('p', { class: 'subtitle' });
  const jl: JobsList = {
    modelId,
    filter,
    signal,
    jobs: [],
    after: undefined,
    body: h('div', { class: 'table-wrap' }, spinner('Loading jobs…')),
    more: h('button', { class: 'btn', type: 'button', hidden: true }, 'Load more jobs'),
  };
  main.append(
    h(
      'div',
      { class: 'page-head' },
      h(
        'div',
        { class: 'title-row' },
        h('h1', 'Training jobs'),
        h('div', { class: 'toolbar-inline' }, field('Show', statusFilter(modelId, filter))),
      ),
      subtitle,
    ),
    h('section', { class: 'card' }, jl.body, jl.more),
  );
  if (modelId) {
    get<Model>(`/v1/preview/models/${modelId}`, signal)
      .then((model) =>
        replace(
          subtitle,
          'Jobs of ',
          h('a', { href: href(`/models/${model.id}`) }, `${model.entity} / ${model.project} / ${model.name}`),
          ' · ',
          h('a', { href: href('/jobs') }, 'show all models'),
        ),
      )
      .catch(() => {});
  }
  jl.more.addEventListener('click', () => void load(jl));
  await load(jl);
  return keepCurrent(jl);
}
