/**
 * Trajectories of a model by split and step: a cursor-paginated list (each page an index seek, so it stays
 * fast with 100 000 stored) beside the selected trajectory. ↑/↓ move through the list.
 */
import { get, query, type ListPage, type ModelSummary, type TrajectoryDetail, type TrajectorySteps, type TrajectorySummary } from '../api.ts';
import { emptyState, errorBox, field, h, replace, spinner } from '../dom.ts';
import { num } from '../format.ts';
import { replaceQuery, type RouteContext } from '../router.ts';
import { trajectoryView } from '../trajectory-view.ts';
import { advantages } from './groups.ts';
import { modelHeader } from './model.ts';

const PAGE_SIZE = 50;

export async function renderTrajectories({ params, query: search, main, signal }: RouteContext) {
  main.append(spinner('Loading trajectories…'));
  const id = params.id;
  let model: ModelSummary;
  let index: TrajectorySteps;
  try {
    [model, index] = await Promise.all([get<ModelSummary>(`/v1/dashboard/models/${id}`, signal), get<TrajectorySteps>(`/v1/dashboard/models/${id}/trajectory-steps`, signal)]);
  } catch (error) {
    if (!signal.aborted) main.replaceChildren(errorBox(error));
    return;
  }
  document.title = `Trajectories · ${model.name} · agent-trainer`;
  const head = modelHeader(model, 'trajectories');
  if (index.splits.length === 0) {
    main.replaceChildren(
      head,
      h('section', { class: 'card' }, emptyState('No trajectories yet', h('p', 'Trained trajectories are kept per step (split "train"); logged ones under their split (POST /v1/preview/models/{id}/log).'))),
    );
    return;
  }

  const state = {
    split: search.get('split') ?? (index.splits.find((entry) => entry.split === 'train') ?? index.splits[0]).split,
    step: search.has('step') ? Number(search.get('step')) : undefined as number | undefined,
    after: search.get('after') ?? undefined,
    selected: search.get('t') ?? undefined,
  };
  const stepsOf = (split: string) => index.splits.find((entry) => entry.split === split)?.steps ?? [];
  if (!index.splits.some((entry) => entry.split === state.split)) state.split = index.splits[0].split;
  if (state.step === undefined || !stepsOf(state.split).some((entry) => entry.step === state.step)) state.step = stepsOf(state.split).at(-1)?.step;
  const previous: (string | undefined)[] = [];

  const splitSelect = h(
    'select',
    { id: 'split-select' },
    index.splits.map((entry) => h('option', { value: entry.split, selected: entry.split === state.split }, `${entry.split} (${entry.count.toLocaleString('en-US')})`)),
  );
  const stepSelect = h('select', { id: 'step-select' });
  const fillSteps = () => {
    replace(
      stepSelect,
      [...stepsOf(state.split)].reverse().map((entry) => h('option', { value: String(entry.step), selected: entry.step === state.step }, `step ${entry.step} (${entry.count.toLocaleString('en-US')})`)),
    );
  };
  fillSteps();
  const prev = h('button', { class: 'btn', type: 'button' }, '← Previous');
  const next = h('button', { class: 'btn', type: 'button' }, 'Next →');
  const pageInfo = h('span', { class: 'muted page-info', 'aria-live': 'polite' });
  const list = h('ol', { class: 'trajectory-list', 'aria-label': 'Trajectories' });
  const detail = h('div', { class: 'trajectory-detail card', tabindex: '-1' });
  let page: ListPage<TrajectorySummary> | null = null;
  let detailController: AbortController | null = null;

  const syncUrl = () => replaceQuery({ split: state.split, step: state.step, after: state.after, t: state.selected });

  // The advantage the trainer gives a trajectory, from its group's rewards on this page.
  const advantageOf = (trajectoryId: string): number | null => {
    const item = page?.data.find((entry) => entry.id === trajectoryId);
    if (!item || !page) return null;
    const group = page.data.filter((entry) => entry.step === item.step && entry.group_index === item.group_index);
    return advantages(group.map((entry) => entry.reward))[group.indexOf(item)];
  };

  const showDetail = async (trajectoryId: string) => {
    state.selected = trajectoryId;
    syncUrl();
    for (const button of list.querySelectorAll<HTMLButtonElement>('button[data-id]')) button.setAttribute('aria-current', String(button.dataset.id === trajectoryId));
    detailController?.abort();
    const controller = new AbortController();
    detailController = controller;
    signal.addEventListener('abort', () => controller.abort());
    replace(detail, spinner('Loading trajectory…'));
    try {
      const trajectory = await get<TrajectoryDetail>(`/v1/dashboard/models/${id}/trajectories/${trajectoryId}`, controller.signal);
      replace(detail, trajectoryView(trajectory, advantageOf(trajectory.id)));
    } catch (error) {
      if (!controller.signal.aborted) replace(detail, errorBox(error));
    }
  };

  const renderList = () => {
    if (!page || page.data.length === 0) {
      replace(list, h('li', { class: 'muted' }, 'No trajectories on this page.'));
      return;
    }
    replace(
      list,
      page.data.map((item) =>
        h(
          'li',
          h(
            'button',
            {
              type: 'button',
              class: `trajectory-item group-${item.group_index % 6}`,
              'data-id': item.id,
              'aria-current': String(item.id === state.selected),
              onclick: () => void showDetail(item.id),
            },
            h(
              'span',
              { class: 'item-head' },
              h('span', { class: 'mono' }, `G${item.group_index} · T${item.trajectory_index}`),
              h('span', { class: 'reward-chip', title: 'Reward' }, item.reward === null ? '—' : num(item.reward, 3)),
            ),
            h('span', { class: 'item-preview' }, item.prompt_preview || h('span', { class: 'muted' }, '(no user message)')),
            h('span', { class: 'item-response' }, item.response_preview ? `→ ${item.response_preview}` : ''),
            h(
              'span',
              { class: 'item-tags' },
              `${item.num_messages} msgs`,
              item.num_tool_calls ? h('span', { class: 'pill pill-tool' }, `${item.num_tool_calls} tool call${item.num_tool_calls === 1 ? '' : 's'}`) : null,
              item.has_reasoning ? h('span', { class: 'pill' }, 'reasoning') : null,
            ),
          ),
        ),
      ),
    );
  };

  const load = async () => {
    replace(list, h('li', spinner()));
    try {
      page = await get<ListPage<TrajectorySummary>>(`/v1/dashboard/models/${id}/trajectories${query({ split: state.split, step: state.step, after: state.after, limit: PAGE_SIZE })}`, signal);
    } catch (error) {
      if (!signal.aborted) replace(list, h('li', errorBox(error)));
      return;
    }
    const total = stepsOf(state.split).find((entry) => entry.step === state.step)?.count ?? 0;
    const start = previous.length * PAGE_SIZE + 1;
    pageInfo.textContent = page.data.length === 0 ? 'No trajectories' : `${state.after && previous.length === 0 ? 'From' : ''} ${start.toLocaleString('en-US')}–${(start + page.data.length - 1).toLocaleString('en-US')} of ${total.toLocaleString('en-US')}`.trim();
    prev.disabled = !state.after;
    next.disabled = !page.has_more;
    renderList();
    syncUrl();
    const selected = state.selected && page.data.some((item) => item.id === state.selected) ? state.selected : page.data[0]?.id;
    if (selected) await showDetail(selected);
    else replace(detail, emptyState('Nothing selected'));
  };

  splitSelect.addEventListener('change', () => {
    state.split = splitSelect.value;
    state.step = stepsOf(state.split).at(-1)?.step;
    state.after = undefined;
    state.selected = undefined;
    previous.length = 0;
    fillSteps();
    void load();
  });
  stepSelect.addEventListener('change', () => {
    state.step = Number(stepSelect.value);
    state.after = undefined;
    state.selected = undefined;
    previous.length = 0;
    void load();
  });
  next.addEventListener('click', () => {
    if (!page?.has_more) return;
    previous.push(state.after);
    state.after = page.last_id;
    state.selected = undefined;
    void load();
  });
  prev.addEventListener('click', () => {
    state.after = previous.pop();
    state.selected = undefined;
    void load();
  });
  list.addEventListener('keydown', (event) => {
    if (event.key !== 'ArrowDown' && event.key !== 'ArrowUp') return;
    const buttons = [...list.querySelectorAll<HTMLButtonElement>('button[data-id]')];
    const at = buttons.indexOf(document.activeElement as HTMLButtonElement);
    const target = buttons[Math.max(0, Math.min(buttons.length - 1, at + (event.key === 'ArrowDown' ? 1 : -1)))];
    if (!target) return;
    event.preventDefault();
    target.focus();
    void showDetail(target.dataset.id!);
  });

  main.replaceChildren(
    head,
    h(
      'div',
      { class: 'toolbar card' },
      field('Split', splitSelect),
      field('Step', stepSelect),
      h('div', { class: 'pager' }, pageInfo, prev, next),
    ),
    h('div', { class: 'browser' }, h('nav', { class: 'card list-pane', 'aria-label': 'Trajectory list' }, list), detail),
  );
  await load();
}
