/**
 * JSON's lexical pieces as patterns: the layout between tokens (flexible whitespace, a custom whitespace
 * pattern, or json.dumps' fixed ", " and ": "), strings (free, bounded in length, or the JSON encoding of
 * a character-level pattern), canonical literals for `const`/`enum`, and any JSON value up to a nesting
 * depth (what `json_object` and the empty schema mean).
 */
import { ANY_NUMBER } from './numbers.ts';
import { alt, chars, type CodeRange, complement, EMPTY, list, literal, optional, type Pattern, repeat, seq, subtract } from './pattern.ts';

/** How tokens are laid out: `gap` is any whitespace allowed after `{`/`[` and before `}`/`]`. */
export interface JsonLayout {
  gap: Pattern;
  itemSeparator: Pattern;
  keySeparator: Pattern;
}

/**
 * Whitespace runs are bounded: a model that keeps choosing newlines must still reach the end of the
 * value within its budget (xgrammar's `max_whitespace_cnt` for the same reason).
 */
const MAX_WHITESPACE = 16;
const WHITESPACE = chars([[0x09, 0x0a], [0x0d, 0x0d], [0x20, 0x20]]);

export function flexibleLayout(gap: Pattern = repeat(WHITESPACE, 0, MAX_WHITESPACE)): JsonLayout {
  return { gap, itemSeparator: seq(gap, literal(','), gap), keySeparator: seq(gap, literal(':'), gap) };
}

/** `disable_any_whitespace`: exactly Python json.dumps' default separators. */
export const COMPACT_LAYOUT: JsonLayout = { gap: EMPTY, itemSeparator: literal(', '), keySeparator: literal(': ') };

/** Characters a JSON string may hold unescaped. */
const PLAIN: CodeRange[] = subtract(complement([]), [[0x00, 0x1f], [0x22, 0x22], [0x5c, 0x5c]]);
const HEX = chars([[0x30, 0x39], [0x41, 0x46], [0x61, 0x66]]);
/** `\uXXXX` without surrogate halves, so that every escape is exactly one character (minLength stays honest). */
const UNICODE_ESCAPE = seq(
  literal('\\u'),
  alt(seq(chars([[0x30, 0x39], [0x41, 0x43], [0x45, 0x46], [0x61, 0x63], [0x65, 0x66]]), HEX, HEX, HEX), seq(chars([[0x44, 0x44], [0x64, 0x64]]), chars([[0x30, 0x37]]), HEX, HEX)),
);
/** One character of a JSON string, as written between the quotes. */
const STRING_CHAR = alt(chars(PLAIN), seq(literal('\\'), chars([[0x22, 0x22], [0x2f, 0x2f], [0x5c, 0x5c], [0x62, 0x62], [0x66, 0x66], [0x6e, 0x6e], [0x72, 0x72], [0x74, 0x74]])), UNICODE_ESCAPE);
/** Any character of a decoded string, for padding unanchored `pattern`s (escaped afterwards). */
export const ANY_CHAR = chars(complement([]));

const quoted = (body: Pattern) => seq(literal('"'), body, literal('"'));

export function jsonString(minLength = 0, maxLength: number | null = null): Pattern {
  return quoted(repeat(STRING_CHAR, minLength, maxLength));
}

/**
 * A pattern over decoded characters → the same strings as they appear inside JSON quotes: the quote,
 * the backslash and control characters are written as JSON.stringify writes them.
 */
export function escapeForJson(pattern: Pattern): Pattern {
  switch (pattern.kind) {
    case 'chars': {
      const plain = chars(subtract(pattern.ranges, [[0x00, 0x1f], [0x22, 0x22], [0x5c, 0x5c]]));
      const special: Pattern[] = [];
      for (const [lo, hi] of pattern.ranges) {
        for (let point = lo; point <= Math.min(hi, 0x5c); point += 1) {
          if (point < 0x20 || point === 0x22 || point === 0x5c) special.push(literal(JSON.stringify(String.fromCodePoint(point)).slice(1, -1)));
        }
      }
      return special.length === 0 ? plain : alt(plain, ...special);
    }
    case 'seq':
      return seq(...pattern.items.map(escapeForJson));
    case 'alt':
      return alt(...pattern.options.map(escapeForJson));
    case 'repeat':
      return repeat(escapeForJson(pattern.item), pattern.min, pattern.max);
    case 'list':
      return list(escapeForJson(pattern.item), escapeForJson(pattern.separator), pattern.min, pattern.max);
    case 'members':
      return { kind: 'members', separator: escapeForJson(pattern.separator), members: pattern.members.map((m) => ({ ...m, pattern: escapeForJson(m.pattern) })) };
    case 'dfa':
      throw new Error('an automaton works on bytes and cannot be re-escaped');
  }
}

/** JSON text of a value with json.dumps' separators: the one spelling `const` and `enum` produce. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(', ')}]`;
  if (value !== null && typeof value === 'object') {
    return `{${Object.entries(value).map(([key, item]) => `${JSON.stringify(key)}: ${canonicalJson(item)}`).join(', ')}}`;
  }
  return JSON.stringify(value);
}

export function jsonObject(layout: JsonLayout, members: Pattern): Pattern {
  return seq(literal('{'), layout.gap, members, layout.gap, literal('}'));
}

export function jsonArray(layout: JsonLayout, items: Pattern): Pattern {
  return seq(literal('['), layout.gap, items, layout.gap, literal(']'));
}

const SCALARS = [jsonString(), ANY_NUMBER, literal('true'), literal('false'), literal('null')];

/** Any JSON value whose objects and arrays nest at most `depth` deep (0: scalars only). */
export function anyJsonValue(layout: JsonLayout, depth: number): Pattern {
  if (depth <= 0) return alt(...SCALARS);
  const inner = anyJsonValue(layout, depth - 1);
  return alt(...SCALARS, anyJsonObject(layout, depth, inner), jsonArray(layout, optional(list(inner, layout.itemSeparator, 1, null))));
}

/** An object with any keys whose values are `value` (by default any JSON value one level less deep). */
export function anyJsonObject(layout: JsonLayout, depth: number, value: Pattern = anyJsonValue(layout, depth - 1)): Pattern {
  const member = seq(jsonString(), layout.keySeparator, value);
  return jsonObject(layout, optional(list(member, layout.itemSeparator, 1, null)));
}
