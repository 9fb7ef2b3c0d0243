/**
 * Chat with a base model or any checkpoint through streaming chat completions (SSE), with temperature and
 * max tokens; every streamed piece keeps its token logprobs, shown on hover or, on the keyboard, by
 * focusing the reply and moving with ← →.
 */
import { authHeaders, errorMessage, get, getAll, type Checkpoint, type ListPage, type ModelSummary, type Overview } from '../api.ts';
import { emptyState, errorBox, field, h, replace, spinner } from '../dom.ts';
import { num } from '../format.ts';
import { replaceQuery, type RouteContext } from '../router.ts';

interface TokenLogprob {
  token: string;
  logprob: number;
  top_logprobs?: { token: string; logprob: number }[];
}

interface Turn {
  role: 'user' | 'assistant';
  content: string;
}

const DEFAULTS = { temperature: 0.7, maxTokens: 128, topLogprobs: 5 };

/** How sure the model was of a piece: 0 (sure) … 3 (surprised), for colouring. */
function surpriseClass(logprob: number): string {
  const p = Math.exp(logprob);
  return p > 0.9 ? 'lp-0' : p > 0.5 ? 'lp-1' : p > 0.1 ? 'lp-2' : 'lp-3';
}

function visible(token: string): string {
  return token.replace(/\n/g, '↵').replace(/\t/g, '⇥').replace(/ /g, '·');
}

function tokenTip(entries: TokenLogprob[]): HTMLElement {
  return h(
    'div',
    entries.map((entry) =>
      h(
        'div',
        { class: 'tip-token' },
        h('div', { class: 'tip-head' }, h('code', visible(entry.token)), h('span', ` logprob ${num(entry.logprob, 4)} · p ${(Math.exp(entry.logprob) * 100).toFixed(1)}%`)),
        entry.top_logprobs && entry.top_logprobs.length > 0
          ? h(
              'table',
              { class: 'tip-table' },
              h('tbody', entry.top_logprobs.map((top) => h('tr', { class: top.token === entry.token ? 'chosen' : undefined }, h('td', h('code', visible(top.token))), h('td', { class: 'num' }, num(top.logprob, 4)), h('td', { class: 'num' }, `${(Math.exp(top.logprob) * 100).toFixed(1)}%`)))),
            )
          : null,
      ),
    ),
  );
}

