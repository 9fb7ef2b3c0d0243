/**
 * A word diff of two rollouts' assistant turns (longest common subsequence over words and spaces), for the
 * group view. Past a size where the quadratic table gets heavy it diffs whole lines instead.
 */
import type { TrajectoryDetail } from './api.ts';

export interface DiffPart {
  kind: 'same' | 'removed' | 'added';
  text: string;
}

const MAX_CELLS = 4_000_000;

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((part) => (typeof part?.text === 'string' ? part.text : '')).join('');
  return '';
}

/** What the model wrote: every assistant turn (a Choice's message included) with its tool calls. */
export function assistantText(trajectory: TrajectoryDetail): string {
  const items = trajectory.conversation.messages_and_choices;
  const turns = items.flatMap((item) => {
    const message = (item && typeof item.message === 'object' && item.message !== null ? item.message : item) as Record<
      string,
      unknown
    >;
    if (!message || (message !== item.message && message.role !== 'assistant')) return [];
    const calls = Array.isArray(message.tool_calls)
      ? message.tool_calls.map(
          (call: { function?: { name?: unknown; arguments?: unknown } }) =>
            `→ ${String(call.function?.name ?? '?')}(${String(call.function?.arguments ?? '')})`,
        )
      : [];
    return [[textOf(message.content), ...calls].filter(Boolean).join('\n')];
  });
  return turns.join('\n\n');
}

export function diffWords(before: string, after: string): DiffPart[] {
  let a = before.split(/(\s+)/).filter(Boolean);
  let b = after.split(/(\s+)/).filter(Boolean);
  if ((a.length + 1) * (b.length + 1) > MAX_CELLS) {
    a = before.split(/(?<=\n)/);
    b = after.split(/(?<=\n)/);
  }
  if ((a.length + 1) * (b.length + 1) > MAX_CELLS)
    return [
      { kind: 'removed', text: before },
      { kind: 'added', text: after },
    ];
  const width = b.length + 1;
  const table = new Uint32Array((a.length + 1) * width);
  for (let i = a.length - 1; i >= 0; i -= 1) {
    for (let j = b.length - 1; j >= 0; j -= 1) {
      table[i * width + j] =
        a[i] === b[j]
          ? table[(i + 1) * width + j + 1] + 1
          : Math.max(table[(i + 1) * width + j], table[i * width + j + 1]);
    }
  }
  const parts: DiffPart[] = [];
  const push = (kind: DiffPart['kind'], text: string) => {
    const last = parts.at(-1);
    if (last && last.kind === kind) last.text += text;
    else parts.push({ kind, text });
  };
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) {
      push('same', a[i]);
      i += 1;
      j += 1;
    } else if (table[(i + 1) * width + j] >= table[i * width + j + 1]) push('removed', a[i++]);
    else push('added', b[j++]);
  }
  while (i < a.length) push('removed', a[i++]);
  while (j < b.length) push('added', b[j++]);
  return parts;
}
