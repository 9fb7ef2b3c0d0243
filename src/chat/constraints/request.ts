/**
 * The constraint a chat completion asks for, read from `response_format`, `structured_outputs` and
 * `tool_choice` with vLLM's rules and messages (one kind at a time; a named tool excludes structured
 * outputs; "required" replaces them), then compiled. Every refusal names the request field it comes
 * from, so the caller can answer a 400 with that `param`.
 */
import type { ChatCompletionBody } from '../../api/chat.ts';
import type { CompiledConstraint, ConstraintSpec, WhitespaceSpec } from './compile.ts';
import { ConstraintError } from './constraint-error.ts';
import type { ToolParserName } from '../tool-calls/index.ts';

export class ConstraintRequestError extends Error {
  constructor(
    message: string,
    readonly param: string,
  ) {
    super(message);
  }
}

type ToolChoice = 'none' | 'auto' | 'required' | { name: string };

/** The structured output constraints vLLM counts; exactly one may be set. */
const KINDS = ['json', 'regex', 'choice', 'grammar', 'json_object', 'structural_tag'] as const;

const isSet = (value: unknown) => value !== undefined && value !== null && value !== false;

function whitespaceOf(options: Record<string, unknown>): WhitespaceSpec {
  const pattern = options.whitespace_pattern;
  if (pattern !== undefined && pattern !== null) {
    if (typeof pattern !== 'string' || pattern === '') throw new ConstraintRequestError('structured_outputs.whitespace_pattern must be a non-empty regex string', 'structured_outputs');
    return { kind: 'pattern', regex: pattern };
  }
  return options.disable_any_whitespace === true ? { kind: 'compact' } : { kind: 'flexible' };
}

/** `response_format` as the structured output kind it stands for (vLLM merges it into structured_outputs). */
function fromResponseFormat(format: Record<string, unknown>): { kind: 'json' | 'json_object'; value: unknown } | null {
  const type = format.type;
  if (type === undefined || type === null || type === 'text') return null;
  if (type === 'json_object') return { kind: 'json_object', value: true };
  if (type === 'json_schema') {
    const spec = format.json_schema as Record<string, unknown> | undefined;
    if (!spec || typeof spec !== 'object') throw new ConstraintRequestError("When response_format type is 'json_schema', the 'json_schema' field must be provided.", 'response_format');
    const schema = spec.schema ?? spec.json_schema;
    if (schema === undefined || schema === null) throw new ConstraintRequestError('response_format.json_schema.schema is required', 'response_format');
    return { kind: 'json', value: schema };
  }
  if (type === 'structural_tag') throw new ConstraintRequestError('response_format type "structural_tag" is not supported in constrained decoding', 'response_format');
  throw new ConstraintRequestError(`response_format type must be one of text, json_object, json_schema; got ${JSON.stringify(type)}`, 'response_format');
}

function specOf(kind: (typeof KINDS)[number], value: unknown, options: Record<string, unknown>, param: string): ConstraintSpec {
  switch (kind) {
    case 'json': {
      let schema = value;
      if (typeof schema === 'string') {
        try {
          schema = JSON.parse(schema);
        } catch {
          throw new ConstraintRequestError(`${param}: the JSON schema is not valid JSON`, param);
        }
      }
      return { kind: 'json_schema', schema, whitespace: whitespaceOf(options), noAdditionalProperties: options.disable_additional_properties === true };
    }
    case 'json_object':
      return { kind: 'json_object', whitespace: whitespaceOf(options) };
    case 'regex':
      if (typeof value !== 'string') throw new ConstraintRequestError('structured_outputs.regex must be a string', param);
      return { kind: 'regex', regex: value };
    case 'choice':
      if (!Array.isArray(value) || value.length === 0 || value.some((choice) => typeof choice !== 'string')) {
        throw new ConstraintRequestError('structured_outputs.choice must be a non-empty list of strings', param);
      }
      return { kind: 'choice', choices: value as string[] };
    case 'grammar':
      throw new ConstraintRequestError('structured_outputs.grammar (a context-free grammar) is not supported in constrained decoding; use json, regex or choice', param);
    case 'structural_tag':
      throw new ConstraintRequestError('structured_outputs.structural_tag is not supported in constrained decoding', param);
  }
}

