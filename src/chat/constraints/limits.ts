/**
 * How much work one constraint may ask for, declared once: size caps checked before anything compiles
 * (regex length, schema depth and size, choices, tools), and a step budget spent while the automata are
 * built, so that a constraint too costly for its size is refused the moment it exceeds its budget rather
 * than after it has held the event loop. Steps are counted, not timed, so a refusal does not depend on
 * the machine's load (and may be cached).
 */
import { ConstraintError } from './constraint-error.ts';

export const CONSTRAINT_LIMITS = {
  /** Characters of any regex: `structured_outputs.regex`, a schema's `pattern`, `whitespace_pattern`. */
  regexLength: 16_384,
  /** Nesting of groups inside one regex. */
  regexNesting: 64,
  /** Nesting of objects and arrays in a JSON schema, and of schemas reached through `$ref`s while compiling. */
  schemaDepth: 48,
  /** Objects, arrays and values in a JSON schema (all tools' schemas together for a tool call). */
  schemaNodes: 20_000,
  choices: 4096,
  /** Characters of all choices together. */
  choiceCharacters: 65_536,
  /** Tools a forced tool call chooses among (OpenAI's own limit). */
  tools: 128,
  /**
   * Automaton construction steps (subschemas, NFA states and edges, subset closures, refinement): about
   * 0.1–0.7 s of the compiler thread's time on a small, busy machine. The largest constraint the tests
   * compile, the schema `{}` with flexible whitespace, takes 4.6 million.
   */
  steps: 8_000_000,
} as const;

export const tooLarge = (what: string): ConstraintError => new ConstraintError('unsupported', `${what} is too large for constrained decoding`);

/** The steps one compilation may still take; every automaton builder spends from the same budget. */
export class WorkBudget {
  private spent = 0;

  constructor(readonly limit: number = CONSTRAINT_LIMITS.steps) {}

  spend(steps: number): void {
    this.spent += steps;
    if (this.spent > this.limit) {
      throw new ConstraintError('unsupported', `a constraint this complex (its automaton takes more than ${this.limit} steps to build) is not supported in constrained decoding; simplify the regex or schema`);
    }
  }

  get used(): number {
    return this.spent;
  }
}

/**
 * How a JSON value breaks a depth or node cap ("nested more than 48 levels deep"), or null. Walked
 * without recursion and abandoned at the first breach, so a value nested thousands deep costs nothing.
 */
export function jsonSizeProblem(value: unknown, limits: { depth: number; nodes: number } = { depth: CONSTRAINT_LIMITS.schemaDepth, nodes: CONSTRAINT_LIMITS.schemaNodes }): string | null {
  const stack: [unknown, number][] = [[value, 1]];
  let nodes = 0;
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!;
    nodes += 1;
    if (nodes > limits.nodes) return `with more than ${limits.nodes} nodes`;
    if (node === null || typeof node !== 'object') continue;
    if (depth > limits.depth) return `nested more than ${limits.depth} levels deep`;
    for (const child of Array.isArray(node) ? node : Object.values(node)) stack.push([child, depth + 1]);
  }
  return null;
}

/** The same check as a constraint refusal. */
export function checkJsonSize(value: unknown, what: string): void {
  const problem = jsonSizeProblem(value);
  if (problem) throw tooLarge(`${what} ${problem}`);
}
