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

/** Which of an API's tools are functions a chat template can render: its word for them, and where their schema is. */
export interface FunctionToolKind {
  /** The kind named in a refusal ("only custom tools run on this server"). */
  name: string;
  accepts(type: unknown): boolean;
  schemaKey: string;
}

/**
 * A request's `tools` as chat tools (a description left out when there is none); any other kind (server tools, hosted
 * tools: web search, MCP, …) is refused, naming it.
 */
export function chatTools(tools: unknown, kind: FunctionToolKind): ChatTool[] | null {
  if (tools === undefined || tools === null) return null;
  if (!Array.isArray(tools)) throw new ConversionError('tools', 'must be a list');
  return tools.map((raw, index): ChatTool => {
    const param = `tools.${index}`;
    const tool = objectAt(raw, param);
    if (!kind.accepts(tool.type))
      throw new ConversionError(
        `${param}.type`,
        `tools of type ${JSON.stringify(tool.type ?? null)} are not supported: only ${kind.name} tools run on this server`,
      );
    const name = nameAt(tool, 'name', param);
    const parameters = schemaAt(tool, kind.schemaKey, param);
    const description = tool.description;
    return {
      type: 'function',
      function: {
        name,
        ...(typeof description === 'string' ? { description } : {}),
        ...(parameters ? { parameters } : {}),
      },
    };
  });
}
