/**
 * The sampled tokens of a trajectory's choices, coloured by the sampler's probability (green likely, red
 * unlikely) or by the trajectory's advantage (the whole response gets one sign and strength: that is what
 * the update pushes every trained token by). One readout for hover and keyboard (focus, ← →) serves all
 * tokens, so 4,000 of them stay responsive. The trainer's logprob after the step is not stored yet.
 */
import { h, replace } from './dom.ts';
import { num } from './format.ts';

interface SampledToken {
  token: string;
  logprob: number;
}

export type TokenColouring = 'sampler' | 'advantage';

/** Hue 0 (red, p = 0) to 120 (green, p = 1) of the sampler's probability exp(logprob). */
export function samplerHue(logprob: number): number {
  return Math.round(120 * Math.min(1, Math.max(0, Math.exp(logprob))));
}

/** Green for a positive advantage, red for a negative one; stronger up to |A| = 2. */
export function advantageColour(advantage: number): { hue: number; alpha: number } {
  return { hue: advantage >= 0 ? 120 : 0, alpha: Math.round(Math.min(1, Math.abs(advantage) / 2) * 100) / 100 };
}

export function sampledTokens(items: unknown[]): SampledToken[] {
  return items.flatMap((item) => {
    const content = (item as { message?: unknown; logprobs?: { content?: unknown } | null } | null)?.logprobs?.content;
    if (!Array.isArray(content)) return [];
    return content.flatMap((entry: { token?: unknown; logprob?: unknown }) => (typeof entry?.token === 'string' && typeof entry.logprob === 'number' ? [{ token: entry.token, logprob: entry.logprob }] : []));
  });
}

function paint(span: HTMLElement, token: SampledToken, colouring: TokenColouring, advantage: number | null): void {
  if (colouring === 'advantage' && advantage !== null) {
    const { hue, alpha } = advantageColour(advantage);
    span.dataset.hue = String(hue);
    span.style.background = `hsl(${hue} 70% 55% / ${alpha})`;
  } else {
    const hue = samplerHue(token.logprob);
    span.dataset.hue = String(hue);
    span.style.background = `hsl(${hue} 70% 80%)`;
  }
}

export function tokenView(items: unknown[], advantage: number | null): HTMLElement {
  const tokens = sampledTokens(items);
  if (tokens.length === 0) {
    return h('section', { class: 'token-view' }, h('h3', 'Tokens'), h('p', { class: 'muted empty-tokens' }, 'No sampled logprobs in this trajectory: it was logged or sent without them, so there are no tokens to show (and RL trains on it only with allow_training_without_logprobs).'));
  }
  const readout = h('div', { class: 'token-readout', 'aria-live': 'polite' }, 'Hover a token (or focus the text and use ← →).');
  const text = h('div', { class: 'token-text', tabindex: '0', 'aria-label': `${tokens.length} sampled tokens` });
  const spans = tokens.map((token, index) => h('span', { class: 'tok', 'data-index': index, 'data-logprob': token.logprob }, token.token));
  text.append(...spans);
  const picker = h('select', { 'aria-label': 'Colour tokens by' }, h('option', { value: 'sampler' }, 'sampler probability'), h('option', { value: 'advantage', disabled: advantage === null }, advantage === null ? 'advantage (unknown here)' : `advantage (${num(advantage, 3)})`));
  const colour = () => spans.forEach((span, index) => paint(span, tokens[index], picker.value as TokenColouring, advantage));
  picker.addEventListener('change', colour);
  colour();
  let current = -1;
  const show = (index: number) => {
    spans[current]?.classList.remove('tok-current');
    current = Math.max(0, Math.min(tokens.length - 1, index));
    spans[current].classList.add('tok-current');
    const token = tokens[current];
    replace(readout, h('code', JSON.stringify(token.token)), ` #${current} · logprob ${num(token.logprob, 4)} · p ${num(Math.exp(token.logprob), 3)}`, advantage === null ? '' : ` · advantage ${num(advantage, 3)}`, ' · trainer logprob: not stored');
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
  return h('section', { class: 'token-view' }, h('div', { class: 'section-head' }, h('h3', `Tokens (${tokens.length})`), picker), text, readout);
}
