/**
 * The chat messages and tools the other APIs' conversations are read into (responses-items.ts, anthropic-messages.ts):
 * OpenAI chat shapes, as a chat completion request carries them and as templates render them after messages.ts, and
 * the one error a conversion throws, naming the field of the source request at fault. Knows no HTTP and no model.
 */

export interface ChatToolCall {
  id: string;
  type: 'function';
  /** `arguments` is JSON text, as OpenAI's chat API carries it. */
  function: { name: string; arguments: string };
}

export interface ChatMessage {
  role: string;
  content: string;
  reasoning?: string;
  tool_calls?: ChatToolCall[];
  tool_call_id?: string;
}

export interface ChatTool {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

/** What a chat completion's `tool_choice` says: none, auto, required, or one named function. */
export type ChatToolChoice = 'none' | 'auto' | 'required' | { type: 'function'; function: { name: string } };

/** A source conversation that has no chat equivalent; `param` is the dotted path into the source request. */
export class ConversionError extends Error {
  constructor(
    readonly param: string,
    message: string,
  ) {
    super(`${param}: ${message}`);
  }
}

export type JsonObject = Record<string, unknown>;

/** The value at `param` as a JSON object, or a ConversionError saying it must be one. */
export function objectAt(value: unknown, param: string): JsonObject {
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw new ConversionError(param, 'must be an object');
  return value as JsonObject;
}

/** A string field of `object` (required unless `fallback` is given), or a ConversionError naming it. */
export function stringAt(object: JsonObject, key: string, param: string, fallback?: string): string {
  const value = object[key];
  if (typeof value === 'string') return value;
  if ((value === undefined || value === null) && fallback !== undefined) return fallback;
  throw new ConversionError(`${param}.${key}`, value === undefined ? 'Field required' : 'must be a string');
}

/** A function name: templates print it as it is, so a call or a tool without one would render a call to nothing. */
export function nameAt(object: JsonObject, key: string, param: string): string {
  const name = stringAt(object, key, param);
  if (name === '') throw new ConversionError(`${param}.${key}`, 'must be a non-empty string');
  return name;
}

/** A JSON Schema object (a tool's parameters); absent is `{"type": "object"}`'s job, left to the template. */
export function schemaAt(object: JsonObject, key: string, param: string): JsonObject | undefined {
  const value = object[key];
  if (value === undefined || value === null) return undefined;
  return objectAt(value, `${param}.${key}`);
}

/** A chat tool for a function, its description left out when there is none. */
export function chatTool(name: string, description: unknown, parameters: JsonObject | undefined): ChatTool {
  return {
    type: 'function',
    function: {
      name,
      ...(typeof description === 'string' ? { description } : {}),
      ...(parameters ? { parameters } : {}),
    },
  };
}
