/**
 * The tool-call format of a base model: detected from its chat template as vLLM's `--tool-call-parser`
 * would be chosen for it, unless the operator names one for that base (`TOOL_CALL_PARSERS`).
 */
import type { ToolCallFormat, ToolParserName } from './format.ts';
import { hermes } from './hermes.ts';
import { llama3Json } from './llama3-json.ts';
import { mistral } from './mistral.ts';

export type { ParsedCall, ToolCallFormat, ToolParserName } from './format.ts';

export const TOOL_CALL_FORMATS: Readonly<Record<ToolParserName, ToolCallFormat>> = {
  hermes,
  llama3_json: llama3Json,
  mistral,
};
export const TOOL_PARSER_NAMES = Object.keys(TOOL_CALL_FORMATS) as ToolParserName[];

export function isToolParserName(name: string): name is ToolParserName {
  return Object.hasOwn(TOOL_CALL_FORMATS, name);
}

/** The first format whose marker the template holds, in this order; Hermes (our built-in model's format) otherwise. */
const DETECTION_ORDER: readonly ToolCallFormat[] = [hermes, mistral, llama3Json];

export function detectToolParser(template: string | undefined): ToolParserName {
  return DETECTION_ORDER.find((format) => template?.includes(format.templateMarker))?.name ?? 'hermes';
}
