/**
 * A conversation → one SFT row as ART builds it (training-rows.md §4): the whole conversation rendered once
 * (with tools, no generation prompt), trained on its assistant spans. A span starts after the template's
 * assistant header and runs to the next turn's opening token (so the end-of-turn token, and for ChatML the
 * newline after it, are trained, as ART's response/instruction markers train them); system, user and tool
 * turns are masked. Markers come from the template itself, so every family is handled the same way.
 */
import { asMessage } from '../../trajectories/items.ts';
import type { TrainingRenderer, TrainingSequence } from '../render.ts';

export type AssistantTurns = 'all' | 'last';

interface Markers {
  /** What opens an assistant turn, e.g. `<|im_start|>assistant\n`. */
  header: string;
  /** The special token every turn opens with, e.g. `<|im_start|>`. */
  turnStart: string;
}

function commonPrefix(texts: string[]): string {
  let length = 0;
  while (texts.every((text) => length < text.length && text[length] === texts[0][length])) length += 1;
  return texts[0].slice(0, length);
}

/**
 * The assistant header as this template renders it in every position: the common part of its generation
 * prompt, an earlier assistant turn and the last one (Qwen3 adds a think block to some of them only).
 */
function markers(renderer: TrainingRenderer): Markers | null {
  const first = 'SFTMARKERFIRST';
  const last = 'SFTMARKERLAST';
  const user = { role: 'user', content: 'marker probe' };
  const before = renderer.text([user], false);
  const prompt = renderer.text([user], true);
  const two = renderer.text(
    [user, { role: 'assistant', content: first }, user, { role: 'assistant', content: last }],
    false,
  );
  const afterFirst = two.indexOf(first) + first.length;
  const lastTurnStart = renderer.text([user, { role: 'assistant', content: first }, user], false).length;
  if (
    !prompt.startsWith(before) ||
    !two.startsWith(before) ||
    afterFirst < first.length ||
    two.indexOf(last) < lastTurnStart
  )
    return null;
  const header = commonPrefix([
    prompt.slice(before.length),
    two.slice(before.length, two.indexOf(first)),
    two.slice(lastTurnStart, two.indexOf(last)),
  ]);
  const turnStart = [...renderer.tokenizer.addedTokenIds.keys()]
    .filter((token) => token !== '' && header.startsWith(token))
    .sort((a, b) => b.length - a.length)[0];
  return header && turnStart ? { header, turnStart } : null;
}

/** [start, end) character ranges of the assistant spans in a rendering. */
function assistantSpans(text: string, found: Markers): [number, number][] {
  const spans: [number, number][] = [];
  for (let at = text.indexOf(found.header); at !== -1; at = text.indexOf(found.header, at + 1)) {
    const start = at + found.header.length;
    const next = text.indexOf(found.turnStart, start);
    spans.push([start, next === -1 ? text.length : next]);
  }
  return spans;
}

/** One row for a conversation (messages, or a trajectory's messages and choices); null when it has no assistant span. */
export function tokenizeConversation(
  renderer: TrainingRenderer,
  items: Record<string, unknown>[],
  turns: AssistantTurns,
): TrainingSequence | null {
  const found = markers(renderer);
  if (!found) return null;
  const text = renderer.text(items.map(asMessage), false);
  const all = assistantSpans(text, found);
  const spans = turns === 'last' ? all.slice(-1) : all;
  if (spans.length === 0) return null;
  const sequence: TrainingSequence = { tokens: [], mask: [], logprobs: [] };
  const push = (ids: number[], trained: 0 | 1) => {
    for (const id of ids) {
      sequence.tokens.push(id);
      sequence.mask.push(trained);
      sequence.logprobs.push(null);
    }
  };
  // Piece by piece: a span boundary is a turn boundary, where the whole rendering's tokens break too.
  let cursor = 0;
  for (const [start, end] of spans) {
    const masked = text.slice(cursor, start);
    push(cursor === 0 ? renderer.ids(masked) : renderer.tokenizer.encode(masked), 0);
    push(renderer.tokenizer.encode(text.slice(start, end)), 1);
    cursor = end;
  }
  if (cursor < text.length) push(renderer.tokenizer.encode(text.slice(cursor)), 0);
  return sequence;
}
