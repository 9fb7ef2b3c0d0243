/**
 * Byte-level DFAs: trimming of states that can no longer reach a match, minimisation (Hopcroft),
 * intersection, and walking bytes through the result (determinise.ts makes them from NFAs). Every state of a DFA made here can still reach an accepting state, which is what lets the
 * engine treat "no transition" as "not allowed" and never paint itself into a corner.
 */
import { ConstraintError } from './constraint-error.ts';
import type { WorkBudget } from './limits.ts';

export interface Dfa {
  states: number;
  /** Bytes that every state treats alike share a class; `next` is indexed by class. */
  classCount: number;
  classOf: Uint8Array;
  start: number;
  accepting: Uint8Array;
  /** `next[state * classCount + class]`: the next state, or -1 where the byte is not allowed. */
  next: Int32Array;
}

export const DEAD = -1;

export function step(dfa: Dfa, state: number, byte: number): number {
  return dfa.next[state * dfa.classCount + dfa.classOf[byte]];
}

/** The state after `bytes` from `state` (the start by default), or DEAD. */
export function walk(dfa: Dfa, bytes: Uint8Array, state = dfa.start): number {
  for (const byte of bytes) {
    if (state === DEAD) return DEAD;
    state = step(dfa, state, byte);
  }
  return state;
}

export function accepts(dfa: Dfa, text: string | Uint8Array): boolean {
  const state = walk(dfa, typeof text === 'string' ? new TextEncoder().encode(text) : text);
  return state !== DEAD && dfa.accepting[state] === 1;
}

/** Drops states from which no accepting state is reachable; null when that is the start. */
function trim(dfa: Dfa): Dfa | null {
  const { states, classCount: C, next } = dfa;
  // Predecessor lists, compressed: predecessors[offsets[t] .. offsets[t + 1]).
  const offsets = new Int32Array(states + 1);
  for (let i = 0; i < next.length; i += 1) if (next[i] !== DEAD) offsets[next[i] + 1] += 1;
  for (let t = 0; t < states; t += 1) offsets[t + 1] += offsets[t];
  const fill = offsets.slice(0, states);
  const predecessors = new Int32Array(offsets[states]);
  for (let i = 0; i < next.length; i += 1) if (next[i] !== DEAD) predecessors[fill[next[i]]++] = (i / C) | 0;
  const live = new Uint8Array(states);
  const stack = new Int32Array(states);
  let top = 0;
  for (let state = 0; state < states; state += 1) {
    if (dfa.accepting[state]) {
      live[state] = 1;
      stack[top++] = state;
    }
  }
  while (top > 0) {
    const state = stack[--top];
    for (let i = offsets[state]; i < offsets[state + 1]; i += 1) {
      const from = predecessors[i];
      if (!live[from]) {
        live[from] = 1;
        stack[top++] = from;
      }
    }
  }
  if (!live[dfa.start]) return null;
  const trimmed = new Int32Array(next.length);
  for (let i = 0; i < next.length; i += 1) trimmed[i] = next[i] !== DEAD && live[next[i]] ? next[i] : DEAD;
  return { ...dfa, next: trimmed };
}

/**
 * Hopcroft's partition refinement on the trimmed DFA completed with a sink; the sink's block is dropped
 * again, states are renumbered breadth-first from the start, and byte classes that every state now
 * treats alike are merged.
 */
export function minimise(input: Dfa, budget: WorkBudget): Dfa | null {
  budget.spend(2 * input.next.length); // trimming and the tables below
  const trimmed = trim(input);
  if (!trimmed) return null;
  const dfa = mergeClasses(trimmed); // fewer classes, fewer refinement passes
  const C = dfa.classCount;
  const sink = dfa.states;
  const N = dfa.states + 1;
  const transitions = new Int32Array(N * C).fill(sink);
  for (let i = 0; i < dfa.next.length; i += 1) if (dfa.next[i] !== DEAD) transitions[i] = dfa.next[i];
  const partition = acceptingSplit(dfa, N);
  refine(partition, predecessorsByClass(transitions, N, C), C, budget);
  return mergeClasses(quotient(dfa, partition, transitions, sink));
}

