/**
 * The model page's checkpoints table: pages of checkpoints newest first, their metrics, a chat link each,
 * and deleting a selection after confirmation.
 */

import { metricsAt, TRAINING_METRICS } from '../../../src/api/training-vocabulary.ts';
import {
  type Checkpoint,
  type CheckpointDeleteResponse,
  get,
  type ListPage,
  type ModelSummary,
  query,
  request,
} from '../api.ts';
import { confirmDialog, emptyState, errorBox, h, replace, spinner, toast } from '../dom.ts';
import { absoluteTime, metricLabel, num, relativeTime } from '../format.ts';
import { href } from '../router.ts';

const CHECKPOINT_PAGE = 100;
const CHECKPOINT_COLUMNS = metricsAt('checkpoint_column').flatMap((name) =>
  TRAINING_METRICS[name].places.includes('checkpoint_val_column') ? [name, `val/${name}`] : [name],
);

/** The listed checkpoints, the user's selection and the table's parts. */
interface CheckpointsTable {
  model: ModelSummary;
  signal: AbortSignal;
  onDeleted: () => void;
  checkpoints: Checkpoint[];
  selected: Set<number>;
  body: HTMLDivElement;
  more: HTMLButtonElement;
  deleteButton: HTMLButtonElement;
  count: HTMLSpanElement;
  /** Cursor of the next page. */
  after: string | undefined;
}

function refreshSelection(ct: CheckpointsTable): void {
  ct.deleteButton.disabled = ct.selected.size === 0;
  ct.deleteButton.textContent = ct.selected.size === 0 ? 'Delete selected' : `Delete ${ct.selected.size} selected`;
}

function selectAllBox(ct: CheckpointsTable): HTMLInputElement {
  const all = h('input', {
    type: 'checkbox',
    'aria-label': 'Select all listed checkpoints',
    checked: ct.selected.size > 0 && ct.selected.size === ct.checkpoints.length,
  });
  all.addEventListener('change', () => {
    for (const checkpoint of ct.checkpoints) {
      if (all.checked) ct.selected.add(checkpoint.step);
      else ct.selected.delete(checkpoint.step);
    }
    renderTable(ct);
  });
  return all;
}

function checkpointRow(ct: CheckpointsTable, checkpoint: Checkpoint, columns: string[]): HTMLElement {
  const box = h('input', {
    type: 'checkbox',
    'aria-label': `Select step ${checkpoint.step}`,
    checked: ct.selected.has(checkpoint.step),
  });
  box.addEventListener('change', () => {
    if (box.checked) ct.selected.add(checkpoint.step);
    else ct.selected.delete(checkpoint.step);
    refreshSelection(ct);
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
            h(
              'dl',
              { class: 'kv' },
              entries.map(([key, value]) => [
                h('dt', key),
                h('dd', typeof value === 'number' ? num(value) : JSON.stringify(value)),
              ]),
            ),
          ),
    ),
    h(
      'td',
      { class: 'actions' },
      h(
        'a',
        { class: 'btn btn-small', href: href('/playground', { model: ct.model.id, step: checkpoint.step }) },
        'Chat',
      ),
    ),
  );
}

function renderTable(ct: CheckpointsTable): void {
  if (ct.checkpoints.length === 0) {
    replace(
      ct.body,
      emptyState(
        'No checkpoints',
        h('p', 'Every checkpoint of this model was deleted; training continues from the no-op adapter.'),
      ),
    );
    return;
  }
  const keys = new Set(ct.checkpoints.flatMap((checkpoint) => Object.keys(checkpoint.metrics)));
  const columns = CHECKPOINT_COLUMNS.filter((key) => keys.has(key));
  const all = selectAllBox(ct);
  replace(
    ct.body,
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
        ct.checkpoints.map((checkpoint) => checkpointRow(ct, checkpoint, columns)),
      ),
    ),
  );
  refreshSelection(ct);
}

/** Reads the next page (or, with `reset`, the first again) and renders the table. */
async function loadCheckpoints(ct: CheckpointsTable, reset = false): Promise<void> {
  if (reset) {
    ct.checkpoints.length = 0;
    ct.after = undefined;
  }
  try {
    const page = await get<ListPage<Checkpoint>>(
      `/v1/preview/models/${ct.model.id}/checkpoints${query({ order: 'desc', limit: CHECKPOINT_PAGE, after: ct.after })}`,
      ct.signal,
    );
    for (const checkpoint of page.data) ct.checkpoints.push(checkpoint);
    ct.after = page.last_id || ct.after;
    ct.more.hidden = !page.has_more;
    ct.count.textContent = `${ct.model.checkpoint_count} total`;
    renderTable(ct);
  } catch (error) {
    if (!ct.signal.aborted) replace(ct.body, errorBox(error));
  }
}

async function deleteSelected(ct: CheckpointsTable): Promise<void> {
  const steps = [...ct.selected].sort((a, b) => a - b);
  const confirmed = await confirmDialog({
    title: steps.length === 1 ? `Delete checkpoint step ${steps[0]}?` : `Delete ${steps.length} checkpoints?`,
    body: [
      h(
        'p',
        steps.length === 1
          ? `Step ${steps[0]} and its adapter files will be removed. This cannot be undone.`
          : `Steps ${steps.join(', ')} and their adapter files will be removed. This cannot be undone.`,
      ),
      h(
        'p',
        { class: 'muted' },
        'Training continues from the highest remaining step. Their metrics stay in the run history.',
      ),
    ],
    confirm: steps.length === 1 ? 'Delete checkpoint' : `Delete ${steps.length} checkpoints`,
    danger: true,
  });
  if (!confirmed) return;
  try {
    const result = await request<CheckpointDeleteResponse>('DELETE', `/v1/preview/models/${ct.model.id}/checkpoints`, {
      steps,
    });
    toast(`Deleted ${result.deleted_count} checkpoint${result.deleted_count === 1 ? '' : 's'}`);
    ct.selected.clear();
    await loadCheckpoints(ct, true);
    ct.onDeleted();
  } catch (error) {
    toast(error instanceof Error ? error.message : String(error), 'error');
  }
}

export function checkpointsSection(
  model: ModelSummary,
  signal: AbortSignal,
  onDeleted: () => void,
): { element: HTMLElement; reload(): void } {
  const ct: CheckpointsTable = {
    model,
    signal,
    onDeleted,
    checkpoints: [],
    selected: new Set<number>(),
    body: h('div', { class: 'table-wrap' }, spinner('Loading checkpoints…')),
    more: h('button', { class: 'btn', type: 'button', hidden: true }, 'Load more checkpoints'),
    deleteButton: h('button', { class: 'btn btn-danger', type: 'button', disabled: true }, 'Delete selected'),
    count: h('span', { class: 'count' }),
    after: undefined,
  };
  ct.deleteButton.addEventListener('click', () => void deleteSelected(ct));
  ct.more.addEventListener('click', () => void loadCheckpoints(ct));
  void loadCheckpoints(ct);
  return {
    element: h(
      'section',
      { class: 'card', 'aria-labelledby': 'checkpoints-title' },
      h(
        'div',
        { class: 'section-head' },
        h('h2', { id: 'checkpoints-title' }, 'Checkpoints', ct.count),
        ct.deleteButton,
      ),
      ct.body,
      ct.more,
    ),
    reload() {
      // A reload keeps what the user is doing: never under a selection.
      if (ct.selected.size === 0) void loadCheckpoints(ct, true);
    },
  };
}