export async function renderPlayground({ query: search, main, signal }: RouteContext) {
  document.title = 'Playground · agent-trainer';
  main.append(spinner('Loading models…'));
  let overview: Overview;
  let models: ModelSummary[];
  try {
    [overview, models] = await Promise.all([get<Overview>('/v1/dashboard/overview', signal), getAll<ModelSummary>('/v1/dashboard/models', { limit: 500 }, signal)]);
  } catch (error) {
    if (!signal.aborted) main.replaceChildren(errorBox(error));
    return;
  }

  const modelSelect = h(
    'select',
    { id: 'pg-model' },
    models.length > 0 ? h('optgroup', { label: 'Your models' }, models.map((model) => h('option', { value: `model:${model.id}` }, `${model.project} / ${model.name}`))) : null,
    h('optgroup', { label: 'Base models' }, overview.base_models.map((base) => h('option', { value: `base:${base}` }, base))),
  );
  const stepSelect = h('select', { id: 'pg-step' });
  const temperature = h('input', { id: 'pg-temperature', type: 'range', min: 0, max: 2, step: 0.05, value: DEFAULTS.temperature });
  const temperatureValue = h('output', { for: 'pg-temperature', class: 'range-value' }, String(DEFAULTS.temperature));
  temperature.addEventListener('input', () => (temperatureValue.textContent = temperature.value));
  const maxTokens = h('input', { id: 'pg-max-tokens', type: 'number', min: 1, max: 32768, step: 1, value: DEFAULTS.maxTokens });
  const topLogprobs = h('input', { id: 'pg-top-logprobs', type: 'number', min: 0, max: 20, step: 1, value: DEFAULTS.topLogprobs });
  const colour = h('input', { id: 'pg-colour', type: 'checkbox', checked: true });
  const system = h('textarea', { id: 'pg-system', rows: 3, placeholder: 'Optional system prompt' });
  const clearButton = h('button', { class: 'btn', type: 'button' }, 'New conversation');

  const log = h('div', { class: 'chat-log', role: 'log', 'aria-label': 'Conversation', 'aria-live': 'off' });
  const input = h('textarea', { id: 'pg-input', rows: 3, placeholder: 'Message… (Enter sends, Shift+Enter adds a line)' });
  const send = h('button', { class: 'btn btn-primary', type: 'submit' }, 'Send');
  const stop = h('button', { class: 'btn', type: 'button', hidden: true }, 'Stop');
  const announcer = h('p', { class: 'sr-only', role: 'status', 'aria-live': 'polite' });
  const tip = h('div', { class: 'token-tip', hidden: true, role: 'tooltip', id: 'token-tip' });
  const history: Turn[] = [];
  let controller: AbortController | null = null;

  // Selection from the URL: ?model=<id>&step=<n> or ?base=<id>.
  const wantedModel = search.get('model');
  const wantedBase = search.get('base');
  if (wantedModel && models.some((model) => model.id === wantedModel)) modelSelect.value = `model:${wantedModel}`;
  else if (wantedBase && overview.base_models.includes(wantedBase)) modelSelect.value = `base:${wantedBase}`;
  let wantedStep = search.get('step');

  const selectedModel = () => {
    const [kind, value] = modelSelect.value.split(/:(.*)/s);
    return kind === 'model' ? { model: models.find((candidate) => candidate.id === value)!, base: null } : { model: null, base: value };
  };

  const fillSteps = async () => {
    const { model, base } = selectedModel();
    stepSelect.disabled = !model;
    if (!model) {
      replace(stepSelect, h('option', { value: '' }, 'base weights'));
      replaceQuery({ base: base ?? undefined });
      return;
    }
    replace(stepSelect, h('option', { value: '' }, 'latest'));
    try {
      const page = await get<ListPage<Checkpoint>>(`/v1/preview/models/${model.id}/checkpoints?order=desc&limit=100`, signal);
      stepSelect.append(...page.data.map((checkpoint) => h('option', { value: String(checkpoint.step) }, `step ${checkpoint.step}`)));
    } catch {
      // "latest" still works without the list.
    }
    if (wantedStep && [...stepSelect.options].some((option) => option.value === wantedStep)) stepSelect.value = wantedStep;
    wantedStep = null;
    replaceQuery({ model: model.id, step: stepSelect.value || undefined });
  };
  modelSelect.addEventListener('change', () => void fillSteps());
  stepSelect.addEventListener('change', () => {
    const { model } = selectedModel();
    if (model) replaceQuery({ model: model.id, step: stepSelect.value || undefined });
  });

  const modelName = () => {
    const { model, base } = selectedModel();
    if (!model) return base!;
    return stepSelect.value ? `${model.inference_name}:step${stepSelect.value}` : model.inference_name;
  };

  const showTip = (target: HTMLElement) => {
    const entries = (target as HTMLElement & { logprobs?: TokenLogprob[] }).logprobs;
    if (!entries || entries.length === 0) return;
    replace(tip, tokenTip(entries));
    tip.hidden = false;
    const rect = target.getBoundingClientRect();
    const hostRect = log.getBoundingClientRect();
    tip.style.left = `${Math.max(0, Math.min(rect.left - hostRect.left, hostRect.width - 280))}px`;
    tip.style.top = `${rect.bottom - hostRect.top + log.scrollTop + 6}px`;
    for (const other of log.querySelectorAll('.tok.active')) other.classList.remove('active');
    target.classList.add('active');
  };
  const hideTip = () => {
    tip.hidden = true;
    for (const other of log.querySelectorAll('.tok.active')) other.classList.remove('active');
  };
  log.addEventListener('mouseover', (event) => {
    const target = (event.target as HTMLElement).closest<HTMLElement>('.tok');
    if (target) showTip(target);
  });
  log.addEventListener('mouseleave', hideTip);
  log.addEventListener('keydown', (event) => {
    const reply = (event.target as HTMLElement).closest<HTMLElement>('.reply-tokens');
    if (!reply || (event.key !== 'ArrowRight' && event.key !== 'ArrowLeft' && event.key !== 'Escape')) return;
    event.preventDefault();
    if (event.key === 'Escape') return hideTip();
    const tokens = [...reply.querySelectorAll<HTMLElement>('.tok')];
    const at = tokens.findIndex((token) => token.classList.contains('active'));
    const next = tokens[Math.max(0, Math.min(tokens.length - 1, at === -1 ? 0 : at + (event.key === 'ArrowRight' ? 1 : -1)))];
    if (next) showTip(next);
  });
  colour.addEventListener('change', () => log.classList.toggle('no-colour', !colour.checked));

  const bubble = (role: string, ...children: (Node | string)[]) => h('article', { class: `msg msg-${role}`, 'data-role': role }, h('header', { class: 'msg-head' }, h('span', { class: 'role' }, role)), ...children);

  const renderEmpty = () => replace(log, emptyState('Say something', h('p', 'Replies stream in token by token. Hover a piece of the reply (or focus it and use ← →) to see its logprob and the alternatives.')), tip);

  clearButton.addEventListener('click', () => {
    controller?.abort();
    history.length = 0;
    renderEmpty();
    input.focus();
  });

  const submit = async () => {
    const text = input.value.trim();
    if (!text || controller) return;
    input.value = '';
    if (history.length === 0) replace(log, tip);
    history.push({ role: 'user', content: text });
    log.append(bubble('user', h('div', { class: 'text' }, text)));

    const reasoningBox = h('div', { class: 'text reasoning-text' });
    const reasoning = h('details', { class: 'reasoning', open: true, hidden: true }, h('summary', 'Reasoning'), reasoningBox);
    const tokens = h('div', { class: 'reply-tokens text', tabindex: '0', 'aria-label': 'Reply; use the arrow keys to read token logprobs' });
    const tools = h('div', { class: 'reply-tools' });
    const footer = h('footer', { class: 'msg-foot muted small' }, 'waiting for the first token…');
    const name = modelName();
    log.append(bubble('assistant', h('div', { class: 'muted small model-name' }, name), reasoning, tokens, tools, footer));
    log.setAttribute('aria-busy', 'true');
    log.scrollTop = log.scrollHeight;

    controller = new AbortController();
    const mine = controller;
    signal.addEventListener('abort', () => mine.abort());
    send.disabled = true;
    stop.hidden = false;
    const started = performance.now();
    let firstTokenAt: number | null = null;
    let pieces = 0;
    let content = '';
    let finish = '';
    let usage: { completion_tokens?: number } | null = null;
    const calls: { name: string; arguments: string }[] = [];
    const body = {
      model: name,
      messages: [...(system.value.trim() ? [{ role: 'system', content: system.value.trim() }] : []), ...history],
      stream: true,
      stream_options: { include_usage: true },
      temperature: Number(temperature.value),
      max_tokens: Math.max(1, Number(maxTokens.value) || DEFAULTS.maxTokens),
      logprobs: true,
      ...(Number(topLogprobs.value) > 0 ? { top_logprobs: Math.min(20, Number(topLogprobs.value)) } : {}),
    };
    try {
      const response = await fetch('/v1/chat/completions', {
        method: 'POST',
        headers: { ...authHeaders(), 'content-type': 'application/json', accept: 'text/event-stream' },
        body: JSON.stringify(body),
        signal: mine.signal,
      });
      if (!response.ok || !response.body) {
        const text = await response.text();
        let parsed: unknown = null;
        try {
          parsed = JSON.parse(text);
        } catch {
          parsed = null;
        }
        throw new Error(errorMessage(response.status, parsed));
      }
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      const handle = (data: string) => {
        if (data === '[DONE]') return;
        const chunk = JSON.parse(data) as {
          error?: { message?: string };
          usage?: { completion_tokens?: number } | null;
          choices?: { delta?: { content?: string | null; reasoning?: string | null; reasoning_content?: string | null; tool_calls?: { index?: number; function?: { name?: string; arguments?: string } }[] }; logprobs?: { content?: TokenLogprob[] | null } | null; finish_reason?: string | null }[];
        };
        if (chunk.error) throw new Error(chunk.error.message ?? 'The stream failed');
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices?.[0];
        if (!choice) return;
        const delta = choice.delta ?? {};
        const thought = delta.reasoning ?? delta.reasoning_content;
        if (thought) {
          reasoning.hidden = false;
          reasoningBox.append(thought);
        }
        if (delta.content) {
          firstTokenAt ??= performance.now();
          const entries = choice.logprobs?.content ?? [];
          const piece = h('span', { class: `tok ${entries.length > 0 ? surpriseClass(Math.min(...entries.map((entry) => entry.logprob))) : ''}` }, delta.content);
          (piece as HTMLElement & { logprobs?: TokenLogprob[] }).logprobs = entries;
          tokens.append(piece);
          content += delta.content;
          pieces += 1;
          footer.textContent = `${pieces} pieces…`;
          log.scrollTop = log.scrollHeight;
        }
        for (const call of delta.tool_calls ?? []) {
          const index = call.index ?? 0;
          calls[index] ??= { name: '', arguments: '' };
          calls[index].name += call.function?.name ?? '';
          calls[index].arguments += call.function?.arguments ?? '';
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      };
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let boundary: number;
        while ((boundary = buffer.indexOf('\n\n')) !== -1) {
          const event = buffer.slice(0, boundary);
          buffer = buffer.slice(boundary + 2);
          for (const line of event.split('\n')) if (line.startsWith('data: ')) handle(line.slice(6));
        }
      }
      replace(tools, calls.map((call) => h('div', { class: 'tool-call' }, h('div', { class: 'tool-call-head' }, h('span', { class: 'pill pill-tool' }, 'tool call'), h('code', { class: 'tool-name' }, call.name)), h('pre', { class: 'code' }, call.arguments))));
      const seconds = (performance.now() - started) / 1000;
      const generated = (usage as { completion_tokens?: number } | null)?.completion_tokens ?? pieces;
      const ttft = firstTokenAt === null ? null : (firstTokenAt - started) / 1000;
      footer.textContent = `${generated} tokens · ${(generated / Math.max(seconds, 1e-3)).toFixed(1)} tokens/s · first token ${ttft === null ? '—' : `${(ttft * 1000).toFixed(0)} ms`} · finish: ${finish || 'stopped'}`;
      footer.dataset.finish = finish || 'stopped';
      if (!content && calls.length === 0) tokens.append(h('span', { class: 'muted' }, '(empty reply)'));
      history.push({ role: 'assistant', content });
      announcer.textContent = 'Reply complete';
    } catch (error) {
      if (mine.signal.aborted) {
        footer.textContent = `stopped after ${pieces} pieces`;
        footer.dataset.finish = 'stopped';
        if (content) history.push({ role: 'assistant', content });
      } else {
        footer.replaceChildren(errorBox(error));
        footer.dataset.finish = 'error';
        history.pop();
      }
    } finally {
      controller = null;
      send.disabled = false;
      stop.hidden = true;
      log.setAttribute('aria-busy', 'false');
      log.scrollTop = log.scrollHeight;
    }
  };

  stop.addEventListener('click', () => controller?.abort());
  input.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      void submit();
    }
  });
  const form = h('form', { class: 'composer' }, field('Message', input), h('div', { class: 'composer-actions' }, stop, send));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    void submit();
  });

  main.replaceChildren(
    h('div', { class: 'page-head' }, h('h1', 'Playground'), h('p', { class: 'subtitle' }, 'Chat with any checkpoint through streaming chat completions.')),
    h(
      'div',
      { class: 'playground' },
      h(
        'aside',
        { class: 'card settings', 'aria-label': 'Settings' },
        field('Model', modelSelect),
        field('Checkpoint', stepSelect),
        h('div', { class: 'field' }, h('label', { for: 'pg-temperature' }, 'Temperature ', temperatureValue), temperature),
        field('Max tokens', maxTokens),
        field('Top logprobs', topLogprobs, 'Alternatives shown per token (0–20)'),
        h('div', { class: 'field field-inline' }, colour, h('label', { for: 'pg-colour' }, 'Colour tokens by probability')),
        field('System prompt', system),
        clearButton,
      ),
      h('section', { class: 'card chat', 'aria-label': 'Chat' }, log, form, announcer),
    ),
  );
  renderEmpty();
  await fillSteps();
  input.focus();
}
