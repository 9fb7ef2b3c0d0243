/**
 * Trajectories of a model by split and step: a cursor-paginated list (each page an index seek, so it stays
 * fast with 100 000 stored) beside the selected trajectory. ↑/↓ move through the list.
 */
import {
  get,
  type ListPage,
  query,
  type TrajectoryDetail,
  type TrajectorySteps,
  type TrajectorySummary,
} from '../api.ts';
import { emptyState, errorBox, field, h, replace, spinner } from '../dom.ts';
import { num } from '../format.ts';
import { type RouteContext, replaceQuery } from '../router.ts';
import { trajectoryView } from '../trajectory-view.ts';
import { advantages } from './groups.ts';
import { loadTrajectoryPage } from './model.ts';

const PAGE_SIZE = 50;

/** The browser's selection, controls and current page; one per visit. */
interface Browser {
  modelId: string;
  index: TrajectorySteps;
  signal: AbortSignal;
  state: { split: string; step: number | undefined; after: string | undefined; selected: string | undefined };
  /** The `after` cursors of the pages before this one, for ← Previous. */
  previous: (string | undefined)[];
  splitSelect: HTMLSelectElement;
  stepSelect: HTMLSelectElement;
  prev: HTMLButtonElement;
  next: HTMLButtonElement;
  pageInfo: HTMLSpanElement;
  list: HTMLOListElement;
  detail: HTMLDivElement;
  page: ListPage<TrajectorySummary> | null;
  detailController: AbortController | null;
}

function stepsOf(tb: Pick<Browser, 'index'>, split: string) {
  return tb.index.splits.find((entry) => entry.split === split)?.steps ?? [];
}

/** Split, step, page and selection from the URL, each falling back to what exists (the newest step of `train`). */
function initialState(index: TrajectorySteps, search: URLSearchParams): Browser['state'] {
  const state = {
    split: search.get('split') ?? (index.splits.find((entry) => entry.split === 'train') ?? index.splits[0]).split,
    step: search.has('step') ? Number(search.get('step')) : (undefined as number | undefined),
    after: search.get('after') ?? undefined,
    selected: search.get('t') ?? undefined,
  };
  if (!index.splits.some((entry) => entry.split === state.split)) state.split = index.splits[0].split;
  if (state.step === undefined || !stepsOf({ index }, state.split).some((entry) => entry.step === state.step))
    state.step = stepsOf({ index }, state.split).at(-1)?.step;
  return state;
}

function createBrowser(modelId: string, index: TrajectorySteps, search: URLSearchParams, signal: AbortSignal): Browser {
  const state = initialState(index, search);
  return {
    modelId,
    index,
    signal,
    state,
    previous: [],
    splitSelect: h(
      'select',
      { id: 'split-select' },
      index.splits.map((entry) =>
        h(
          'option',
          { value: entry.split, selected: entry.split === state.split },
          `${entry.split} (${entry.count.toLocaleString('en-US')})`,
        ),
      ),
    ),
    stepSelect: h('select', { id: 'step-select' }),
    prev: h('button', { class: 'btn', type: 'button' }, '← Previous'),
    next: h('button', { class: 'btn', type: 'button' }, 'Next →'),
    pageInfo: h('span', { class: 'muted page-info', 'aria-live': 'polite' }),
    list: h('ol', { class: 'trajectory-list', 'aria-label': 'Trajectories' }),
    detail: h('div', { class: 'trajectory-detail card', tabindex: '-1' }),
    page: null,
    detailController: null,
  };
}

function fillSteps(tb: Browser): void {
  replace(
    tb.stepSelect,
    [...stepsOf(tb, tb.state.split)]
      .reverse()
      .map((entry) =>
        h(
          'option',
          { value: String(entry.step), selected: entry.step === tb.state.step },
          `step ${entry.step} (${entry.count.toLocaleString('en-US')})`,
        ),
      ),
  );
}

function syncUrl(tb: Browser): void {
  replaceQuery({ split: tb.state.split, step: tb.state.step, after: tb.state.after, t: tb.state.selected });
}

/** The advantage the trainer gives a trajectory, from its group's rewards on this page. */
function advantageOf(tb: Browser, trajectoryId: string): number | null {
  const page = tb.page;
  const item = page?.data.find((entry) => entry.id === trajectoryId);
  if (!item || !page) return null;
  const group = page.data.filter((entry) => entry.step === item.step && entry.group_index === item.group_index);
  return advantages(group.map((entry) => entry.reward))[group.indexOf(item)];
}

async function showDetail(tb: Browser, trajectoryId: string): Promise<void> {
  tb.state.selected = trajectoryId;
  syncUrl(tb);
  for (const button of tb.list.querySelectorAll<HTMLButtonElement>('button[data-id]'))
    button.setAttribute('aria-current', String(button.dataset.id === trajectoryId));
  tb.detailController?.abort();
  const controller = new AbortController();
  tb.detailController = controller;
  tb.signal.addEventListener('abort', () => controller.abort());
  replace(tb.detail, spinner('Loading trajectory…'));
  try {
    const trajectory = await get<TrajectoryDetail>(
      `/v1/dashboard/models/${tb.modelId}/trajectories/${trajectoryId}`,
      controller.signal,
    );
    replace(tb.detail, trajectoryView(trajectory, advantageOf(tb, trajectory.id)));
  } catch (error) {
    if (!controller.signal.aborted) replace(tb.detail, errorBox(error));
  }
}

