/**
 * One assistant reply of the playground: its DOM, the streaming chat completion read event by event into
 * token pieces (each keeps its logprobs for the tip), reasoning and tool calls, and the closing summary line.
 */
import type { ChatCompletionChunk, ChatLogprob, ChatUsage } from '../../../src/api/chat.ts';
import { authHeaders, errorMessage } from '../api.ts';
import { h, replace } from '../dom.ts';

/** A streamed piece of the reply, carrying the logprobs of the tokens it holds. */
export type TokenPiece = HTMLElement & { logprobs?: ChatLogprob[] };

export interface ReplyView {
  reasoning: HTMLDetailsElement;
  reasoningBox: HTMLDivElement;
  tokens: HTMLDivElement;
  tools: HTMLDivElement;
  footer: HTMLElement;
}

/** What the stream told so far; kept outside the stream so a stopped reply still knows what arrived. */
export interface StreamState {
  started: number;
  firstTokenAt: number | null;
  pieces: number;
  content: string;
  finish: string;
  usage: ChatUsage | null;
  calls: { name: string; arguments: string }[];
}

/** One `data:` event: a chunk, or the error event that ends a stream failing midway. */
type StreamEvent = ChatCompletionChunk | { error: { message?: string } };
type Choice = ChatCompletionChunk['choices'][number];

/** How sure the model was of a piece: 0 (sure) … 3 (surprised), for colouring. */
function surpriseClass(logprob: number): string {
  const p = Math.exp(logprob);
  return p > 0.9 ? 'lp-0' : p > 0.5 ? 'lp-1' : p > 0.1 ? 'lp-2' : 'lp-3';
}

export function replyView(): ReplyView {
  const reasoningBox = h('div', { class: 'text reasoning-text' });
  return {
    reasoningBox,
    reasoning: h('details', { class: 'reasoning', open: true, hidden: true }, h('summary', 'Reasoning'), reasoningBox),
    tokens: h('div', {
      class: 'reply-tokens text',
      tabindex: '0',
      'aria-label': 'Reply; use the arrow keys to read token logprobs',
    }),
    tools: h('div', { class: 'reply-tools' }),
    footer: h('footer', { class: 'msg-foot muted small' }, 'waiting for the first token…'),
  };
}

export function newStreamState(): StreamState {
  return { started: performance.now(), firstTokenAt: null, pieces: 0, content: '', finish: '', usage: null, calls: [] };
}

function appendContent(state: StreamState, view: ReplyView, log: HTMLElement, choice: Choice, content: string): void {
  state.firstTokenAt ??= performance.now();
  const entries = choice.logprobs?.content ?? [];
  const piece: TokenPiece = h(
    'span',
    {
      class: `tok ${entries.length > 0 ? surpriseClass(entries.reduce((least, entry) => Math.min(least, entry.logprob), 0)) : ''}`,
    },
    content,
  );
  piece.logprobs = entries;
  view.tokens.append(piece);
  state.content += content;
  state.pieces += 1;
  view.footer.textContent = `${state.pieces} pieces…`;
  log.scrollTop = log.scrollHeight;
}

/** One `data:` line of the stream. */
function applyChunk(state: StreamState, view: ReplyView, log: HTMLElement, data: string): void {
  if (data === '[DONE]') return;
  const event = JSON.parse(data) as StreamEvent;
  if ('error' in event) throw new Error(event.error.message ?? 'The stream failed');
  if (event.usage) state.usage = event.usage;
  const choice = event.choices[0];
  if (!choice) return;
  const delta = choice.delta;
  const thought = delta.reasoning;
  if (thought) {
    view.reasoning.hidden = false;
    view.reasoningBox.append(thought);
  }
  if (delta.content) appendContent(state, view, log, choice, delta.content);
  for (const call of delta.tool_calls ?? []) {
    state.calls[call.index] ??= { name: '', arguments: '' };
    state.calls[call.index].name += call.function.name;
    state.calls[call.index].arguments += call.function.arguments;
  }
  if (choice.finish_reason) state.finish = choice.finish_reason;
}

async function failureMessage(response: Response): Promise<string> {
  const text = await response.text();
  let parsed: unknown = null;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = null;
  }
  return errorMessage(response.status, parsed);
}

/** Hands every `data:` line of a server-sent event stream to `onData`, in order. */
async function readEvents(reader: ReadableStreamDefaultReader<string>, onData: (data: string) => void): Promise<void> {
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    for (let boundary = buffer.indexOf('\n\n'); boundary !== -1; boundary = buffer.indexOf('\n\n')) {
      const event = buffer.slice(0, boundary);
      buffer = buffer.slice(boundary + 2);
      for (const line of event.split('\n')) if (line.startsWith('data: ')) onData(line.slice(6));
    }
  }
}

/** Posts the chat request and streams its reply into the view until the stream ends (or `signal` stops it). */
export async function streamReply(
  state: StreamState,
  body: unknown,
  view: ReplyView,
  log: HTMLElement,
  signal: AbortSignal,
): Promise<void> {
  const response = await fetch('/v1/chat/completions', {
    method: 'POST',
    headers: { ...authHeaders(), 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify(body),
    signal,
  });
  if (!response.ok || !response.body) throw new Error(await failureMessage(response));
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  await readEvents(reader, (data) => applyChunk(state, view, log, data));
}

/** The tool calls and the summary line of a reply that streamed to its end. */
export function showFinished(state: StreamState, view: ReplyView): void {
  replace(
    view.tools,
    state.calls.map((call) =>
      h(
        'div',
        { class: 'tool-call' },
        h(
          'div',
          { class: 'tool-call-head' },
          h('span', { class: 'pill pill-tool' }, 'tool call'),
          h('code', { class: 'tool-name' }, call.name),
        ),
        h('pre', { class: 'code' }, call.arguments),
      ),
    ),
  );
  const seconds = (performance.now() - state.started) / 1000;
  const generated = state.usage?.completion_tokens ?? state.pieces;
  const ttft = state.firstTokenAt === null ? null : (state.firstTokenAt - state.started) / 1000;
  view.footer.textContent = `${generated} tokens · ${(generated / Math.max(seconds, 1e-3)).toFixed(1)} tokens/s · first token ${ttft === null ? '—' : `${(ttft * 1000).toFixed(0)} ms`} · finish: ${state.finish || 'stopped'}`;
  view.footer.dataset.finish = state.finish || 'stopped';
  if (!state.content && state.calls.length === 0) view.tokens.append(h('span', { class: 'muted' }, '(empty reply)'));
}
