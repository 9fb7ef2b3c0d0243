/**
 * How much one constraint may ask for, declared once and checked before anything compiles: regex and grammar
 * length, schema depth and size, choices, tools, structural-tag structures. Past a cap is a 400 naming the
 * field at once. What a constraint within the caps costs to compile and to mask is bounded by the engine's
 * llguidance limits (fuel per step, grammar size: engine/constraints.py); a constraint over those is refused
 * when the engine compiles it, still before any token.
 */
import type { ConstraintSpec } from '../engine/protocol.ts';
import { ConstraintRequestError } from './constraint-error.ts';
import type { StructuralTag } from './lark.ts';

export const CONSTRAINT_LIMITS = {
  /** Characters of `structured_outputs.regex`. */
  regexLength: 16_384,
  /** Characters of a `structured_outputs.grammar`. */
  grammarLength: 65_536,
  /** Nesting of objects and arrays in a JSON schema. */
  schemaDepth: 48,
  /** Objects, arrays and values in a JSON schema (all schemas of one constraint together). */
  schemaNodes: 20_000,
  /** Choices of one list (llguidance parses at most 2000 alternatives of one rule at once). */
  choices: 1024,
  /** Characters of all choices together. */
  choiceCharacters: 65_536,
  /** Tools a forced tool call chooses among (OpenAI's own limit). */
  tools: 128,
  /** Structures and triggers of a structural tag, each. */
  structures: 128,
} as const;

const tooLarge = (what: string, param: string) =>
  new ConstraintRequestError(`${param}: ${what} is too large for constrained decoding`, param);

/**
 * How a JSON value breaks a depth or node cap ("nested more than 48 levels deep"), or null. Walked
 * without recursion and abandoned at the first breach, so a value nested thousands deep costs nothing.
 */
export function jsonSizeProblem(
  value: unknown,
  limits: { depth: number; nodes: number } = {
    depth: CONSTRAINT_LIMITS.schemaDepth,
    nodes: CONSTRAINT_LIMITS.schemaNodes,
  },
): string | null {
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

/** The same check as a refusal naming `param`. */
export function checkJsonSize(value: unknown, what: string, param: string): void {
  const problem = jsonSizeProblem(value);
  if (problem) throw tooLarge(`${what} ${problem}`, param);
}

function checkLength(text: string, what: string, limit: number, param: string): void {
  if (text.length > limit)
    throw tooLarge(`a ${what} of more than ${limit} characters (this one has ${text.length})`, param);
}

/** The caps that need no compiling, for a specification the request asked for (`param` names its field). */
export function checkLimits(spec: ConstraintSpec & { structural_tag?: StructuralTag }, param: string): void {
  const { choices, choiceCharacters, structures } = CONSTRAINT_LIMITS;
  if (spec.regex !== undefined) checkLength(spec.regex, 'regex', CONSTRAINT_LIMITS.regexLength, param);
  if (spec.grammar !== undefined) checkLength(spec.grammar, 'grammar', CONSTRAINT_LIMITS.grammarLength, param);
  if (spec.json !== undefined) checkJsonSize(spec.json, 'a JSON schema', param);
  if (spec.choice) {
    if (spec.choice.length > choices) throw tooLarge(`a choice list of more than ${choices} choices`, param);
    if (spec.choice.reduce((sum, choice) => sum + choice.length, 0) > choiceCharacters)
      throw tooLarge(`a choice list of more than ${choiceCharacters} characters`, param);
  }
  if (spec.structural_tag) {
    const tag = spec.structural_tag;
    if (tag.structures.length > structures || tag.triggers.length > structures)
      throw tooLarge(`a structural tag of more than ${structures} structures or triggers`, param);
    checkJsonSize(tag, 'a structural tag', param);
  }
}

/** The caps of a forced tool call: how many tools, and their schemas together. */
export function checkToolLimits(schemas: unknown[], param: string): void {
  if (schemas.length > CONSTRAINT_LIMITS.tools)
    throw tooLarge(`a tool call among more than ${CONSTRAINT_LIMITS.tools} tools`, param);
  checkJsonSize(schemas, "the tools' parameter schemas", param);
}
