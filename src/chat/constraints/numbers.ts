/**
 * JSON numbers as patterns: any integer, any number, and exact ranges: integers between optional bounds,
 * and decimals (no exponent) between optional integer bounds, inclusive or exclusive. Ranges are written
 * digit by digit, as `to-regex-range` does, with BigInt so that bounds beyond 2^53 stay exact.
 */
import { alt, chars, literal, NOTHING, optional, type Pattern, repeat, seq } from './pattern.ts';
import { unsupported } from './constraint-error.ts';

/**
 * Every run of free digits (integer part, fraction, exponent) is bounded, as whitespace runs are: a model
 * that keeps choosing digits must still close the value within its budget (outlines' `safe_subset` bounds
 * integer digits for the same reason). 24 is beyond what int64 (19 digits) or a double (17 significant
 * digits) holds, so the numbers programs write are not cut off.
 */
export const MAX_DIGITS = 24;
const DIGIT = chars([[0x30, 0x39]]);
const digits = (min: number) => repeat(DIGIT, min, MAX_DIGITS);
const NONZERO = chars([[0x31, 0x39]]);
const digitRange = (lo: number, hi: number) => chars([[0x30 + lo, 0x30 + hi]]);
const UNSIGNED = alt(literal('0'), seq(NONZERO, repeat(DIGIT, 0, MAX_DIGITS - 1)));
const FRACTION = seq(literal('.'), digits(1));
/** Fraction digits that are not all zeros: some zeros, a nonzero digit, then the rest of the MAX_DIGITS. */
const NONZERO_FRACTION = alt(
  ...Array.from({ length: MAX_DIGITS }, (_, zeros) => seq(repeat(literal('0'), zeros, zeros), NONZERO, repeat(DIGIT, 0, MAX_DIGITS - 1 - zeros))),
);

const ANY_INTEGER = seq(optional(literal('-')), UNSIGNED);
export const ANY_NUMBER = seq(ANY_INTEGER, optional(FRACTION), optional(seq(chars([[0x45, 0x45], [0x65, 0x65]]), optional(chars([[0x2b, 0x2b], [0x2d, 0x2d]])), digits(1))));

/** Decimal strings of one length, digit by digit, between `lo` and `hi` (same length, lo ≤ hi). */
function sameLength(lo: string, hi: string): Pattern {
  if (lo === hi) return literal(lo);
  if (lo[0] === hi[0]) return seq(literal(lo[0]), sameLength(lo.slice(1), hi.slice(1)));
  const rest = lo.length - 1;
  // Whole runs of free digits wherever the bound's remaining digits are all 0 (below) or all 9 (above),
  // which keeps the recursion to one branch per side.
  const fromZero = /^0*$/.test(lo.slice(1));
  const toNine = /^9*$/.test(hi.slice(1));
  const first = Number(lo[0]) + (fromZero ? 0 : 1);
  const last = Number(hi[0]) - (toNine ? 0 : 1);
  const options: Pattern[] = [];
  if (!fromZero) options.push(seq(literal(lo[0]), sameLength(lo.slice(1), '9'.repeat(rest))));
  if (first <= last) options.push(seq(digitRange(first, last), repeat(DIGIT, rest, rest)));
  if (!toNine) options.push(seq(literal(hi[0]), sameLength('0'.repeat(rest), hi.slice(1))));
  return alt(...options);
}

/** Non-negative integers in [lo, hi] (hi null: unbounded), written without leading zeros. */
function naturals(lo: bigint, hi: bigint | null): Pattern {
  if (hi !== null && hi < lo) return NOTHING;
  const loText = lo.toString();
  const options: Pattern[] = [];
  const lastLength = hi === null ? loText.length : hi.toString().length;
  for (let length = loText.length; length <= lastLength; length += 1) {
    const from = length === loText.length ? loText : `1${'0'.repeat(length - 1)}`;
    const to = hi !== null && length === lastLength ? hi.toString() : '9'.repeat(length);
    options.push(sameLength(from, to));
  }
  // Every longer number is above the bound.
  if (hi === null) options.push(seq(NONZERO, repeat(DIGIT, loText.length, Math.max(loText.length, MAX_DIGITS - 1))));
  return alt(...options);
}

