/**
 * A small seeded PRNG (mulberry32) so the corpus and the weights are the same on every machine.
 * Only integer arithmetic and IEEE-exact operations feed the uniform stream; the normal draw uses
 * Math.log/Math.cos, which V8 implements with its own fdlibm port on every platform.
 */
export class Prng {
  private state: number;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  /** Uniform in [0, 1) with 32 bits of resolution. */
  uniform(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  int(lowInclusive: number, highInclusive: number): number {
    return lowInclusive + Math.floor(this.uniform() * (highInclusive - lowInclusive + 1));
  }

  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.uniform() * items.length)];
  }

  /** Box-Muller; 1 - u keeps the log argument in (0, 1]. */
  normal(std: number): number {
    const u1 = 1 - this.uniform();
    const u2 = this.uniform();
    return std * Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
  }
}
