/**
 * NFA to DFA: subset construction over byte classes, then the trim and minimisation that dfa.ts owns, so every
 * DFA made here can still reach an accepting state from each of its states.
 */
import { ConstraintError } from './constraint-error.ts';
import { DEAD, type Dfa, minimise } from './dfa.ts';
import type { WorkBudget } from './limits.ts';
import type { Nfa } from './nfa.ts';

/** Classes from the edges' range boundaries: two bytes share a class when no edge tells them apart. */
function nfaByteClasses(nfa: Nfa): { classOf: Uint8Array; classCount: number } {
  const boundary = new Uint8Array(257);
  for (const edges of nfa.edges) {
    for (const { lo, hi } of edges) {
      boundary[lo] = 1;
      boundary[hi + 1] = 1;
    }
  }
  const classOf = new Uint8Array(256);
  let current = 0;
  for (let byte = 0; byte < 256; byte += 1) {
    if (boundary[byte] && byte > 0) current += 1;
    classOf[byte] = current;
  }
  return { classOf, classCount: current + 1 };
}

/**
 * Epsilon closure of a set of NFA states, keeping only the states that tell subsets apart (those that read a
 * byte, and the accepting one); sorted, so equal subsets have equal keys.
 */
function closures(nfa: Nfa, budget: WorkBudget): (seeds: Iterable<number>) => number[] {
  const seen = new Int32Array(nfa.size).fill(-1);
  let epoch = 0;
  return (seeds) => {
    epoch += 1;
    const result: number[] = [];
    const stack = [...seeds];
    let steps = stack.length;
    while (stack.length > 0) {
      const state = stack.pop()!;
      steps += 1;
      if (seen[state] === epoch) continue;
      seen[state] = epoch;
      // Only states that read a byte (or accept) tell subsets apart; the others are just passages.
      if (nfa.edges[state].length > 0 || state === nfa.accept) result.push(state);
      for (const to of nfa.epsilons[state]) if (seen[to] !== epoch) stack.push(to);
    }
    budget.spend(steps + result.length);
    return result.sort((a, b) => a - b);
  };
}

/** The DFA under construction: one state per distinct subset, its row of `next` filled as the subset is expanded. */
class SubsetTable {
  readonly sets: number[][] = [];
  readonly next: number[] = [];
  readonly accepting: number[] = [];
  private readonly ids = new Map<string, number>();

  constructor(
    private readonly accept: number,
    private readonly classCount: number,
    private readonly maxStates: number,
    private readonly budget: WorkBudget,
  ) {}

  /** The state of `set`, made (with an empty row) when it is new. */
  intern(set: number[]): number {
    const key = set.join(',');
    let id = this.ids.get(key);
    if (id === undefined) {
      if (this.sets.length >= this.maxStates) throw new ConstraintError('unsupported', `a constraint this large (over ${this.maxStates} automaton states)`);
      this.budget.spend(this.classCount + key.length);
      id = this.sets.length;
      this.ids.set(key, id);
      this.sets.push(set);
      this.accepting.push(set.includes(this.accept) ? 1 : 0);
      for (let c = 0; c < this.classCount; c += 1) this.next.push(DEAD);
    }
    return id;
  }
}

/** Subset construction, then trim and minimise. Null when the language is empty. */
export function determinise(nfa: Nfa, maxStates: number, budget: WorkBudget): Dfa | null {
  const { classOf, classCount } = nfaByteClasses(nfa);
  const closure = closures(nfa, budget);
  const table = new SubsetTable(nfa.accept, classCount, maxStates, budget);
  table.intern(closure([nfa.start]));
  const buckets: number[][] = Array.from({ length: classCount }, () => []);
  const bySeeds = new Map<string, number>();
  for (let id = 0; id < table.sets.length; id += 1) {
    let steps = 0;
    for (const state of table.sets[id]) {
      for (const { lo, hi, to } of nfa.edges[state]) {
        for (let c = classOf[lo]; c <= classOf[hi]; c += 1) buckets[c].push(to);
        steps += classOf[hi] - classOf[lo] + 1;
      }
    }
    budget.spend(steps);
    for (let c = 0; c < classCount; c += 1) {
      if (buckets[c].length === 0) continue;
      budget.spend(buckets[c].length);
      // Many classes (and many states) step to the same few NFA states: close each seed set once.
      const seedKey = buckets[c].sort((a, b) => a - b).join(',');
      let target = bySeeds.get(seedKey);
      if (target === undefined) {
        target = table.intern(closure(buckets[c]));
        bySeeds.set(seedKey, target);
      }
      table.next[id * classCount + c] = target;
      buckets[c] = [];
    }
  }
  const dfa = { states: table.sets.length, classCount, classOf, start: 0, accepting: Uint8Array.from(table.accepting), next: Int32Array.from(table.next) };
  return minimise(dfa, budget);
}
