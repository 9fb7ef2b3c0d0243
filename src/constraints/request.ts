/**
 * The constraint a chat completion asks for, read from `response_format`, `structured_outputs` and
 * `tool_choice` with vLLM's rules and messages (one kind at a time; a named tool excludes structured
 * outputs; "required" replaces them), as the specification the engine compiles (vLLM's structured_outputs
 * shape, docs/structured-outputs.md), its caps checked here. A forced tool call stays a list of tools until
 * the base model is known: its format writes the grammar. Every refusal names the request field it comes from.
 */
import { EngineError } from '../engine/errors.ts';
import { CONSTRAINT_KINDS, type ConstraintSpec } from '../engine/protocol.ts';
import { ConstraintRequestError } from './constraint-error.ts';
import {
  type ForcedCalls,
  larkJson,
  type MarkerSyntax,
  type StructuralTag,
  type StructuralTagStructure,
  structuralTagGrammar,
} from './lark.ts';
import { checkLimits, checkToolLimits } from './limits.ts';

type ToolChoice = 'none' | 'auto' | 'required' | { name: string };

/** The request fields a constraint is read from: every door that samples has the first two, chat doors the tools. */
export interface ConstraintFields {
  response_format?: Record<string, unknown> | null;
  structured_outputs?: Record<string, unknown> | null;
  tools?: { function: { name: string; parameters?: Record<string, unknown> | null } }[] | null;
}

/** The kinds a request may ask for: the engine's, and a structural tag, which the server writes as a grammar. */
const REQUEST_KINDS = [...CONSTRAINT_KINDS, 'structural_tag'] as const;
type RequestKind = (typeof REQUEST_KINDS)[number];

/** A specification as a request asks for it: one the engine compiles, or a structural tag (`constraintSpec`). */
export interface RequestedSpec extends ConstraintSpec {
  structural_tag?: StructuralTag;
}

/** A constraint as a request asks for it: a specification, or a forced call not yet written in a format. */
export type RequestedConstraint =
  | { spec: RequestedSpec; param: 'response_format' | 'structured_outputs' }
  | { calls: ForcedCalls; param: 'tools' };

const isSet = (value: unknown) => value !== undefined && value !== null && value !== false;
const OPTION_FIELDS = [
  'disable_fallback',
  'disable_any_whitespace',
  'disable_additional_properties',
  'whitespace_pattern',
  '_backend',
  '_backend_was_auto',
];

/**
 * JSON's layout unless a request asks for its own: json.dumps' separators (`, ` and `: `) and no other whitespace
 * outside strings, as compact as OpenAI's structured outputs. Whitespace allowed between tokens is where a small
 * model spends its budget (thousands of whitespace tokens against the one the grammar needs next, each run
 * bounded or not), and a forced tool call cut off there never parses.
 */
const COMPACT = { whitespace_flexible: false, item_separator: ', ', key_separator: ': ' };

/**
 * llguidance's layout options for JSON (`x-guidance`, read from the schema itself, so that vLLM's guidance backend
 * lays it out the same): whitespace matching the request's `whitespace_pattern` between tokens, or COMPACT (which
 * `disable_any_whitespace` also asks for).
 */
function layoutOf(options: Record<string, unknown>): Record<string, unknown> {
  const pattern = options.whitespace_pattern;
  if (pattern !== undefined && pattern !== null) {
    if (typeof pattern !== 'string' || pattern === '')
      throw new ConstraintRequestError(
        'structured_outputs.whitespace_pattern must be a non-empty regex string',
        'structured_outputs',
      );
    return { whitespace_flexible: true, whitespace_pattern: pattern };
  }
  return COMPACT;
}

/** The schema with `additionalProperties: false` wherever it lists properties and leaves that unset (a copy). */
function withoutAdditionalProperties(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(withoutAdditionalProperties);
  if (schema === null || typeof schema !== 'object') return schema;
  const out = Object.fromEntries(
    Object.entries(schema).map(([key, value]) => [key, withoutAdditionalProperties(value)]),
  );
  if (out.properties && typeof out.properties === 'object' && !('additionalProperties' in out))
    out.additionalProperties = false;
  return out;
}

/** The schema with the layout options merged under its own `x-guidance` (the schema's own win). */
function laidOut(schema: unknown, layout: Record<string, unknown>): Record<string, unknown> | boolean {
  if (schema === false) return schema;
  const object = schema === true || schema === undefined || schema === null ? {} : (schema as Record<string, unknown>);
  // Not a JSON schema: sent as it is, for the engine's check_constraint to refuse (a 400 naming it).
  if (typeof object !== 'object' || Array.isArray(object)) return schema as Record<string, unknown>;
  const own = object['x-guidance'];
  return { ...object, 'x-guidance': { ...layout, ...(own && typeof own === 'object' ? own : {}) } };
}

