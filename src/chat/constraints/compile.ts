/**
 * A constraint as the chat layer states it (JSON schema, JSON object, regex, choice, a forced tool call
 * in the base model's format) → a minimal byte-level DFA and its wire form for the engine, cached in an LRU keyed by the
 * constraint itself. The automaton works on bytes, not tokens, so one compilation serves every
 * tokenizer; the engine maps it onto each vocabulary.
 */
import crypto from 'node:crypto';
import zlib from 'node:zlib';
import type { Dfa } from './dfa.ts';
import { determinise } from './determinise.ts';
import { compileJsonSchema } from './json-schema.ts';
import { anyJsonObject, COMPACT_LAYOUT, flexibleLayout, type JsonLayout } from './json-text.ts';
import type { WireConstraint } from '../../engine/protocol.ts';
import { buildNfa } from './nfa.ts';
import { alt, list, literal, type Pattern, seq } from './pattern.ts';
import { ConstraintError, invalid } from './constraint-error.ts';
import { regexPattern } from './regex.ts';
import { checkJsonSize, CONSTRAINT_LIMITS, tooLarge, WorkBudget } from './limits.ts';
import { TOOL_CALL_FORMATS, type ToolParserName } from '../tool-calls/index.ts';

/** Whitespace between JSON tokens: bounded runs of any whitespace, json.dumps' separators, or a regex. */
export type WhitespaceSpec = { kind: 'flexible' } | { kind: 'compact' } | { kind: 'pattern'; regex: string };

export interface ToolSpec {
  name: string;
  /** The function's `parameters` schema; absent means any object. */
  parameters: unknown;
}

export type ConstraintSpec =
  | { kind: 'json_schema'; schema: unknown; whitespace: WhitespaceSpec; noAdditionalProperties: boolean }
  | { kind: 'json_object'; whitespace: WhitespaceSpec }
  | { kind: 'regex'; regex: string }
  | { kind: 'choice'; choices: string[] }
  /** A call in `format` (Hermes: `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`), once or (multiple) one or more times. */
  | { kind: 'tool_call'; tools: ToolSpec[]; multiple: boolean; whitespace: WhitespaceSpec; format: ToolParserName };

export interface CompiledConstraint {
  id: string;
  dfa: Dfa;
  wire: WireConstraint;
}

/** Nesting wherever any JSON value is allowed (json_object, `{}` schemas): each level doubles the automaton. */
export const ANY_VALUE_DEPTH = 4;
/** Times a recursive `$ref` may enclose itself. */
export const MAX_RECURSION = 3;
const MAX_NFA_STATES = 1_000_000;
const MAX_DFA_STATES = 50_000;
const CACHE_ENTRIES = 256;

/** The caps that need no compiling: a constraint past them is refused before any work starts. */
function checkLimits(spec: ConstraintSpec): void {
  switch (spec.kind) {
    case 'json_schema':
      return checkJsonSize(spec.schema, 'a JSON schema');
    case 'choice': {
      const { choices, choiceCharacters } = CONSTRAINT_LIMITS;
      if (spec.choices.length > choices) throw tooLarge(`a choice list of more than ${choices} choices`);
      if (spec.choices.reduce((sum, choice) => sum + choice.length, 0) > choiceCharacters) throw tooLarge(`a choice list of more than ${choiceCharacters} characters`);
      return;
    }
    case 'tool_call':
      if (spec.tools.length > CONSTRAINT_LIMITS.tools) throw tooLarge(`a tool call among more than ${CONSTRAINT_LIMITS.tools} tools`);
      return checkJsonSize(spec.tools.map((tool) => tool.parameters ?? null), 'the tools\' parameter schemas');
    default:
      return; // regexes are measured where they are parsed
  }
}

function layoutOf(spec: WhitespaceSpec): JsonLayout {
  if (spec.kind === 'compact') return COMPACT_LAYOUT;
  if (spec.kind === 'flexible') return flexibleLayout();
  return flexibleLayout(regexPattern(spec.regex));
}

function schemaOptions(budget: WorkBudget, layout: JsonLayout, noAdditionalProperties = false) {
  return { layout, noAdditionalProperties, anyValueDepth: ANY_VALUE_DEPTH, maxRecursion: MAX_RECURSION, maxStates: MAX_DFA_STATES, budget };
}

