/**
 * Patterns → a byte-level NFA (Thompson's construction over byte ranges): character sets become their
 * UTF-8 byte paths, repetition copies its item, and the JSON shapes (`list`, `members`) are built as
 * small graphs that share their parts instead of copying them. Knows nothing of determinisation.
 */
import type { Dfa } from './dfa.ts';
import type { CodeRange, Pattern } from './pattern.ts';
import { ConstraintError } from './constraint-error.ts';
import { utf8Sequences } from './utf8.ts';
import type { WorkBudget } from './limits.ts';

export interface ByteEdge {
  lo: number;
  hi: number;
  to: number;
}

/**
 * Building the NFA costs more per state and edge than the subset construction does per step (arrays,
 * UTF-8 expansion, and the GC that follows): measured on bench/constraint-limits.ts, about six times.
 */
const STATE_STEPS = 48;
const EDGE_STEPS = 6;

export class Nfa {
  readonly epsilons: number[][] = [];
  readonly edges: ByteEdge[][] = [];
  start = 0;
  accept = 0;

  constructor(
    private readonly maxStates: number,
    private readonly budget: WorkBudget,
  ) {}

  get size(): number {
    return this.edges.length;
  }

  addState(): number {
    if (this.edges.length >= this.maxStates) {
      throw new ConstraintError('unsupported', `a constraint this large (over ${this.maxStates} automaton states before determinisation)`);
    }
    this.budget.spend(STATE_STEPS);
    this.epsilons.push([]);
    this.edges.push([]);
    return this.edges.length - 1;
  }

  epsilon(from: number, to: number): void {
    this.budget.spend(EDGE_STEPS);
    if (from !== to) this.epsilons[from].push(to);
  }

  edge(from: number, lo: number, hi: number, to: number): void {
    this.budget.spend(EDGE_STEPS);
    this.edges[from].push({ lo, hi, to });
  }
}

export function buildNfa(pattern: Pattern, maxStates: number, budget: WorkBudget): Nfa {
  const nfa = new Nfa(maxStates, budget);
  nfa.start = nfa.addState();
  nfa.accept = compile(nfa, pattern, nfa.start);
  return nfa;
}

/**
 * Adds `pattern`'s transitions leaving `from` and answers the state where a match ends. Loops always
 * return to a state created here, so edges added later to `from` or to the answer never become
 * reachable from inside a loop that should not take them.
 */
function compile(nfa: Nfa, pattern: Pattern, from: number): number {
  switch (pattern.kind) {
    case 'chars':
      return compileChars(nfa, pattern.ranges, from);
    case 'seq':
      return pattern.items.reduce((at, item) => compile(nfa, item, at), from);
    case 'alt': {
      const end = nfa.addState();
      for (const option of pattern.options) {
        const start = nfa.addState();
        nfa.epsilon(from, start);
        nfa.epsilon(compile(nfa, option, start), end);
      }
      return end;
    }
    case 'repeat':
      return compileRepeat(nfa, pattern, from);
    case 'list':
      return compileList(nfa, pattern, from);
    case 'members':
      return compileMembers(nfa, pattern, from);
    case 'dfa':
      return compileDfa(nfa, pattern.dfa, from);
  }
}

/** Code-point ranges as UTF-8 byte sequences. */
function compileChars(nfa: Nfa, ranges: readonly CodeRange[], from: number): number {
  const end = nfa.addState();
  // Sequences with the same remaining byte ranges share the state before them (all the
  // continuation bytes of a wide class), which keeps determinisation from multiplying them.
  const bySuffix = new Map<string, number>();
  for (const [lo, hi] of ranges) {
    for (const sequence of utf8Sequences(lo, hi)) {
      let at = from;
      sequence.forEach(([byteLo, byteHi], index) => {
        const suffix = JSON.stringify(sequence.slice(index + 1));
        let to = index === sequence.length - 1 ? end : bySuffix.get(suffix);
        if (to === undefined) {
          to = nfa.addState();
          bySuffix.set(suffix, to);
        }
        nfa.edge(at, byteLo, byteHi, to);
        at = to;
      });
    }
  }
  return end;
}

