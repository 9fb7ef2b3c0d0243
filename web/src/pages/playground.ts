/**
 * Chat with a base model or any checkpoint through streaming chat completions (SSE), with temperature and
 * max tokens; every streamed piece keeps its token logprobs, shown on hover or, on the keyboard, by
 * focusing the reply and moving with ← →. The reply itself streams in playground-reply.ts.
 */
import type { ChatLogprob } from '../../../src/api/chat.ts';
import { servedModelName } from '../../../src/api/model-name.ts';
import { type Checkpoint, get, getAll, type ListPage, type ModelSummary, type Overview } from '../api.ts';
import { append, emptyState, errorBox, field, h, replace, spinner } from '../dom.ts';
import { num } from '../format.ts';
import { type RouteContext, replaceQuery } from '../router.ts';
import { newStreamState, replyView, showFinished, streamReply, type TokenPiece } from './playground-reply.ts';

interface Turn {
  role: 'user' | 'assistant';
  content: string;
}

const DEFAULTS = { temperature: 0.7, maxTokens: 128, topLogprobs: 5 };

/** The page's controls and conversation; one per visit. */
interface Playground {
  overview: Overview;
  models: ModelSummary[];
  signal: AbortSignal;
  modelSelect: HTMLSelectElement;
  stepSelect: HTMLSelectElement;
  temperature: HTMLInputElement;
  temperatureValue: HTMLOutputElement;
  maxTokens: HTMLInputElement;
  topLogprobs: HTMLInputElement;
  colour: HTMLInputElement;
  system: HTMLTextAreaElement;
  clearButton: HTMLButtonElement;
  log: HTMLDivElement;
  input: HTMLTextAreaElement;
  send: HTMLButtonElement;
  stop: HTMLButtonElement;
  form: HTMLFormElement;
  announcer: HTMLParagraphElement;
  tip: HTMLDivElement;
  history: Turn[];
  controller: AbortController | null;
  /** The checkpoint the URL asked for, until the first step list has been filled. */
  wantedStep: string | null;
}

function visible(token: string): string {
  return token.replace(/\n/g, '↵').replace(/\t/g, '⇥').replace(/ /g, '·');
}

function tokenTip(entries: ChatLogprob[]): HTMLElement {
  return h(
    'div',
    entries.map((entry) =>
      h(
        'div',
        { class: 'tip-token' },
        h(
          'div',
          { class: 'tip-head' },
          h('code', visible(entry.token)),
          h('span', ` logprob ${num(entry.logprob, 4)} · p ${(Math.exp(entry.logprob) * 100).toFixed(1)}%`),
        ),
        entry.top_logprobs && entry.top_logprobs.length > 0
          ? h(
              'table',
              { class: 'tip-table' },
              h(
                'tbody',
                entry.top_logprobs.map((top) =>
                  h(
                    'tr',
                    { class: top.token === entry.token ? 'chosen' : undefined },
                    h('td', h('code', visible(top.token))),
                    h('td', { class: 'num' }, num(top.logprob, 4)),
                    h('td', { class: 'num' }, `${(Math.exp(top.logprob) * 100).toFixed(1)}%`),
                  ),
                ),
              ),
            )
          : null,
      ),
    ),
  );
}