function toolArguments(tool: ToolSpec, layout: JsonLayout, budget: WorkBudget): Pattern {
  if (tool.parameters === undefined || tool.parameters === null) return anyJsonObject(layout, ANY_VALUE_DEPTH);
  return compileJsonSchema(tool.parameters, schemaOptions(budget, layout));
}

function constraintPattern(spec: ConstraintSpec, budget: WorkBudget): Pattern {
  switch (spec.kind) {
    case 'json_schema':
      return compileJsonSchema(spec.schema, schemaOptions(budget, layoutOf(spec.whitespace), spec.noAdditionalProperties));
    case 'json_object':
      return anyJsonObject(layoutOf(spec.whitespace), ANY_VALUE_DEPTH);
    case 'regex':
      return regexPattern(spec.regex);
    case 'choice':
      return alt(...spec.choices.map(literal));
    case 'tool_call': {
      const layout = layoutOf(spec.whitespace);
      const calls = spec.tools.map((tool) => ({ name: tool.name, args: toolArguments(tool, layout, budget) }));
      return TOOL_CALL_FORMATS[spec.format].forcedPattern(calls, spec.multiple);
    }
  }
}

function encodeWire(dfa: Dfa): WireConstraint {
  if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) throw new Error('the wire form assumes a little-endian host');
  const accepting: number[] = [];
  for (let state = 0; state < dfa.states; state += 1) if (dfa.accepting[state]) accepting.push(state);
  // Deflated, a table of thousands of states travels in tens of kilobytes (mostly -1 and repeated rows).
  const table = zlib.deflateSync(Buffer.from(dfa.next.buffer, dfa.next.byteOffset, dfa.next.byteLength)).toString('base64');
  const body = { states: dfa.states, classes: dfa.classCount, class_of: Buffer.from(dfa.classOf).toString('base64'), start: dfa.start, accepting, table };
  const id = crypto.createHash('sha256').update(JSON.stringify(body)).digest('hex').slice(0, 24);
  return { id, ...body };
}

/** Uncached: the pattern, its automaton and wire form, within the size caps and the step budget. */
export function compileConstraintUncached(spec: ConstraintSpec, budget = new WorkBudget()): CompiledConstraint {
  checkLimits(spec);
  const pattern = constraintPattern(spec, budget);
  const dfa = determinise(buildNfa(pattern, MAX_NFA_STATES, budget), MAX_DFA_STATES, budget);
  if (!dfa) throw invalid('the constraint matches no text at all');
  const wire = encodeWire(dfa);
  return { id: wire.id, dfa, wire };
}

/** A compilation's outcome as the cache keeps it: the constraint, or the refusal (refusals are cached too). */
export type CompileOutcome = CompiledConstraint | ConstraintError;

const cache = new Map<string, CompileOutcome>();

/** The cache key, once the size caps pass: a schema nested thousands deep must not reach JSON.stringify. */
export function constraintKey(spec: ConstraintSpec): string {
  checkLimits(spec);
  return JSON.stringify(spec);
}

/** The cached outcome, now the most recently used; undefined when it was never compiled or was evicted. */
export function cachedOutcome(key: string): CompileOutcome | undefined {
  const entry = cache.get(key);
  if (entry !== undefined) {
    cache.delete(key);
    cache.set(key, entry);
  }
  return entry;
}

/** Keeps an outcome; the least recently used entry goes first. */
export function cacheOutcome(key: string, outcome: CompileOutcome): void {
  cache.set(key, outcome);
  if (cache.size > CACHE_ENTRIES) cache.delete(cache.keys().next().value!);
}

/** Compiles on this thread, once per distinct constraint. The server compiles off its event loop instead (constraint-compiler.ts). */
export function compileConstraint(spec: ConstraintSpec): CompiledConstraint {
  const key = constraintKey(spec);
  let entry = cachedOutcome(key);
  if (entry === undefined) {
    try {
      entry = compileConstraintUncached(spec);
    } catch (error) {
      if (!(error instanceof ConstraintError)) throw error;
      entry = error;
    }
    cacheOutcome(key, entry);
  }
  if (entry instanceof ConstraintError) throw entry;
  return entry;
}

export function clearConstraintCache(): void {
  cache.clear();
}