/** Integers in [lo, hi]; null bounds are open. */
export function integerRange(lo: bigint | null, hi: bigint | null): Pattern {
  if (lo === null && hi === null) return ANY_INTEGER;
  if (lo !== null && hi !== null && hi < lo) return NOTHING;
  const options: Pattern[] = [];
  if (hi === null || hi >= 0n) options.push(naturals(lo === null || lo < 0n ? 0n : lo, hi));
  if (lo === null || lo < 0n) {
    // Negatives as "-" and a magnitude of at least 1 (never "-0").
    const smallest = hi === null || hi >= 0n ? 1n : -hi;
    options.push(seq(literal('-'), naturals(smallest, lo === null ? null : -lo)));
  }
  return alt(...options);
}

export interface Bound {
  value: bigint;
  exclusive: boolean;
}

/**
 * Non-negative decimals (integer part, optional fraction) between integer bounds. The integer part alone
 * decides everything except at the bounds themselves: at a lower bound an exclusive one needs a fraction
 * that is not all zeros, and at an upper bound only an all-zero fraction stays inside.
 */
function nonNegativeDecimals(lo: Bound, hi: Bound | null): Pattern {
  const anyFraction = optional(FRACTION);
  const options: Pattern[] = [];
  const innerLo = lo.exclusive ? lo.value + 1n : lo.value;
  const innerHi = hi === null ? null : hi.value - 1n;
  if (innerHi === null || innerLo <= innerHi) options.push(seq(naturals(innerLo, innerHi), anyFraction));
  if (lo.exclusive && (hi === null || lo.value < hi.value)) {
    options.push(seq(literal(lo.value.toString()), literal('.'), NONZERO_FRACTION));
  }
  if (hi !== null && !hi.exclusive && (hi.value > lo.value || (hi.value === lo.value && !lo.exclusive))) {
    options.push(seq(literal(hi.value.toString()), optional(seq(literal('.'), repeat(literal('0'), 1, MAX_DIGITS)))));
  }
  return alt(...options);
}

/** Decimals without exponent in the range the bounds describe (null: open). */
export function decimalRange(lo: Bound | null, hi: Bound | null): Pattern {
  if (lo === null && hi === null) return ANY_NUMBER;
  const options: Pattern[] = [];
  const zero: Bound = { value: 0n, exclusive: false };
  // x ≥ 0: from max(lo, 0).
  if (hi === null || hi.value > 0n || (hi.value === 0n && !hi.exclusive)) {
    options.push(nonNegativeDecimals(lo === null || lo.value < 0n ? zero : lo, hi));
  }
  // x ≤ 0 written as "-" and a magnitude m = -x; "-0" is 0, inside whenever this side is.
  if (lo === null || lo.value < 0n) {
    const magnitudeLo: Bound = hi === null || hi.value >= 0n ? zero : { value: -hi.value, exclusive: hi.exclusive };
    const magnitudeHi: Bound | null = lo === null ? null : { value: -lo.value, exclusive: lo.exclusive };
    if (hi !== null && hi.value === 0n && hi.exclusive) {
      // x < 0: the magnitude must not be zero.
      options.push(seq(literal('-'), nonNegativeDecimals({ value: 0n, exclusive: true }, magnitudeHi)));
    } else {
      options.push(seq(literal('-'), nonNegativeDecimals(magnitudeLo, magnitudeHi)));
    }
  }
  return alt(...options);
}

/** A schema bound as a BigInt, or a refusal when it is not an integer. */
export function integerBound(value: unknown, keyword: string, roundUp: boolean | null): bigint | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'number' || !Number.isFinite(value)) throw unsupported(`a non-numeric \`${keyword}\``);
  if (Number.isInteger(value)) return BigInt(value);
  if (roundUp === null) throw unsupported(`a non-integer \`${keyword}\` on a number`);
  return BigInt(roundUp ? Math.ceil(value) : Math.floor(value));
}