function createPlayground(overview: Overview, models: ModelSummary[], signal: AbortSignal): Playground {
  const modelSelect = h(
    'select',
    { id: 'pg-model' },
    models.length > 0
      ? h(
          'optgroup',
          { label: 'Your models' },
          models.map((model) => h('option', { value: `model:${model.id}` }, `${model.project} / ${model.name}`)),
        )
      : null,
    h(
      'optgroup',
      { label: 'Base models' },
      overview.base_models.map((base) => h('option', { value: `base:${base}` }, base)),
    ),
  );
  const input = h('textarea', {
    id: 'pg-input',
    rows: 3,
    placeholder: 'Message… (Enter sends, Shift+Enter adds a line)',
  });
  const send = h('button', { class: 'btn btn-primary', type: 'submit' }, 'Send');
  const stop = h('button', { class: 'btn', type: 'button', hidden: true }, 'Stop');
  return {
    overview,
    models,
    signal,
    modelSelect,
    stepSelect: h('select', { id: 'pg-step' }),
    temperature: h('input', {
      id: 'pg-temperature',
      type: 'range',
      min: 0,
      max: 2,
      step: 0.05,
      value: DEFAULTS.temperature,
    }),
    temperatureValue: h('output', { for: 'pg-temperature', class: 'range-value' }, String(DEFAULTS.temperature)),
    maxTokens: h('input', {
      id: 'pg-max-tokens',
      type: 'number',
      min: 1,
      max: 32768,
      step: 1,
      value: DEFAULTS.maxTokens,
    }),
    topLogprobs: h('input', {
      id: 'pg-top-logprobs',
      type: 'number',
      min: 0,
      max: 20,
      step: 1,
      value: DEFAULTS.topLogprobs,
    }),
    colour: h('input', { id: 'pg-colour', type: 'checkbox', checked: true }),
    system: h('textarea', { id: 'pg-system', rows: 3, placeholder: 'Optional system prompt' }),
    clearButton: h('button', { class: 'btn', type: 'button' }, 'New conversation'),
    log: h('div', { class: 'chat-log', role: 'log', 'aria-label': 'Conversation', 'aria-live': 'off' }),
    input,
    send,
    stop,
    form: h(
      'form',
      { class: 'composer' },
      field('Message', input),
      h('div', { class: 'composer-actions' }, stop, send),
    ),
    announcer: h('p', { class: 'sr-only', role: 'status', 'aria-live': 'polite' }),
    tip: h('div', { class: 'token-tip', hidden: true, role: 'tooltip', id: 'token-tip' }),
    history: [],
    controller: null,
    wantedStep: null,
  };
}

/** Selection from the URL: ?model=<id>&step=<n> or ?base=<id>. */
function selectFromUrl(pg: Playground, search: URLSearchParams): void {
  const wantedModel = search.get('model');
  const wantedBase = search.get('base');
  if (wantedModel && pg.models.some((model) => model.id === wantedModel)) pg.modelSelect.value = `model:${wantedModel}`;
  else if (wantedBase && pg.overview.base_models.includes(wantedBase)) pg.modelSelect.value = `base:${wantedBase}`;
  pg.wantedStep = search.get('step');
}

function selectedModel(pg: Playground): { model: ModelSummary; base: null } | { model: null; base: string } {
  const [kind, value] = pg.modelSelect.value.split(/:(.*)/s);
  return kind === 'model'
    ? { model: pg.models.find((candidate) => candidate.id === value)!, base: null }
    : { model: null, base: value };
}

async function fillSteps(pg: Playground): Promise<void> {
  const { model, base } = selectedModel(pg);
  pg.stepSelect.disabled = !model;
  if (!model) {
    replace(pg.stepSelect, h('option', { value: '' }, 'base weights'));
    replaceQuery({ base: base ?? undefined });
    return;
  }
  replace(pg.stepSelect, h('option', { value: '' }, 'latest'));
  try {
    const page = await get<ListPage<Checkpoint>>(
      `/v1/preview/models/${model.id}/checkpoints?order=desc&limit=100`,
      pg.signal,
    );
    append(
      pg.stepSelect,
      page.data.map((checkpoint) => h('option', { value: String(checkpoint.step) }, `step ${checkpoint.step}`)),
    );
  } catch {
    // "latest" still works without the list.
  }
  const wanted = pg.wantedStep;
  if (wanted && [...pg.stepSelect.options].some((option) => option.value === wanted)) pg.stepSelect.value = wanted;
  pg.wantedStep = null;
  replaceQuery({ model: model.id, step: pg.stepSelect.value || undefined });
}

function modelName(pg: Playground): string {
  const { model, base } = selectedModel(pg);
  if (!model) return base!;
  return servedModelName({
    entity: model.entity,
    project: model.project,
    name: model.name,
    step: pg.stepSelect.value ? Number(pg.stepSelect.value) : null,
  });
}

