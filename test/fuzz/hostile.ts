/**
 * Hostile values for the fuzzer: wrong types, edge numbers (some not JSON at all), strange unicode, huge
 * strings and arrays, and nesting thousands deep. Deep and huge values are built as JSON text (`Raw`), because
 * building them as objects would overflow the fuzzer's own stack before the server ever saw them.
 */
import type { Prng } from './prng.ts';

/** JSON text spliced into a body as is by `serialize`. */
export class Raw {
  constructor(readonly text: string) {}
}

/** JSON.stringify that splices `Raw` values in verbatim. */
export function serialize(value: unknown): string {
  if (value instanceof Raw) return value.text;
  const raws: string[] = [];
  const text =
    JSON.stringify(value, (_key, inner) =>
      inner instanceof Raw ? `\u0000raw${raws.push(inner.text) - 1}\u0000` : inner,
    ) ?? '';
  return text.replace(/"\\u0000raw(\d+)\\u0000"/g, (_match, index: string) => raws[Number(index)]);
}

const WRONG_TYPES: unknown[] = [null, true, false, 0, 1, '', 'true', [], {}, [null], { '': null }, [[]], 'null'];

const NUMBERS: unknown[] = [
  -1,
  -0.5,
  0,
  1.5,
  2 ** 31,
  2 ** 32 + 1,
  2 ** 53 + 2,
  -(2 ** 63),
  2 ** 64,
  1e308,
  -1e308,
  5e-324,
  '12',
  '-1',
  new Raw('-0'),
  new Raw('1e999'),
  new Raw('-1e999'),
  new Raw('NaN'),
  new Raw('Infinity'),
  new Raw('-Infinity'),
  new Raw('123456789012345678901234567890123456789'),
  new Raw('0x10'),
  new Raw('1E400'),
  new Raw('01'),
];

const STRINGS: string[] = [
  '',
  ' ',
  '\u0000',
  'a\u0000b',
  '\ud800',
  '\udfff\ud800',
  '\u202eevil',
  '\ufeff',
  '\u200b\u200d',
  '🤖🧪'.repeat(500),
  `a${'\u0301'.repeat(20_000)}`,
  '../../../../etc/passwd',
  '..\\..\\windows',
  '%2e%2e%2f',
  '%00',
  '/',
  'a/b',
  'C:\\x',
  "'; drop table models; --",
  '<script>alert(1)</script>',
  '{{ 7*7 }}',
  '{% for i in range(9) %}x{% endfor %}',
  'ｆｕｌｌｗｉｄｔｈ',
  '\r\n\r\n',
  '\\',
  '"',
  'null',
  'NaN',
  '-1',
  'wandb-artifact:///fuzz-b/fz/data:v0',
  'file:///etc/passwd',
  'http://169.254.169.254/latest/meta-data/',
  '\x1b[31mred',
  'ß'.repeat(1000),
  'İ'.repeat(1000),
];

/** Structures whose keys or shape are themselves the attack. */
const SPECIAL_OBJECTS: unknown[] = [
  new Raw('{"__proto__":{"polluted":1}}'),
  { constructor: { prototype: { polluted: 1 } } },
  new Raw('{"a":1,"a":2}'),
  new Raw('{"":{"":{"":[]}}}'),
  { toString: 'x', valueOf: 1, hasOwnProperty: null },
];

export function hugeString(rng: Prng): string {
  const size = rng.weighted([
    [6, 10_000],
    [3, 200_000],
    [2, 2_000_000],
    [0.2, 20_000_000],
  ] as const);
  return rng.pick(['x', 'é', '🤖', 'ab ', '\\"']).repeat(size);
}

/** Nesting `depth` deep, as text: objects, arrays, or JSON schemas of arrays of arrays. */
export function deepNesting(rng: Prng, depth = rng.pick([64, 1000, 5000, 20_000, 100_000])): Raw {
  const [open, leaf, close] = rng.pick([
    ['{"a":', '1', '}'],
    ['[', '0', ']'],
    ['{"type":"array","items":', '{"type":"string"}', '}'],
    ['{"type":"object","properties":{"a":', '{"type":"integer"}', '}}'],
    ['{"anyOf":[', '{"type":"null"}', ']}'],
  ] as const);
  return new Raw(open.repeat(depth) + leaf + close.repeat(depth));
}

/** A long array as text: numbers, strings or objects. */
export function hugeArray(rng: Prng, length = rng.pick([1000, 40_000, 200_000, 1_000_000])): Raw {
  const item = rng.pick(['0', '"x"', '{}', '[]', 'null', '-1']);
  return new Raw(`[${Array(length).fill(item).join(',')}]`);
}

export function weirdString(rng: Prng): string {
  return rng.pick(STRINGS);
}

export function hostileValue(rng: Prng): unknown {
  const make = rng.weighted<() => unknown>([
    [4, () => rng.pick(WRONG_TYPES)],
    [3, () => rng.pick(NUMBERS)],
    [3, () => weirdString(rng)],
    [1, () => rng.pick(SPECIAL_OBJECTS)],
    [1, () => hugeString(rng)],
    [1, () => deepNesting(rng)],
    [1, () => hugeArray(rng)],
  ]);
  return make();
}
