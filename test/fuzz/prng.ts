/**
 * The fuzzer's only source of chance: the tiny model recipe's seeded mulberry32 (one home for the generator),
 * with the draws the fuzzer needs on top, so a seed replays a run request for request. Nothing in the fuzzer
 * may call Math.random.
 */
import { Prng as Mulberry32 } from '../../models/recipe/prng.ts';

export class Prng {
  private readonly source: Mulberry32;

  constructor(seed: number) {
    this.source = new Mulberry32(seed);
  }

  /** A float in [0, 1). */
  next(): number {
    return this.source.uniform();
  }

  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    return this.source.pick(items);
  }

  /** One of `choices` by weight: [[weight, value], …]. */
  weighted<T>(choices: readonly (readonly [number, T])[]): T {
    const total = choices.reduce((sum, [weight]) => sum + weight, 0);
    let roll = this.next() * total;
    for (const [weight, value] of choices) {
      roll -= weight;
      if (roll < 0) return value;
    }
    return choices[choices.length - 1][1];
  }

  /** A short printable word, for names that should be valid. */
  word(length = 6): string {
    const letters = 'abcdefghijklmnopqrstuvwxyz0123456789';
    return Array.from({ length }, () => letters[this.int(letters.length)]).join('');
  }
}