function showTip(pg: Playground, target: TokenPiece): void {
  const entries = target.logprobs;
  if (!entries || entries.length === 0) return;
  replace(pg.tip, tokenTip(entries));
  pg.tip.hidden = false;
  const rect = target.getBoundingClientRect();
  const hostRect = pg.log.getBoundingClientRect();
  pg.tip.style.left = `${Math.max(0, Math.min(rect.left - hostRect.left, hostRect.width - 280))}px`;
  pg.tip.style.top = `${rect.bottom - hostRect.top + pg.log.scrollTop + 6}px`;
  for (const other of pg.log.querySelectorAll('.tok.active')) other.classList.remove('active');
  target.classList.add('active');
}

function hideTip(pg: Playground): void {
  pg.tip.hidden = true;
  for (const other of pg.log.querySelectorAll('.tok.active')) other.classList.remove('active');
}

/** ← → walk the focused reply's tokens, Escape hides the tip. */
function onReplyKey(pg: Playground, event: KeyboardEvent): void {
  const reply = (event.target as HTMLElement).closest<HTMLElement>('.reply-tokens');
  if (!reply || (event.key !== 'ArrowRight' && event.key !== 'ArrowLeft' && event.key !== 'Escape')) return;
  event.preventDefault();
  if (event.key === 'Escape') {
    hideTip(pg);
    return;
  }
  const tokens = [...reply.querySelectorAll<HTMLElement>('.tok')];
  const at = tokens.findIndex((token) => token.classList.contains('active'));
  const next =
    tokens[Math.max(0, Math.min(tokens.length - 1, at === -1 ? 0 : at + (event.key === 'ArrowRight' ? 1 : -1)))];
  if (next) showTip(pg, next);
}

function bubble(role: string, ...children: (Node | string)[]): HTMLElement {
  return h(
    'article',
    { class: `msg msg-${role}`, 'data-role': role },
    h('header', { class: 'msg-head' }, h('span', { class: 'role' }, role)),
    children,
  );
}

function renderEmpty(pg: Playground): void {
  replace(
    pg.log,
    emptyState(
      'Say something',
      h(
        'p',
        'Replies stream in token by token. Hover a piece of the reply (or focus it and use ← →) to see its logprob and the alternatives.',
      ),
    ),
    pg.tip,
  );
}

function chatBody(pg: Playground, name: string) {
  return {
    model: name,
    messages: [...(pg.system.value.trim() ? [{ role: 'system', content: pg.system.value.trim() }] : []), ...pg.history],
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number(pg.temperature.value),
    max_tokens: Math.max(1, Number(pg.maxTokens.value) || DEFAULTS.maxTokens),
    logprobs: true,
    ...(Number(pg.topLogprobs.value) > 0 ? { top_logprobs: Math.min(20, Number(pg.topLogprobs.value)) } : {}),
  };
}

/** Sends the typed message and streams the reply under it; one reply at a time. */
async function submit(pg: Playground): Promise<void> {
  const text = pg.input.value.trim();
  if (!text || pg.controller) return;
  pg.input.value = '';
  if (pg.history.length === 0) replace(pg.log, pg.tip);
  pg.history.push({ role: 'user', content: text });
  pg.log.append(bubble('user', h('div', { class: 'text' }, text)));
  const view = replyView();
  const name = modelName(pg);
  pg.log.append(
    bubble(
      'assistant',
      h('div', { class: 'muted small model-name' }, name),
      view.reasoning,
      view.tokens,
      view.tools,
      view.footer,
    ),
  );
  pg.log.setAttribute('aria-busy', 'true');
  pg.log.scrollTop = pg.log.scrollHeight;

  const mine = new AbortController();
  pg.controller = mine;
  pg.signal.addEventListener('abort', () => mine.abort());
  pg.send.disabled = true;
  pg.stop.hidden = false;
  const state = newStreamState();
  try {
    await streamReply(state, chatBody(pg, name), view, pg.log, mine.signal);
    showFinished(state, view);
    pg.history.push({ role: 'assistant', content: state.content });
    pg.announcer.textContent = 'Reply complete';
  } catch (error) {
    if (mine.signal.aborted) {
      view.footer.textContent = `stopped after ${state.pieces} pieces`;
      view.footer.dataset.finish = 'stopped';
      if (state.content) pg.history.push({ role: 'assistant', content: state.content });
    } else {
      view.footer.replaceChildren(errorBox(error));
      view.footer.dataset.finish = 'error';
      pg.history.pop();
    }
  } finally {
    pg.controller = null;
    pg.send.disabled = false;
    pg.stop.hidden = true;
    pg.log.setAttribute('aria-busy', 'false');
    pg.log.scrollTop = pg.log.scrollHeight;
  }
}