function compileRepeat(nfa: Nfa, pattern: Extract<Pattern, { kind: 'repeat' }>, from: number): number {
  let at = from;
  for (let copy = 0; copy < pattern.min; copy += 1) at = compile(nfa, pattern.item, at);
  if (pattern.max === null) {
    const loop = nfa.addState();
    nfa.epsilon(at, loop);
    nfa.epsilon(compile(nfa, pattern.item, loop), loop);
    return loop;
  }
  const end = nfa.addState();
  nfa.epsilon(at, end);
  for (let copy = pattern.min; copy < pattern.max; copy += 1) {
    const start = nfa.addState();
    nfa.epsilon(at, start);
    at = compile(nfa, pattern.item, start);
    nfa.epsilon(at, end);
  }
  return end;
}

/** An already compiled DFA embedded state for state. */
function compileDfa(nfa: Nfa, dfa: Dfa, from: number): number {
  const states = Array.from({ length: dfa.states }, () => nfa.addState());
  const end = nfa.addState();
  nfa.epsilon(from, states[dfa.start]);
  for (let state = 0; state < dfa.states; state += 1) {
    if (dfa.accepting[state]) nfa.epsilon(states[state], end);
    for (let byte = 0; byte < 256; byte += 1) {
      const target = dfa.next[state * dfa.classCount + dfa.classOf[byte]];
      if (target < 0) continue;
      // Consecutive bytes of one class with one target become one range.
      let last = byte;
      while (last + 1 < 256 && dfa.next[state * dfa.classCount + dfa.classOf[last + 1]] === target) last += 1;
      nfa.edge(states[state], byte, last, states[target]);
      byte = last;
    }
  }
  return end;
}

function compileList(nfa: Nfa, pattern: Extract<Pattern, { kind: 'list' }>, from: number): number {
  const { item, separator, min, max } = pattern;
  const end = nfa.addState();
  if (min === 0) nfa.epsilon(from, end);
  let at = from;
  let count = 1;
  for (; count < min; count += 1) at = compile(nfa, separator, compile(nfa, item, at));
  if (max === null) {
    // One shared copy of the last item: before → item → after, and after → separator → before.
    const before = nfa.addState();
    nfa.epsilon(at, before);
    const after = compile(nfa, item, before);
    nfa.epsilon(compile(nfa, separator, after), before);
    nfa.epsilon(after, end);
    return end;
  }
  at = compile(nfa, item, at);
  nfa.epsilon(at, end);
  for (; count < max; count += 1) {
    at = compile(nfa, item, compile(nfa, separator, at));
    nfa.epsilon(at, end);
  }
  return end;
}

/**
 * Ordered members, optional ones skippable, a separator before every present member but the first.
 * Two states per position (nothing written yet / something written) lead into one copy of each member.
 */
function compileMembers(nfa: Nfa, pattern: Extract<Pattern, { kind: 'members' }>, from: number): number {
  const { members, separator } = pattern;
  const end = nfa.addState();
  let empty: number | null = from; // before member i with nothing written yet (null once a required member passed)
  let written: number | null = null; // before member i with something written
  for (const member of members) {
    const before = nfa.addState();
    if (empty !== null) nfa.epsilon(empty, before);
    if (written !== null) nfa.epsilon(compile(nfa, separator, written), before);
    const after = compile(nfa, member.pattern, before);
    if (member.required) {
      empty = null;
      written = after;
    } else {
      // Skipping a member keeps the state: later members still need their separator once something was written.
      const nextWritten = nfa.addState();
      nfa.epsilon(after, nextWritten);
      if (written !== null) nfa.epsilon(written, nextWritten);
      written = nextWritten;
    }
  }
  if (empty !== null) nfa.epsilon(empty, end);
  if (written !== null) nfa.epsilon(written, end);
  return end;
}
