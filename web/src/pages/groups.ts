/**
 * A step's trajectory groups, each with its rollouts side by side sorted by reward, with the advantage each
 * got (rl-loss.md: A = r − mean, over population std + 1e-6), its length, finish reason and tool calls.
 * Ticking two rollouts of a group shows a word diff of what they wrote.
 */
import { get, type ListPage, query, type TrajectoryDetail, type TrajectorySummary } from '../api.ts';
import { assistantText, diffWords } from '../diff.ts';
import { emptyState, errorBox, field, h, replace, spinner } from '../dom.ts';
import { num } from '../format.ts';
import { href, type RouteContext, replaceQuery } from '../router.ts';
import { loadTrajectoryPage } from './model.ts';

/** A step past this many rollouts shows its first groups only (the page stays quick). */
const MAX_ROLLOUTS = 2000;

/** Advantages as the trainer computes them; a rollout without a reward gets none. */
export function advantages(rewards: (number | null)[]): (number | null)[] {
  const scored = rewards.filter((reward): reward is number => reward !== null);
  if (scored.length === 0) return rewards.map(() => null);
  const mean = scored.reduce((sum, reward) => sum + reward, 0) / scored.length;
  const std = Math.sqrt(scored.reduce((sum, reward) => sum + (reward - mean) ** 2, 0) / scored.length);
  return rewards.map((reward) => (reward === null ? null : (reward - mean) / (std + 1e-6)));
}

async function loadStep(
  modelId: string,
  split: string,
  step: number,
  signal: AbortSignal,
): Promise<{ items: TrajectorySummary[]; truncated: boolean }> {
  const items: TrajectorySummary[] = [];
  let after: string | undefined;
  for (;;) {
    const page = await get<ListPage<TrajectorySummary>>(
      `/v1/dashboard/models/${modelId}/trajectories${query({ split, step, after, limit: 200 })}`,
      signal,
    );
    for (const item of page.data) items.push(item);
    if (!page.has_more || page.data.length === 0) return { items, truncated: false };
    if (items.length >= MAX_ROLLOUTS) return { items, truncated: true };
    after = page.last_id;
  }
}

function rolloutCard(
  modelId: string,
  item: TrajectorySummary,
  advantage: number | null,
  onTick: (checked: boolean) => void,
): HTMLElement {
  const tick = h('input', { type: 'checkbox', 'aria-label': `Diff trajectory ${item.trajectory_index}` });
  tick.addEventListener('change', () => onTick(tick.checked));
  const length = item.completion_tokens !== null ? `${item.completion_tokens} tokens` : `${item.response_chars} chars`;
  const sign = advantage === null ? '' : advantage > 0 ? 'positive' : advantage < 0 ? 'negative' : 'zero';
  return h(
    'article',
    {
      class: `rollout adv-${sign}`,
      'data-id': item.id,
      'data-reward': item.reward ?? '',
      'data-advantage': advantage ?? '',
    },
    h(
      'div',
      { class: 'rollout-head' },
      h('span', { class: 'mono' }, `T${item.trajectory_index}`),
      h('label', { class: 'small' }, tick, ' diff'),
    ),
    h(
      'dl',
      { class: 'kv rollout-stats' },
      h('dt', 'reward'),
      h('dd', item.reward === null ? '—' : num(item.reward, 3)),
      h('dt', 'advantage'),
      h('dd', { class: 'advantage' }, advantage === null ? '—' : num(advantage, 3)),
      h('dt', 'length'),
      h('dd', length),
      h('dt', 'finish'),
      h('dd', item.finish_reason ?? '—'),
      h('dt', 'tool calls'),
      h('dd', String(item.num_tool_calls)),
    ),
    h('p', { class: 'rollout-response' }, item.response_preview || h('span', { class: 'muted' }, '(no reply)')),
    h(
      'a',
      {
        href: href(`/models/${modelId}/trajectories`, { split: item.split, step: item.step, t: item.id }),
        class: 'small',
      },
      'Open',
    ),
  );
}

async function showDiff(target: HTMLElement, modelId: string, ids: string[], signal: AbortSignal): Promise<void> {
  replace(target, spinner('Loading both rollouts…'));
  try {
    const [a, b] = await Promise.all(
      ids.map((id) => get<TrajectoryDetail>(`/v1/dashboard/models/${modelId}/trajectories/${id}`, signal)),
    );
    const parts = diffWords(assistantText(a), assistantText(b));
    replace(
      target,
      h(
        'h4',
        `T${a.trajectory_index} (reward ${num(a.reward, 3)}) → T${b.trajectory_index} (reward ${num(b.reward, 3)})`,
      ),
      h(
        'pre',
        { class: 'diff' },
        parts.map((part) => (part.kind === 'same' ? part.text : h(part.kind === 'added' ? 'ins' : 'del', part.text))),
      ),
    );
  } catch (error) {
    if (!signal.aborted) replace(target, errorBox(error));
  }
}