function listItem(tb: Browser, item: TrajectorySummary): HTMLElement {
  return h(
    'li',
    h(
      'button',
      {
        type: 'button',
        class: `trajectory-item group-${item.group_index % 6}`,
        'data-id': item.id,
        'aria-current': String(item.id === tb.state.selected),
        onclick: () => void showDetail(tb, item.id),
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
        item.num_tool_calls
          ? h(
              'span',
              { class: 'pill pill-tool' },
              `${item.num_tool_calls} tool call${item.num_tool_calls === 1 ? '' : 's'}`,
            )
          : null,
        item.has_reasoning ? h('span', { class: 'pill' }, 'reasoning') : null,
      ),
    ),
  );
}

function renderList(tb: Browser): void {
  const page = tb.page;
  if (!page || page.data.length === 0) {
    replace(tb.list, h('li', { class: 'muted' }, 'No trajectories on this page.'));
    return;
  }
  replace(
    tb.list,
    page.data.map((item) => listItem(tb, item)),
  );
}

function showPageInfo(tb: Browser, page: ListPage<TrajectorySummary>): void {
  const { state, previous } = tb;
  const total = stepsOf(tb, state.split).find((entry) => entry.step === state.step)?.count ?? 0;
  const start = previous.length * PAGE_SIZE + 1;
  tb.pageInfo.textContent =
    page.data.length === 0
      ? 'No trajectories'
      : `${state.after && previous.length === 0 ? 'From' : ''} ${start.toLocaleString('en-US')}–${(start + page.data.length - 1).toLocaleString('en-US')} of ${total.toLocaleString('en-US')}`.trim();
  tb.prev.disabled = !state.after;
  tb.next.disabled = !page.has_more;
}

/** Loads the page the state points at, lists it, and opens the selected trajectory (or the first). */
async function load(tb: Browser): Promise<void> {
  const { state, signal } = tb;
  replace(tb.list, h('li', spinner()));
  let page: ListPage<TrajectorySummary>;
  try {
    page = await get<ListPage<TrajectorySummary>>(
      `/v1/dashboard/models/${tb.modelId}/trajectories${query({ split: state.split, step: state.step, after: state.after, limit: PAGE_SIZE })}`,
      signal,
    );
    tb.page = page;
  } catch (error) {
    if (!signal.aborted) replace(tb.list, h('li', errorBox(error)));
    return;
  }
  showPageInfo(tb, page);
  renderList(tb);
  syncUrl(tb);
  const selected =
    state.selected && page.data.some((item) => item.id === state.selected) ? state.selected : page.data[0]?.id;
  if (selected) await showDetail(tb, selected);
  else replace(tb.detail, emptyState('Nothing selected'));
}

/** ↑/↓ in the list move the selection. */
function onListKey(tb: Browser, event: KeyboardEvent): void {
  if (event.key !== 'ArrowDown' && event.key !== 'ArrowUp') return;
  const buttons = [...tb.list.querySelectorAll<HTMLButtonElement>('button[data-id]')];
  const at = buttons.indexOf(document.activeElement as HTMLButtonElement);
  const target = buttons[Math.max(0, Math.min(buttons.length - 1, at + (event.key === 'ArrowDown' ? 1 : -1)))];
  if (!target) return;
  event.preventDefault();
  target.focus();
  void showDetail(tb, target.dataset.id!);
}

function wireControls(tb: Browser): void {
  const { state, previous } = tb;
  tb.splitSelect.addEventListener('change', () => {
    state.split = tb.splitSelect.value;
    state.step = stepsOf(tb, state.split).at(-1)?.step;
    state.after = undefined;
    state.selected = undefined;
    previous.length = 0;
    fillSteps(tb);
    void load(tb);
  });
  tb.stepSelect.addEventListener('change', () => {
    state.step = Number(tb.stepSelect.value);
    state.after = undefined;
    state.selected = undefined;
    previous.length = 0;
    void load(tb);
  });
  tb.next.addEventListener('click', () => {
    if (!tb.page?.has_more) return;
    previous.push(state.after);
    state.after = tb.page.last_id;
    state.selected = undefined;
    void load(tb);
  });
  tb.prev.addEventListener('click', () => {
    state.after = previous.pop();
    state.selected = undefined;
    void load(tb);
  });
  tb.list.addEventListener('keydown', (event) => onListKey(tb, event));
}

export async function renderTrajectories({ params, query: search, main, signal }: RouteContext) {
  const id = params.id;
  const loaded = await loadTrajectoryPage(id, 'trajectories', main, signal);
  if (!loaded) return;
  const { index, head } = loaded;
  if (index.splits.length === 0) {
    main.replaceChildren(
      head,
      h(
        'section',
        { class: 'card' },
        emptyState(
          'No trajectories yet',
          h(
            'p',
            'Trained trajectories are kept per step (split "train"); logged ones under their split (POST /v1/preview/models/{id}/log).',
          ),
        ),
      ),
    );
    return;
  }
  const tb = createBrowser(id, index, search, signal);
  fillSteps(tb);
  wireControls(tb);
  main.replaceChildren(
    head,
    h(
      'div',
      { class: 'toolbar card' },
      field('Split', tb.splitSelect),
      field('Step', tb.stepSelect),
      h('div', { class: 'pager' }, tb.pageInfo, tb.prev, tb.next),
    ),
    h(
      'div',
      { class: 'browser' },
      h('nav', { class: 'card list-pane', 'aria-label': 'Trajectory list' }, tb.list),
      tb.detail,
    ),
  );
  await load(tb);
}
