/**
 * The sampled tokens of a trajectory's choices, coloured by the sampler's probability (green likely, red
 * unlikely), by the trajectory's advantage (the whole response gets one sign and strength: that is what
 * the update pushes every trained token by), or by the trainer's probability after the job's last step
 * (same scale as the sampler's, so the two read side by side). The i-th sampled token is the i-th trained
 * one: both follow the choices in order. One readout for hover and keyboard (focus, ← →) serves all
 * tokens, so 4,000 of them stay responsive.
 */
import type { TrainedTokens } from './api.ts';
import { h, replace } from './dom.ts';
import { num } from './format.ts';

interface SampledToken {
  token: string;
  logprob: number;
}

export type TokenColouring = 'sampler' | 'advantage' | 'trainer';

/** Hue 0 (red, p = 0) to 120 (green, p = 1) of the probability exp(logprob). */
export function samplerHue(logprob: number): number {
  return Math.round(120 * Math.min(1, Math.max(0, Math.exp(logprob))));
}

/** Green for a positive advantage, red for a negative one; stronger up to |A| = 2. */
export function advantageColour(advantage: number): { hue: number; alpha: number } {
  return { hue: advantage >= 0 ? 120 : 0, alpha: Math.round(Math.min(1, Math.abs(advantage) / 2) * 100) / 100 };
}

const utf8 = new TextDecoder();

/** A logprob entry's text: its `bytes` decoded when the token is written as an id (`return_tokens_as_token_ids`). */
function tokenText(entry: { token: string; bytes?: unknown }): string {
  if (!entry.token.startsWith('token_id:') || !Array.isArray(entry.bytes)) return entry.token;
  return utf8.decode(Uint8Array.from(entry.bytes.filter((byte): byte is number => Number.isInteger(byte))));
}

export function sampledTokens(items: unknown[]): SampledToken[] {
  return items.flatMap((item) => {
    const content = (item as { message?: unknown; logprobs?: { content?: unknown } | null } | null)?.logprobs?.content;
    if (!Array.isArray(content)) return [];
    return content.flatMap((entry: { token?: unknown; logprob?: unknown; bytes?: unknown }) =>
      typeof entry?.token === 'string' && typeof entry.logprob === 'number'
        ? [{ token: tokenText({ token: entry.token, bytes: entry.bytes }), logprob: entry.logprob }]
        : [],
    );
  });
}

function paint(
  span: HTMLElement,
  token: SampledToken,
  colouring: TokenColouring,
  advantage: number | null,
  after: number | undefined,
): void {
  span.classList.remove('tok-untrained');
  if (colouring === 'advantage' && advantage !== null) {
    const { hue, alpha } = advantageColour(advantage);
    span.dataset.hue = String(hue);
    span.style.background = `hsl(${hue} 70% 55% / ${alpha})`;
  } else if (colouring === 'trainer' && after === undefined) {
    // Not trained: left blank rather than coloured by a value that does not exist.
    delete span.dataset.hue;
    span.classList.add('tok-untrained');
    span.style.background = '';
  } else {
    const hue = samplerHue(colouring === 'trainer' ? after! : token.logprob);
    span.dataset.hue = String(hue);
    span.style.background = `hsl(${hue} 70% 80%)`;
  }
}

function trainedNote(trained: TrainedTokens | null, sampled: number): HTMLElement | null {
  if (trained === null)
    return h(
      'p',
      { class: 'muted trained-note' },
      'Not trained: no trainer logprob after the step (zero advantage, not a train split, or beyond its job’s stored-token cap).',
    );
  const count = Math.min(trained.trainer_logprobs.length, sampled);
  return count < sampled
    ? h(
        'p',
        { class: 'muted trained-note' },
        `${count} of ${sampled} tokens trained; the rest carry no trainer logprob.`,
      )
    : null;
}

function readoutText(
  token: SampledToken,
  index: number,
  advantage: number | null,
  after: number | undefined,
  trained: boolean,
): string {
  const trainer =
    after === undefined
      ? trained
        ? 'not trained'
        : 'not stored'
      : `${num(after, 4)} (Δ ${num(after - token.logprob, 4)})`;
  return ` #${index} · logprob ${num(token.logprob, 4)} · p ${num(Math.exp(token.logprob), 3)}${advantage === null ? '' : ` · advantage ${num(advantage, 3)}`} · trainer logprob after ${trainer}`;
}

function noTokens(): HTMLElement {
  return h(
    'section',
    { class: 'token-view' },
    h('h3', 'Tokens'),
    h(
      'p',
      { class: 'muted empty-tokens' },
      'No sampled logprobs in this trajectory: it was logged or sent without them, so there are no tokens to show (and RL trains on it only with allow_training_without_logprobs).',
    ),
  );
}

/** What the tokens are coloured by: the sampler's probability, the group advantage, or the trainer's logprob after. */
function colourPicker(advantage: number | null, trained: TrainedTokens | null): HTMLSelectElement {
  return h(
    'select',
    { 'aria-label': 'Colour tokens by' },
    h('option', { value: 'sampler' }, 'sampler probability'),
    h(
      'option',
      { value: 'advantage', disabled: advantage === null },
      advantage === null ? 'advantage (unknown here)' : `advantage (${num(advantage, 3)})`,
    ),
    h(
      'option',
      { value: 'trainer', disabled: trained === null },
      trained === null ? 'trainer logprob after the step (not trained)' : 'trainer logprob after the step',
    ),
  );
}

export function tokenView(
  items: unknown[],
  advantage: number | null,
  trained: TrainedTokens | null = null,
): HTMLElement {
  const tokens = sampledTokens(items);
  if (tokens.length === 0) return noTokens();
  const afterOf = (index: number): number | undefined => trained?.trainer_logprobs[index];
  const readout = h(
    'div',
    { class: 'token-readout', 'aria-live': 'polite' },
    'Hover a token (or focus the text and use ← →).',
  );
  const text = h('div', { class: 'token-text', tabindex: '0', 'aria-label': `${tokens.length} sampled tokens` });
  const spans = tokens.map((token, index) =>
    h(
      'span',
      {
        class: 'tok',
        'data-index': index,
        'data-logprob': token.logprob,
        'data-trainer-logprob': afterOf(index) ?? '',
      },
      token.token,
    ),
  );
  text.append(...spans);
  const picker = colourPicker(advantage, trained);
  const colour = () => {
    for (const [index, span] of spans.entries())
      paint(span, tokens[index], picker.value as TokenColouring, advantage, afterOf(index));
  };
  picker.addEventListener('change', colour);
  colour();
  let current = -1;
  const show = (index: number) => {
    spans[current]?.classList.remove('tok-current');
    current = Math.max(0, Math.min(tokens.length - 1, index));
    spans[current].classList.add('tok-current');
    replace(
      readout,
      h('code', JSON.stringify(tokens[current].token)),
      readoutText(tokens[current], current, advantage, afterOf(current), trained !== null),
    );
  };
  text.addEventListener('mouseover', (event) => {
    const index = (event.target as HTMLElement).dataset?.index;
    if (index !== undefined) show(Number(index));
  });
  text.addEventListener('keydown', (event) => {
    if (event.key !== 'ArrowRight' && event.key !== 'ArrowLeft') return;
    event.preventDefault();
    show(current + (event.key === 'ArrowRight' ? 1 : -1));
  });
  return h(
    'section',
    { class: 'token-view' },
    h('div', { class: 'section-head' }, h('h3', `Tokens (${tokens.length})`), picker),
    trainedNote(trained, tokens.length),
    text,
    readout,
  );
}