function toolSpec(body: ChatCompletionBody, toolChoice: ToolChoice, parallel: boolean, format: ToolParserName): ConstraintSpec {
  const tools = (body.tools ?? []).filter((tool) => typeof toolChoice !== 'object' || tool.function.name === toolChoice.name);
  const options = body.structured_outputs ?? {};
  return {
    kind: 'tool_call',
    tools: tools.map((tool) => ({ name: tool.function.name, parameters: tool.function.parameters ?? undefined })),
    multiple: toolChoice === 'required' && parallel,
    whitespace: whitespaceOf(options),
    format,
  };
}

/** A constraint as a request asks for it, with the request field it comes from. */
export interface RequestedConstraint {
  spec: ConstraintSpec;
  param: string;
}

/** Which constraint the request asks for, and the field it comes from; null for free text. */
/** Forced calls are written in `toolFormat`. */
export function requestedConstraint(body: ChatCompletionBody, toolChoice: ToolChoice, parallelToolCalls: boolean, toolFormat: ToolParserName = 'hermes'): RequestedConstraint | null {
  const options = body.structured_outputs ?? {};
  const fromOptions = KINDS.filter((kind) => isSet(options[kind]));
  const jsonRegexChoice = fromOptions.filter((kind) => kind === 'json' || kind === 'regex' || kind === 'choice');
  if (jsonRegexChoice.length > 1) throw new ConstraintRequestError("You can only use one kind of constraints for structured outputs ('json', 'regex' or 'choice').", 'structured_outputs');
  const format = body.response_format ? fromResponseFormat(body.response_format) : null;

  if (toolChoice === 'required') return { spec: toolSpec(body, toolChoice, parallelToolCalls, toolFormat), param: 'tool_choice' }; // replaces the others, as in vLLM
  if (typeof toolChoice === 'object') {
    if (fromOptions.length > 0 || format) throw new ConstraintRequestError('You can only either use constraints for structured outputs or tools, not both.', fromOptions.length > 0 ? 'structured_outputs' : 'response_format');
    return { spec: toolSpec(body, toolChoice, parallelToolCalls, toolFormat), param: 'tool_choice' };
  }

  const kinds = [...fromOptions.map((kind) => ({ kind, value: options[kind], param: 'structured_outputs' })), ...(format ? [{ ...format, param: 'response_format' }] : [])];
  if (kinds.length > 1) {
    throw new ConstraintRequestError(`You can only use one kind of structured outputs constraint but multiple are specified: ${kinds.map((k) => k.kind).join(', ')}`, kinds[0].param);
  }
  if (kinds.length === 0) {
    const flags = Object.keys(options).filter((key) => isSet(options[key]));
    if (flags.some((key) => !['disable_fallback', 'disable_any_whitespace', 'disable_additional_properties', 'whitespace_pattern', '_backend', '_backend_was_auto'].includes(key))) {
      throw new ConstraintRequestError(`structured_outputs: unknown field(s) ${flags.join(', ')}`, 'structured_outputs');
    }
    if (flags.length > 0) throw new ConstraintRequestError('You must use one kind of structured outputs constraint but none are specified: set json, regex, choice or json_object', 'structured_outputs');
    return null;
  }
  const [{ kind, value, param }] = kinds;
  return { spec: specOf(kind, value, options, param), param };
}

/** The compiled constraint; a refusal becomes a `ConstraintRequestError` that names its field. */
export async function compileRequested(requested: RequestedConstraint, compile: (spec: ConstraintSpec) => Promise<CompiledConstraint>): Promise<CompiledConstraint> {
  try {
    return await compile(requested.spec);
  } catch (error) {
    if (!(error instanceof ConstraintError)) throw error;
    const field = requested.param === 'tool_choice' ? 'the tool parameters' : requested.param;
    throw new ConstraintRequestError(`${field}: ${error.message}`, requested.param === 'tool_choice' ? 'tools' : requested.param);
  }
}
