/**
 * The pattern language every constraint compiles to before it becomes an automaton: code point sets,
 * sequences, alternatives and bounded or unbounded repetition, plus two shapes that JSON needs and that
 * plain regular expressions can only write with exponential copies (separated lists, ordered optional
 * members) and an embedded DFA (the result of an intersection). Also the error every compiler throws.
 * Knows nothing of bytes, regex syntax or JSON schema.
 */
import type { Dfa } from './dfa.ts';

/** An inclusive code point range. */
export type CodeRange = readonly [number, number];

export type Pattern =
  /** One code point from the set, written in UTF-8. */
  | { kind: 'chars'; ranges: readonly CodeRange[] }
  | { kind: 'seq'; items: readonly Pattern[] }
  /** No options at all is the empty language. */
  | { kind: 'alt'; options: readonly Pattern[] }
  | { kind: 'repeat'; item: Pattern; min: number; max: number | null }
  /** `item (separator item)*` with a count in [min, max]; one copy of `item` when unbounded. */
  | { kind: 'list'; item: Pattern; separator: Pattern; min: number; max: number | null }
  /** Members in this order, each present or (when optional) absent, the present ones separated. */
  | { kind: 'members'; members: readonly { pattern: Pattern; required: boolean }[]; separator: Pattern }
  | { kind: 'dfa'; dfa: Dfa };

export const MAX_CODE_POINT = 0x10ffff;
export const SURROGATES: CodeRange = [0xd800, 0xdfff];

export const EMPTY: Pattern = { kind: 'seq', items: [] };
export const NOTHING: Pattern = { kind: 'alt', options: [] };

export function chars(ranges: readonly CodeRange[]): Pattern {
  return { kind: 'chars', ranges: normaliseRanges(ranges) };
}

export function literal(text: string): Pattern {
  const items = [...text].map((character) => {
    const point = character.codePointAt(0)!;
    return { kind: 'chars', ranges: [[point, point]] } as Pattern;
  });
  return items.length === 1 ? items[0] : { kind: 'seq', items };
}

export function seq(...items: Pattern[]): Pattern {
  const flat = items.flatMap((item) => (item.kind === 'seq' ? item.items : [item]));
  if (flat.some(isNothing)) return NOTHING;
  return flat.length === 1 ? flat[0] : { kind: 'seq', items: flat };
}

export function alt(...options: Pattern[]): Pattern {
  const live = options.flatMap((option) => (option.kind === 'alt' ? option.options : [option]));
  return live.length === 1 ? live[0] : { kind: 'alt', options: live };
}

export function repeat(item: Pattern, min: number, max: number | null): Pattern {
  if (max !== null && max < min) return NOTHING;
  if (isNothing(item)) return min === 0 ? EMPTY : NOTHING;
  if (min === 1 && max === 1) return item;
  if (max === 0) return EMPTY;
  return { kind: 'repeat', item, min, max };
}

export const optional = (item: Pattern): Pattern => repeat(item, 0, 1);

export function list(item: Pattern, separator: Pattern, min: number, max: number | null): Pattern {
  if (max !== null && max < min) return NOTHING;
  if (max === 0 || (isNothing(item) && min === 0)) return EMPTY;
  if (isNothing(item)) return NOTHING;
  return { kind: 'list', item, separator, min, max };
}

/** The empty language: nothing matches (an alternation without options). */
export function isNothing(pattern: Pattern): boolean {
  return pattern.kind === 'alt' && pattern.options.length === 0;
}

/** Sorted, merged ranges. */
export function normaliseRanges(ranges: readonly CodeRange[]): CodeRange[] {
  const sorted = ranges.filter(([lo, hi]) => lo <= hi).sort((a, b) => a[0] - b[0]);
  const merged: [number, number][] = [];
  for (const [lo, hi] of sorted) {
    const last = merged.at(-1);
    if (last && lo <= last[1] + 1) last[1] = Math.max(last[1], hi);
    else merged.push([lo, hi]);
  }
  return merged;
}

/** Every code point (surrogates excluded: UTF-8 cannot carry them) outside `ranges`. */
export function complement(ranges: readonly CodeRange[]): CodeRange[] {
  const result: CodeRange[] = [];
  let next = 0;
  for (const [lo, hi] of normaliseRanges([...ranges, SURROGATES])) {
    if (lo > next) result.push([next, lo - 1]);
    next = hi + 1;
  }
  if (next <= MAX_CODE_POINT) result.push([next, MAX_CODE_POINT]);
  return result;
}

/** Code points in `ranges` but not in `removed`. */
export function subtract(ranges: readonly CodeRange[], removed: readonly CodeRange[]): CodeRange[] {
  const keep = complement(removed);
  const result: CodeRange[] = [];
  for (const [lo, hi] of normaliseRanges(ranges)) {
    for (const [klo, khi] of keep) {
      const from = Math.max(lo, klo);
      const to = Math.min(hi, khi);
      if (from <= to) result.push([from, to]);
    }
  }
  return normaliseRanges(result);
}
