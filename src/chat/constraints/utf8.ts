/**
 * Code point ranges as UTF-8 byte-range sequences, so that a character class becomes a handful of byte
 * paths in the automaton (the splitting of Rust's regex-syntax `Utf8Sequences`): each sequence is a list
 * of byte ranges, one per byte of the encoding, and a code point is in the class exactly when its bytes
 * fall in the ranges of one sequence.
 */
import { SURROGATES } from './pattern.ts';

export type ByteRange = readonly [number, number];

const LAST_OF_LENGTH = [0x7f, 0x7ff, 0xffff];

function encode(point: number): number[] {
  if (point <= 0x7f) return [point];
  if (point <= 0x7ff) return [0xc0 | (point >> 6), 0x80 | (point & 0x3f)];
  if (point <= 0xffff) return [0xe0 | (point >> 12), 0x80 | ((point >> 6) & 0x3f), 0x80 | (point & 0x3f)];
  return [0xf0 | (point >> 18), 0x80 | ((point >> 12) & 0x3f), 0x80 | ((point >> 6) & 0x3f), 0x80 | (point & 0x3f)];
}

export function utf8Sequences(lo: number, hi: number): ByteRange[][] {
  const sequences: ByteRange[][] = [];
  const pending: [number, number][] = [[lo, hi]];
  next: while (pending.length > 0) {
    let [start, end] = pending.pop()!;
    for (;;) {
      // Surrogates have no UTF-8 encoding: cut them out.
      if (start <= SURROGATES[1] && end >= SURROGATES[0]) {
        if (end > SURROGATES[1]) pending.push([SURROGATES[1] + 1, end]);
        end = SURROGATES[0] - 1;
      }
      if (start > end) continue next;
      // One encoded length per range.
      const boundary = LAST_OF_LENGTH.find((last) => start <= last && last < end);
      if (boundary !== undefined) {
        pending.push([boundary + 1, end]);
        end = boundary;
        continue;
      }
      if (end <= 0x7f) {
        sequences.push([[start, end]]);
        continue next;
      }
      // Split until every continuation byte spans a whole range independently of the ones before it.
      let split = false;
      for (let continuation = 1; continuation < 4 && !split; continuation += 1) {
        const mask = (1 << (6 * continuation)) - 1;
        if ((start & ~mask) === (end & ~mask)) continue;
        if ((start & mask) !== 0) {
          pending.push([(start | mask) + 1, end]);
          end = start | mask;
          split = true;
        } else if ((end & mask) !== mask) {
          pending.push([end & ~mask, end]);
          end = (end & ~mask) - 1;
          split = true;
        }
      }
      if (split) continue;
      const from = encode(start);
      const to = encode(end);
      sequences.push(from.map((byte, index) => [byte, to[index]] as const));
      continue next;
    }
  }
  return sequences;
}