function parseJsonText(value: unknown, what: string, param: string): unknown {
  if (typeof value !== 'string') return value;
  try {
    return JSON.parse(value);
  } catch {
    throw new ConstraintRequestError(`${param}: ${what} is not valid JSON`, param);
  }
}

/**
 * A structural tag (vLLM's `triggers` + `structures` shape), each schema laid out (and closed to additional
 * properties when the request says so, as vLLM's guidance backend does); written as a grammar once the base is known.
 */
function structuralTag(value: unknown, options: Record<string, unknown>, param: string): StructuralTag {
  const layout = layoutOf(options);
  const closed = options.disable_additional_properties === true ? withoutAdditionalProperties : (s: unknown) => s;
  const tag = parseJsonText(value, 'the structural tag', param) as Record<string, unknown> | null;
  const fail = (message: string) => new ConstraintRequestError(`${param}: structural_tag ${message}`, param);
  if (!tag || typeof tag !== 'object' || Array.isArray(tag))
    throw fail('must be an object with triggers and structures');
  if (tag.format !== undefined)
    throw fail("with a `format` (xgrammar's structural tags) is not supported; send `triggers` and `structures`");
  const { triggers, structures } = tag;
  if (!Array.isArray(triggers) || triggers.length === 0 || triggers.some((t) => typeof t !== 'string' || t === ''))
    throw fail('triggers must be a non-empty list of non-empty strings');
  if (!Array.isArray(structures) || structures.length === 0) throw fail('structures must be a non-empty list');
  const checked = structures.map((s: Record<string, unknown>, i): StructuralTagStructure => {
    if (!s || typeof s !== 'object' || typeof s.begin !== 'string' || typeof s.end !== 'string')
      throw fail(`structures[${i}] must have string begin and end`);
    if (!triggers.some((t: string) => (s.begin as string).startsWith(t)))
      throw fail(`structures[${i}].begin ${JSON.stringify(s.begin)} starts with none of the triggers`);
    const schema = s.schema ?? s.parameters; // vLLM's pydantic model takes `parameters` as an alias of `schema`
    if (schema === undefined || schema === null) throw fail(`structures[${i}].schema is required`);
    return { begin: s.begin, schema: laidOut(closed(schema), layout), end: s.end };
  });
  return { triggers: triggers as string[], structures: checked };
}

/** `response_format` as the structured output kind it stands for (vLLM merges it into structured_outputs). */
function fromResponseFormat(format: Record<string, unknown>): { kind: RequestKind; value: unknown } | null {
  const type = format.type;
  if (type === undefined || type === null || type === 'text') return null;
  if (type === 'json_object') return { kind: 'json_object', value: true };
  if (type === 'json_schema') {
    const spec = format.json_schema as Record<string, unknown> | undefined;
    if (!spec || typeof spec !== 'object')
      throw new ConstraintRequestError(
        "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
        'response_format',
      );
    const schema = spec.schema ?? spec.json_schema;
    if (schema === undefined || schema === null)
      throw new ConstraintRequestError('response_format.json_schema.schema is required', 'response_format');
    return { kind: 'json', value: schema };
  }
  if (type === 'structural_tag') return { kind: 'structural_tag', value: format };
  throw new ConstraintRequestError(
    `response_format type must be one of text, json_object, json_schema, structural_tag; got ${JSON.stringify(type)}`,
    'response_format',
  );
}

function specOf(kind: RequestKind, value: unknown, options: Record<string, unknown>, param: string): RequestedSpec {
  const layout = layoutOf(options);
  const json = {
    ...(options.disable_any_whitespace === true ? { disable_any_whitespace: true } : {}),
    ...(options.disable_additional_properties === true ? { disable_additional_properties: true } : {}),
  };
  switch (kind) {
    case 'json':
      return { json: laidOut(parseJsonText(value, 'the JSON schema', param), layout), ...json };
    case 'json_object':
      // As vLLM's guidance backend reads it: the schema {"type": "object"}, here with the request's layout.
      return { json: laidOut({ type: 'object' }, layout), ...json };
    case 'regex':
      if (typeof value !== 'string')
        throw new ConstraintRequestError('structured_outputs.regex must be a string', param);
      return { regex: value };
    case 'choice':
      if (!Array.isArray(value) || value.length === 0 || value.some((choice) => typeof choice !== 'string')) {
        throw new ConstraintRequestError('structured_outputs.choice must be a non-empty list of strings', param);
      }
      return { choice: value as string[] };
    case 'grammar':
      if (typeof value !== 'string' || value.trim() === '')
        throw new ConstraintRequestError(
          'structured_outputs.grammar must be a non-empty grammar (Lark, or GBNF)',
          param,
        );
      return { grammar: value };
    case 'structural_tag':
      return { structural_tag: structuralTag(value, options, param) };
  }
}

