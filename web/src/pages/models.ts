/** The models of every entity the key may act for, grouped by entity and project. */
import { get, type ListPage, type ModelSummary, query } from '../api.ts';
import { badge, emptyState, errorBox, h, spinner } from '../dom.ts';
import { absoluteTime, num, relativeTime } from '../format.ts';
import { href, type RouteContext } from '../router.ts';

const PAGE_SIZE = 100;

/** The newest reward of each split (train first), with its spread and step. */
export function rewardCell(model: ModelSummary): HTMLElement {
  const splits = Object.keys(model.rewards).sort((a, b) =>
    a === 'train' ? -1 : b === 'train' ? 1 : a.localeCompare(b),
  );
  if (splits.length === 0) return h('span', { class: 'muted' }, '—');
  return h(
    'span',
    { class: 'reward-cell' },
    splits.slice(0, 3).map((split) => {
      const reward = model.rewards[split];
      return h(
        'span',
        { class: 'reward-line', 'data-split': split, title: `${split} reward at step ${reward.step}` },
        h('span', { class: `split-tag split-${split === 'train' ? 'train' : 'other'}` }, split),
        ' ',
        h('strong', num(reward.value)),
        reward.std_dev !== null ? h('span', { class: 'muted' }, ` ± ${num(reward.std_dev, 3)}`) : null,
        h('span', { class: 'muted small' }, ` @${reward.step}`),
      );
    }),
  );
}

function projectTable(models: ModelSummary[]): HTMLElement {
  return h(
    'table',
    { class: 'table models-table' },
    h(
      'thead',
      h(
        'tr',
        h('th', { scope: 'col', class: 'col-name' }, 'Model'),
        h('th', { scope: 'col', class: 'col-base' }, 'Base model'),
        h('th', { scope: 'col', class: 'num col-step' }, 'Latest step'),
        h('th', { scope: 'col', class: 'num col-count' }, 'Checkpoints'),
        h('th', { scope: 'col', class: 'col-reward' }, 'Last reward'),
        h('th', { scope: 'col', class: 'col-job' }, 'Last job'),
        h('th', { scope: 'col', class: 'col-created' }, 'Created'),
        h('th', { scope: 'col', class: 'col-actions' }, h('span', { class: 'sr-only' }, 'Actions')),
      ),
    ),
    h(
      'tbody',
      models.map((model) =>
        h(
          'tr',
          { 'data-model': model.name },
          h('th', { scope: 'row' }, h('a', { href: href(`/models/${model.id}`), class: 'model-link' }, model.name)),
          h('td', h('code', model.base_model)),
          h('td', { class: 'num' }, model.latest_step ?? '—'),
          h('td', { class: 'num' }, model.checkpoint_count),
          h('td', rewardCell(model)),
          h(
            'td',
            model.last_job
              ? h('a', { href: href(`/jobs/${model.last_job.id}`), class: 'badge-link' }, badge(model.last_job.status))
              : h('span', { class: 'muted' }, '—'),
          ),
          h('td', { title: absoluteTime(model.created_at) }, relativeTime(model.created_at)),
          h(
            'td',
            { class: 'actions' },
            h('a', { href: href('/playground', { model: model.id }), class: 'btn btn-small' }, 'Chat'),
          ),
        ),
      ),
    ),
  );
}

export async function renderModels({ main, signal }: RouteContext): Promise<void> {
  document.title = 'Models · agent-trainer';
  const list = h('div', { class: 'model-groups' }, spinner('Loading models…'));
  main.append(h('div', { class: 'page-head' }, h('h1', 'Models')), list);
  const models: ModelSummary[] = [];
  const more = h('button', { class: 'btn', type: 'button', hidden: true }, 'Load more models');
  let after: string | undefined;

  const render = () => {
    list.replaceChildren();
    if (models.length === 0) {
      list.append(
        emptyState(
          'No models yet',
          h('p', 'Create one through the API, then sample with chat completions and train it:'),
          h(
            'pre',
            { class: 'code' },
            `curl -s $URL/v1/preview/models -H "Authorization: Bearer $KEY" \\\n  -H 'content-type: application/json' \\\n  -d '{"project": "demo", "name": "agent-1", "base_model": "builtin/tiny-chat"}'`,
          ),
        ),
      );
      return;
    }
    const groups = new Map<string, ModelSummary[]>();
    for (const model of models) {
      const key = `${model.entity}/${model.project}`;
      groups.set(key, [...(groups.get(key) ?? []), model]);
    }
    for (const [key, members] of groups) {
      const [entity, project] = key.split('/');
      list.append(
        h(
          'section',
          { class: 'card project', 'aria-label': `Project ${project}` },
          h(
            'h2',
            { class: 'project-title' },
            h('span', { class: 'muted' }, `${entity} /`),
            ' ',
            project,
            h('span', { class: 'count' }, `${members.length} model${members.length === 1 ? '' : 's'}`),
          ),
          h('div', { class: 'table-wrap' }, projectTable(members)),
        ),
      );
    }
    list.append(more);
  };

  const load = async () => {
    try {
      const page = await get<ListPage<ModelSummary>>(
        `/v1/dashboard/models${query({ limit: PAGE_SIZE, after })}`,
        signal,
      );
      for (const model of page.data) models.push(model);
      after = page.last_id || after;
      more.hidden = !page.has_more;
      render();
    } catch (error) {
      if (!signal.aborted) list.replaceChildren(errorBox(error));
    }
  };
  more.addEventListener('click', () => void load());
  await load();
}