function wireControls(pg: Playground): void {
  pg.temperature.addEventListener('input', () => (pg.temperatureValue.textContent = pg.temperature.value));
  pg.modelSelect.addEventListener('change', () => void fillSteps(pg));
  pg.stepSelect.addEventListener('change', () => {
    const { model } = selectedModel(pg);
    if (model) replaceQuery({ model: model.id, step: pg.stepSelect.value || undefined });
  });
  pg.log.addEventListener('mouseover', (event) => {
    const target = (event.target as HTMLElement).closest<HTMLElement>('.tok');
    if (target) showTip(pg, target);
  });
  pg.log.addEventListener('mouseleave', () => hideTip(pg));
  pg.log.addEventListener('keydown', (event) => onReplyKey(pg, event));
  pg.colour.addEventListener('change', () => pg.log.classList.toggle('no-colour', !pg.colour.checked));
  pg.clearButton.addEventListener('click', () => {
    pg.controller?.abort();
    pg.history.length = 0;
    renderEmpty(pg);
    pg.input.focus();
  });
  pg.stop.addEventListener('click', () => pg.controller?.abort());
  pg.input.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      void submit(pg);
    }
  });
  pg.form.addEventListener('submit', (event) => {
    event.preventDefault();
    void submit(pg);
  });
}

function layout(pg: Playground): HTMLElement {
  return h(
    'div',
    { class: 'playground' },
    h(
      'aside',
      { class: 'card settings', 'aria-label': 'Settings' },
      field('Model', pg.modelSelect),
      field('Checkpoint', pg.stepSelect),
      h(
        'div',
        { class: 'field' },
        h('label', { for: 'pg-temperature' }, 'Temperature ', pg.temperatureValue),
        pg.temperature,
      ),
      field('Max tokens', pg.maxTokens),
      field('Top logprobs', pg.topLogprobs, 'Alternatives shown per token (0–20)'),
      h(
        'div',
        { class: 'field field-inline' },
        pg.colour,
        h('label', { for: 'pg-colour' }, 'Colour tokens by probability'),
      ),
      field('System prompt', pg.system),
      pg.clearButton,
    ),
    h('section', { class: 'card chat', 'aria-label': 'Chat' }, pg.log, pg.form, pg.announcer),
  );
}

export async function renderPlayground({ query: search, main, signal }: RouteContext) {
  document.title = 'Playground · agent-trainer';
  main.append(spinner('Loading models…'));
  let overview: Overview;
  let models: ModelSummary[];
  try {
    [overview, models] = await Promise.all([
      get<Overview>('/v1/dashboard/overview', signal),
      getAll<ModelSummary>('/v1/dashboard/models', { limit: 500 }, signal),
    ]);
  } catch (error) {
    if (!signal.aborted) main.replaceChildren(errorBox(error));
    return;
  }
  const pg = createPlayground(overview, models, signal);
  selectFromUrl(pg, search);
  wireControls(pg);
  main.replaceChildren(
    h(
      'div',
      { class: 'page-head' },
      h('h1', 'Playground'),
      h('p', { class: 'subtitle' }, 'Chat with any checkpoint through streaming chat completions.'),
    ),
    layout(pg),
  );
  renderEmpty(pg);
  await fillSteps(pg);
  pg.input.focus();
}