function forcedCalls(body: ConstraintFields, toolChoice: ToolChoice, parallel: boolean): ForcedCalls {
  const tools = (body.tools ?? []).filter(
    (tool) => typeof toolChoice !== 'object' || tool.function.name === toolChoice.name,
  );
  checkToolLimits(
    tools.map((tool) => tool.function.parameters ?? null),
    'tools',
  );
  const layout = layoutOf(body.structured_outputs ?? {});
  return {
    tools: tools.map((tool) => ({
      name: tool.function.name,
      arguments: larkJson(laidOut(tool.function.parameters ?? { type: 'object' }, layout)),
    })),
    multiple: toolChoice === 'required' && parallel,
  };
}

/** Which constraint the request asks for, and the field it comes from; null for free text. */
export function requestedConstraint(
  body: ConstraintFields,
  toolChoice: ToolChoice,
  parallelToolCalls: boolean,
): RequestedConstraint | null {
  const options = body.structured_outputs ?? {};
  const fromOptions = REQUEST_KINDS.filter((kind) => isSet(options[kind]));
  const jsonRegexChoice = fromOptions.filter((kind) => kind === 'json' || kind === 'regex' || kind === 'choice');
  if (jsonRegexChoice.length > 1)
    throw new ConstraintRequestError(
      "You can only use one kind of constraints for structured outputs ('json', 'regex' or 'choice').",
      'structured_outputs',
    );
  const format = body.response_format ? fromResponseFormat(body.response_format) : null;

  if (toolChoice === 'required') return { calls: forcedCalls(body, toolChoice, parallelToolCalls), param: 'tools' }; // replaces the others, as in vLLM
  if (typeof toolChoice === 'object') {
    if (fromOptions.length > 0 || format)
      throw new ConstraintRequestError(
        'You can only either use constraints for structured outputs or tools, not both.',
        fromOptions.length > 0 ? 'structured_outputs' : 'response_format',
      );
    return { calls: forcedCalls(body, toolChoice, parallelToolCalls), param: 'tools' };
  }

  const kinds = [
    ...fromOptions.map((kind) => ({ kind, value: options[kind], param: 'structured_outputs' as const })),
    ...(format ? [{ ...format, param: 'response_format' as const }] : []),
  ];
  if (kinds.length > 1) {
    throw new ConstraintRequestError(
      `You can only use one kind of structured outputs constraint but multiple are specified: ${kinds.map((k) => k.kind).join(', ')}`,
      kinds[0].param,
    );
  }
  if (kinds.length === 0) {
    const flags = Object.keys(options).filter((key) => isSet(options[key]));
    if (flags.some((key) => !OPTION_FIELDS.includes(key)))
      throw new ConstraintRequestError(
        `structured_outputs: unknown field(s) ${flags.join(', ')}`,
        'structured_outputs',
      );
    if (flags.length > 0)
      throw new ConstraintRequestError(
        'You must use one kind of structured outputs constraint but none are specified: set json, regex, choice, grammar, structural_tag or json_object',
        'structured_outputs',
      );
    return null;
  }
  const [{ kind, value, param }] = kinds;
  const spec = specOf(kind, value, options, param);
  checkLimits(spec, param);
  return { spec, param };
}

/**
 * The specification to compile: the request's own, its forced call as the base model's format writes it, or its
 * structural tag as a grammar in which only the base's added tokens are tokens (`marker`): the same grammar for
 * both sampler engines.
 */
export function constraintSpec(
  requested: RequestedConstraint,
  base: { forcedGrammar(calls: ForcedCalls): string; marker: MarkerSyntax },
): ConstraintSpec {
  if ('calls' in requested) return { grammar: base.forcedGrammar(requested.calls) };
  const tag = requested.spec.structural_tag;
  return tag ? { grammar: structuralTagGrammar(tag, base.marker) } : requested.spec;
}

/** The engine that will decode: the kinds it can constrain this base with, and its compile check. */
export interface ConstraintEngine {
  kinds: readonly string[];
  check(spec: ConstraintSpec): Promise<unknown>;
}

/** Compiled by the engine before any token; a kind it lacks or a refusal is a `ConstraintRequestError` naming the field. */
export async function checkOnEngine(
  requested: RequestedConstraint,
  spec: ConstraintSpec,
  engine: ConstraintEngine,
): Promise<void> {
  const field = requested.param === 'tools' ? 'the tool parameters' : requested.param;
  const kind = CONSTRAINT_KINDS.find((k) => spec[k] !== undefined)!;
  if (!engine.kinds.includes(kind)) {
    throw new ConstraintRequestError(
      `${field}: constraints of kind ${kind} are not available on this model (the engine supports: ${engine.kinds.join(', ') || 'none'})`,
      requested.param,
    );
  }
  try {
    await engine.check(spec);
  } catch (error) {
    if (error instanceof EngineError && error.code === 'bad_request')
      throw new ConstraintRequestError(`${field}: ${error.message}`, requested.param);
    throw error;
  }
}