/** Predecessors by (class, target), compressed: `inverse[offsets[c * N + t] .. offsets[c * N + t + 1])`. */
function predecessorsByClass(transitions: Int32Array, N: number, C: number): { offsets: Int32Array; inverse: Int32Array } {
  const offsets = new Int32Array(C * N + 1);
  for (let i = 0; i < N * C; i += 1) offsets[(i % C) * N + transitions[i] + 1] += 1;
  for (let i = 1; i < offsets.length; i += 1) offsets[i] += offsets[i - 1];
  const fill = offsets.slice(0, C * N);
  const inverse = new Int32Array(N * C);
  for (let i = 0; i < N * C; i += 1) inverse[fill[(i % C) * N + transitions[i]]++] = (i / C) | 0;
  return { offsets, inverse };
}

/** A refinable partition of states: each block is a contiguous run of `elements`. */
interface Partition {
  elements: Int32Array;
  location: Int32Array;
  blockOf: Int32Array;
  blockStart: Int32Array;
  blockEnd: Int32Array;
  blocks: number;
}

/** The first partition: accepting states, then the rest (the sink among them). */
function acceptingSplit(dfa: Dfa, N: number): Partition {
  const sink = dfa.states;
  const p: Partition = { elements: new Int32Array(N), location: new Int32Array(N), blockOf: new Int32Array(N), blockStart: new Int32Array(N), blockEnd: new Int32Array(N), blocks: 0 };
  let position = 0;
  for (const wantAccepting of [1, 0]) {
    const from = position;
    for (let state = 0; state < N; state += 1) {
      if ((state !== sink && dfa.accepting[state] === 1 ? 1 : 0) !== wantAccepting) continue;
      p.elements[position] = state;
      p.location[state] = position;
      p.blockOf[state] = p.blocks;
      position += 1;
    }
    if (position > from) {
      p.blockStart[p.blocks] = from;
      p.blockEnd[p.blocks] = position;
      p.blocks += 1;
    }
  }
  return p;
}

/** Splits blocks until no block's states disagree on which block a class leads to (marked members sit at a block's front). */
function refine(p: Partition, { offsets, inverse }: { offsets: Int32Array; inverse: Int32Array }, C: number, budget: WorkBudget): void {
  const N = p.elements.length;
  const marked = new Int32Array(N);
  const inWorklist = new Uint8Array(N);
  const worklist = new Int32Array(N);
  const touched = new Int32Array(N);
  let pending = 0;
  for (let block = 0; block < p.blocks; block += 1) {
    inWorklist[block] = 1;
    worklist[pending++] = block;
  }
  while (pending > 0) {
    const splitter = worklist[--pending];
    inWorklist[splitter] = 0;
    const members = p.elements.slice(p.blockStart[splitter], p.blockEnd[splitter]);
    budget.spend(members.length * C);
    for (let c = 0; c < C; c += 1) {
      let touchedCount = 0;
      const base = c * N;
      for (let m = 0; m < members.length; m += 1) {
        for (let i = offsets[base + members[m]]; i < offsets[base + members[m] + 1]; i += 1) {
          const state = inverse[i];
          const block = p.blockOf[state];
          const markAt = p.blockStart[block] + marked[block];
          if (p.location[state] < markAt) continue;
          if (marked[block] === 0) touched[touchedCount++] = block;
          const other = p.elements[markAt];
          p.elements[markAt] = state;
          p.elements[p.location[state]] = other;
          p.location[other] = p.location[state];
          p.location[state] = markAt;
          marked[block] += 1;
        }
      }
      for (let t = 0; t < touchedCount; t += 1) {
        const block = touched[t];
        const count = marked[block];
        marked[block] = 0;
        const size = p.blockEnd[block] - p.blockStart[block];
        if (count === size) continue;
        const created = p.blocks++;
        p.blockStart[created] = p.blockStart[block];
        p.blockEnd[created] = p.blockStart[block] + count;
        p.blockStart[block] += count;
        for (let i = p.blockStart[created]; i < p.blockEnd[created]; i += 1) p.blockOf[p.elements[i]] = created;
        // A block still waiting splits into two waiting blocks; otherwise the smaller half is enough.
        const queued = inWorklist[block] || count <= size - count ? created : block;
        inWorklist[queued] = 1;
        worklist[pending++] = queued;
      }
    }
  }
}

