/**
 * `<think>` reasoning (Qwen3, DeepSeek-R1 and our built-in model): the one home of its markers and of how a
 * reasoning block is found at the front of generated text, streaming (token by token, holding back what
 * could still become a marker) or whole (a stored message, as the dashboard shows it).
 */
import { partialMarkerLength } from './tool-calls/format.ts';

export const THINK_OPEN = '<think>';
export const THINK_CLOSE = '</think>';

/**
 * Whether `text` (from the start of the output) opens a reasoning block: `open` with the characters the
 * opening takes, `wait` while it could still become one, `none` when it cannot.
 */
export function reasoningStart(
  text: string,
  final: boolean,
): { kind: 'open'; length: number } | { kind: 'wait' | 'none' } {
  const trimmed = text.trimStart();
  if (trimmed.startsWith(THINK_OPEN)) return { kind: 'open', length: text.length - trimmed.length + THINK_OPEN.length };
  return !final && THINK_OPEN.startsWith(trimmed) ? { kind: 'wait' } : { kind: 'none' };
}

/**
 * The reasoning inside an open block: `reasoning` is text that is surely reasoning, `consumed` how much of
 * `text` was used (the close marker included), `closed` whether the block ended.
 */
export function reasoningBody(text: string, final: boolean): { reasoning: string; consumed: number; closed: boolean } {
  const close = text.indexOf(THINK_CLOSE);
  if (close !== -1) return { reasoning: text.slice(0, close), consumed: close + THINK_CLOSE.length, closed: true };
  const hold = final ? 0 : partialMarkerLength(text, [THINK_CLOSE]);
  return { reasoning: text.slice(0, text.length - hold), consumed: text.length - hold, closed: false };
}

/** A whole message's leading reasoning block (an unclosed one runs to the end) and the answer after it. */
export function splitReasoning(content: string): { reasoning: string | null; answer: string } {
  const start = reasoningStart(content, true);
  if (start.kind !== 'open') return { reasoning: null, answer: content };
  const body = reasoningBody(content.slice(start.length), true);
  return { reasoning: body.reasoning.trim(), answer: content.slice(start.length + body.consumed).trimStart() };
}

/** Whether the text holds a reasoning block anywhere. */
export function mentionsReasoning(content: string): boolean {
  return content.includes(THINK_OPEN);
}
