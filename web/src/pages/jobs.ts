/** Training jobs of every model the key can see (or of one model), newest first, refreshed while any runs. */
import { get, query, type JobListItem, type ListPage, type Model } from '../api.ts';
import { emptyState, errorBox, field, h, replace, spinner } from '../dom.ts';
import { href, navigate, type RouteContext } from '../router.ts';
import { jobsTable } from './model.ts';

const PAGE_SIZE = 50;
const REFRESH_MS = 2000;
const FILTERS: Record<string, string | undefined> = { all: undefined, active: 'QUEUED,RUNNING', completed: 'COMPLETED', failed: 'FAILED', cancelled: 'CANCELLED' };

export async function renderJobs({ query: search, main, signal }: RouteContext) {
  document.title = 'Jobs · agent-trainer';
  const modelId = search.get('model') ?? undefined;
  const filter = search.get('status') ?? 'all';
  const title = h('h1', 'Training jobs');
  const subtitle = h('p', { class: 'subtitle' });
  const statusSelect = h(
    'select',
    { id: 'status-filter' },
    Object.keys(FILTERS).map((name) => h('option', { value: name, selected: name === filter }, name[0].toUpperCase() + name.slice(1))),
  );
  statusSelect.addEventListener('change', () => navigate('/jobs', { model: modelId, status: statusSelect.value === 'all' ? undefined : statusSelect.value }));
  const body = h('div', { class: 'table-wrap' }, spinner('Loading jobs…'));
  const more = h('button', { class: 'btn', type: 'button', hidden: true }, 'Load more jobs');
  main.append(
    h('div', { class: 'page-head' }, h('div', { class: 'title-row' }, title, h('div', { class: 'toolbar-inline' }, field('Show', statusSelect))), subtitle),
    h('section', { class: 'card' }, body, more),
  );
  if (modelId) {
    get<Model>(`/v1/preview/models/${modelId}`, signal)
      .then((model) => replace(subtitle, 'Jobs of ', h('a', { href: href(`/models/${model.id}`) }, `${model.entity} / ${model.project} / ${model.name}`), ' · ', h('a', { href: href('/jobs') }, 'show all models')))
      .catch(() => {});
  }

  const jobs: JobListItem[] = [];
  let after: string | undefined;
  const params = () => ({ model_id: modelId, status: FILTERS[filter], limit: PAGE_SIZE });
  const render = () => {
    if (jobs.length === 0) replace(body, emptyState('No training jobs', h('p', 'Jobs appear here when they are submitted (POST /v1/preview/training-jobs or /v1/preview/sft-training-jobs).')));
    else replace(body, jobsTable(jobs, { showModel: !modelId }));
  };
  const load = async () => {
    try {
      const page = await get<ListPage<JobListItem>>(`/v1/dashboard/jobs${query({ ...params(), after })}`, signal);
      jobs.push(...page.data);
      after = page.last_id || after;
      more.hidden = !page.has_more;
      render();
    } catch (error) {
      if (!signal.aborted) replace(body, errorBox(error));
    }
  };
  more.addEventListener('click', () => void load());
  await load();

  // Keep the first page current: new jobs appear at the top, running ones advance.
  let busy = false;
  const timer = setInterval(async () => {
    if (busy || signal.aborted) return;
    busy = true;
    try {
      const first = await get<ListPage<JobListItem>>(`/v1/dashboard/jobs${query(params())}`, signal);
      const fresh = new Set(first.data.map((job) => job.id));
      const oldest = first.data.at(-1)?.id ?? '';
      // The fresh first page, then whatever "Load more" brought that lies beyond it.
      const merged = [...first.data, ...jobs.filter((job) => !fresh.has(job.id) && job.id < oldest)];
      const changed =
        merged.length !== jobs.length ||
        merged.some((job, index) => job.id !== jobs[index].id || job.status !== jobs[index].status || job.completed_steps !== jobs[index].completed_steps);
      if (changed) {
        jobs.splice(0, jobs.length, ...merged);
        render();
      }
    } catch {
      // Try again on the next tick.
    } finally {
      busy = false;
    }
  }, REFRESH_MS);
  return () => clearInterval(timer);
}