function groupCard(modelId: string, index: number, items: TrajectorySummary[], signal: AbortSignal): HTMLElement {
  const scores = advantages(items.map((item) => item.reward));
  const rows = items
    .map((item, position) => ({ item, advantage: scores[position] }))
    .sort((a, b) => (b.item.reward ?? -Infinity) - (a.item.reward ?? -Infinity));
  const rewards = items.flatMap((item) => (item.reward === null ? [] : [item.reward]));
  const trainable = new Set(rewards).size > 1;
  const diff = h('div', { class: 'group-diff', 'aria-live': 'polite' });
  const ticked: string[] = [];
  const onTick = (id: string, checked: boolean) => {
    if (checked) ticked.push(id);
    else ticked.splice(ticked.indexOf(id), 1);
    if (ticked.length === 2) void showDiff(diff, modelId, ticked, signal);
    else
      replace(diff, ticked.length > 2 ? h('p', { class: 'muted' }, 'Tick exactly two rollouts to diff them.') : null);
  };
  const mean = rewards.length ? rewards.reduce((sum, reward) => sum + reward, 0) / rewards.length : null;
  return h(
    'section',
    { class: 'card group', 'data-group': index, 'aria-label': `Group ${index}` },
    h(
      'h3',
      `Group ${index}`,
      h('span', { class: 'muted small' }, ` · ${items.length} rollouts · mean reward ${num(mean, 3)}`),
      trainable ? null : h('span', { class: 'pill' }, 'equal rewards: not trained'),
    ),
    h(
      'div',
      { class: 'rollouts' },
      rows.map(({ item, advantage }) => rolloutCard(modelId, item, advantage, (checked) => onTick(item.id, checked))),
    ),
    diff,
  );
}

function noGroups(): HTMLElement {
  return h(
    'section',
    { class: 'card' },
    emptyState(
      'No trajectories yet',
      h('p', 'Groups appear once a training job or a logged split has stored trajectories.'),
    ),
  );
}

/** One step's rollouts into `body`, a card per group in group order. */
async function showStep(body: HTMLElement, id: string, split: string, step: number, signal: AbortSignal) {
  replace(body, spinner('Loading rollouts…'));
  try {
    const { items, truncated } = await loadStep(id, split, step, signal);
    const groups = new Map<number, TrajectorySummary[]>();
    for (const item of items) groups.set(item.group_index, [...(groups.get(item.group_index) ?? []), item]);
    replace(
      body,
      truncated ? h('p', { class: 'notice-box' }, `The first ${items.length} rollouts of this step are shown.`) : null,
      [...groups].sort(([a], [b]) => a - b).map(([group, members]) => groupCard(id, group, members, signal)),
    );
  } catch (error) {
    if (!signal.aborted) replace(body, errorBox(error));
  }
}

export async function renderGroups({ params, query: search, main, signal }: RouteContext) {
  const id = params.id;
  const loaded = await loadTrajectoryPage(id, 'groups', main, signal);
  if (!loaded) return;
  const { index, head } = loaded;
  if (index.splits.length === 0) {
    main.replaceChildren(head, noGroups());
    return;
  }
  const stepsOf = (split: string) => index.splits.find((entry) => entry.split === split)?.steps ?? [];
  let split = index.splits.some((entry) => entry.split === search.get('split'))
    ? search.get('split')!
    : (index.splits.find((entry) => entry.split === 'train') ?? index.splits[0]).split;
  let step = Number(search.get('step') ?? NaN);
  if (!stepsOf(split).some((entry) => entry.step === step)) step = stepsOf(split).at(-1)!.step;

  const splitSelect = h(
    'select',
    index.splits.map((entry) => h('option', { value: entry.split, selected: entry.split === split }, entry.split)),
  );
  const stepSelect = h('select');
  const body = h('div', { class: 'groups' });
  const fillSteps = () =>
    replace(
      stepSelect,
      [...stepsOf(split)]
        .reverse()
        .map((entry) =>
          h(
            'option',
            { value: String(entry.step), selected: entry.step === step },
            `step ${entry.step} (${entry.count})`,
          ),
        ),
    );
  const load = async () => {
    replaceQuery({ split, step });
    await showStep(body, id, split, step, signal);
  };
  splitSelect.addEventListener('change', () => {
    split = splitSelect.value;
    step = stepsOf(split).at(-1)!.step;
    fillSteps();
    void load();
  });
  stepSelect.addEventListener('change', () => {
    step = Number(stepSelect.value);
    void load();
  });
  fillSteps();
  main.replaceChildren(
    head,
    h('div', { class: 'toolbar card' }, field('Split', splitSelect), field('Step', stepSelect)),
    body,
  );
  await load();
}
