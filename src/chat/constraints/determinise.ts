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

/** Subset construction, then trim and minimise. Null when the language is empty. */
export function determinise(nfa: Nfa, maxStates: number, budget: WorkBudget): Dfa | null {
  const { classOf, classCount } = nfaByteClasses(nfa);
  const seen = new Int32Array(nfa.size).fill(-1);
  let epoch = 0;
  const closure = (seeds: Iterable<number>): number[] => {
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

  const ids = new Map<string, number>();
  const sets: number[][] = [];
  const next: number[] = [];
  const accepting: number[] = [];
  const intern = (set: number[]): number => {
    const key = set.join(',');
    let id = ids.get(key);
    if (id === undefined) {
      if (sets.length >= maxStates) throw new ConstraintError('unsupported', `a constraint this large (over ${maxStates} automaton states)`);
      budget.spend(classCount + key.length);
      id = sets.length;
      ids.set(key, id);
      sets.push(set);
      accepting.push(set.includes(nfa.accept) ? 1 : 0);
      for (let c = 0; c < classCount; c += 1) next.push(DEAD);
    }
    return id;
  };
  intern(closure([nfa.start]));
  const buckets: number[][] = Array.from({ length: classCount }, () => []);
  const bySeeds = new Map<string, number>();
  for (let id = 0; id < sets.length; id += 1) {
    let steps = 0;
    for (const state of sets[id]) {
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
        target = intern(closure(buckets[c]));
        bySeeds.set(seedKey, target);
      }
      next[id * classCount + c] = target;
      buckets[c] = [];
    }
  }
  return minimise({ states: sets.length, classCount, classOf, start: 0, accepting: Uint8Array.from(accepting), next: Int32Array.from(next) }, budget);
}