/** The DFA of the blocks, renumbered breadth-first from the start block, leaving out the sink's. */
function quotient(dfa: Dfa, p: Partition, transitions: Int32Array, sink: number): Dfa {
  const C = dfa.classCount;
  const sinkBlock = p.blockOf[sink];
  const number = new Int32Array(p.blocks).fill(-1);
  const order = new Int32Array(p.blocks);
  let count = 0;
  number[p.blockOf[dfa.start]] = count;
  order[count++] = p.blockOf[dfa.start];
  for (let i = 0; i < count; i += 1) {
    const representative = p.elements[p.blockStart[order[i]]];
    for (let c = 0; c < C; c += 1) {
      const block = p.blockOf[transitions[representative * C + c]];
      if (block !== sinkBlock && number[block] === -1) {
        number[block] = count;
        order[count++] = block;
      }
    }
  }
  const next = new Int32Array(count * C).fill(DEAD);
  const accepting = new Uint8Array(count);
  for (let state = 0; state < count; state += 1) {
    const representative = p.elements[p.blockStart[order[state]]];
    accepting[state] = dfa.accepting[representative];
    for (let c = 0; c < C; c += 1) {
      const block = p.blockOf[transitions[representative * C + c]];
      if (block !== sinkBlock) next[state * C + c] = number[block];
    }
  }
  return { states: count, classCount: C, classOf: dfa.classOf, start: 0, accepting, next };
}

/** Byte classes whose columns are identical in every state become one. */
function mergeClasses(dfa: Dfa): Dfa {
  const { states, classCount } = dfa;
  // Column hashes first; equal hashes are confirmed cell by cell.
  const hashes = new Int32Array(classCount);
  for (let c = 0; c < classCount; c += 1) {
    let hash = 17;
    for (let state = 0; state < states; state += 1) hash = (Math.imul(hash, 31) + dfa.next[state * classCount + c]) | 0;
    hashes[c] = hash;
  }
  const sameColumn = (a: number, b: number) => {
    for (let state = 0; state < states; state += 1) if (dfa.next[state * classCount + a] !== dfa.next[state * classCount + b]) return false;
    return true;
  };
  const remap = new Int32Array(classCount);
  const representatives: number[] = [];
  for (let c = 0; c < classCount; c += 1) {
    const same = representatives.findIndex((r) => hashes[r] === hashes[c] && sameColumn(r, c));
    if (same === -1) {
      remap[c] = representatives.length;
      representatives.push(c);
    } else {
      remap[c] = same;
    }
  }
  const merged = representatives.length;
  if (merged === classCount) return dfa;
  const next = new Int32Array(states * merged);
  for (let state = 0; state < states; state += 1) {
    for (let r = 0; r < merged; r += 1) next[state * merged + r] = dfa.next[state * classCount + representatives[r]];
  }
  return { ...dfa, classCount: merged, classOf: Uint8Array.from(dfa.classOf, (c) => remap[c]), next };
}

/** The DFA of strings both accept; null when there are none. */
export function intersect(a: Dfa, b: Dfa, maxStates: number, budget: WorkBudget): Dfa | null {
  const pairClass = new Map<number, number>();
  const classOf = new Uint8Array(256);
  const classPairs: [number, number][] = [];
  for (let byte = 0; byte < 256; byte += 1) {
    const key = a.classOf[byte] * 256 + b.classOf[byte];
    let id = pairClass.get(key);
    if (id === undefined) {
      id = classPairs.length;
      pairClass.set(key, id);
      classPairs.push([a.classOf[byte], b.classOf[byte]]);
    }
    classOf[byte] = id;
  }
  const C = classPairs.length;
  const ids = new Map<number, number>();
  const pairs: [number, number][] = [];
  const next: number[] = [];
  const intern = (sa: number, sb: number): number => {
    const key = sa * b.states + sb;
    let id = ids.get(key);
    if (id === undefined) {
      if (pairs.length >= maxStates) throw new ConstraintError('unsupported', `a constraint this large (over ${maxStates} automaton states)`);
      budget.spend(C);
      id = pairs.length;
      ids.set(key, id);
      pairs.push([sa, sb]);
      for (let c = 0; c < C; c += 1) next.push(DEAD);
    }
    return id;
  };
  intern(a.start, b.start);
  for (let id = 0; id < pairs.length; id += 1) {
    const [sa, sb] = pairs[id];
    classPairs.forEach(([ca, cb], c) => {
      const ta = a.next[sa * a.classCount + ca];
      const tb = b.next[sb * b.classCount + cb];
      if (ta !== DEAD && tb !== DEAD) next[id * C + c] = intern(ta, tb);
    });
  }
  const accepting = Uint8Array.from(pairs, ([sa, sb]) => a.accepting[sa] & b.accepting[sb]);
  return minimise({ states: pairs.length, classCount: C, classOf, start: 0, accepting, next: Int32Array.from(next) }, budget);
}
