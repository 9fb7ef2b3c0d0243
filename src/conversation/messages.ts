/**
 * OpenAI chat messages → what chat templates see, as vLLM prepares them before rendering (training-rows.md §1).
 * Real clients send back our own responses (`content: null` beside `tool_calls`), content-part arrays and
 * JSON-string arguments; templates expect strings and objects, so every message is rebuilt in that shape.
 */
import { TemplateError } from './template.ts';

type Message = Record<string, unknown>;

/** Part types that carry plain text; anything else (images, audio) a text-only model cannot render. */
const TEXT_PARTS = new Set(['text', 'input_text', 'output_text', 'refusal']);

/** The text a text part carries (a bare string counts as one), or undefined when the part has none. */
function textOfPart(part: unknown): string | undefined {
  if (typeof part === 'string') return part;
  const { type, text, refusal } = (part ?? {}) as { type?: unknown; text?: unknown; refusal?: unknown };
  const value = type === 'refusal' ? refusal : text;
  return typeof value === 'string' ? value : undefined;
}

/**
 * Why a content part cannot be rendered, or null when it is text. The served models are text-only, and a part a
 * template would skip (`image_url`, `input_audio`, `file`, …) must be refused, not silently left out of the prompt.
 */
export function contentPartProblem(part: unknown): string | null {
  if (typeof part === 'string') return null;
  const type = part !== null && typeof part === 'object' ? (part as { type?: unknown }).type : undefined;
  if (typeof type !== 'string') return 'a content part must be a string or an object with a "type"';
  if (!TEXT_PARTS.has(type))
    return `content parts of type ${JSON.stringify(type)} are not supported: the served models are text-only (send {"type": "text", "text": ...} parts or a string)`;
  return textOfPart(part) === undefined
    ? `a "${type}" content part needs a string "${type === 'refusal' ? 'refusal' : 'text'}"`
    : null;
}

function partText(part: unknown, where: string): string {
  const problem = contentPartProblem(part);
  if (problem !== null) throw new TemplateError(`${where}: ${problem}`);
  return textOfPart(part)!;
}

/** vLLM's "string" content format: null → "", text parts joined with a newline. */
export function contentString(content: unknown, where: string): string {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  if (Array.isArray(content))
    return content.map((part, index) => partText(part, `${where}.content[${index}]`)).join('\n');
  throw new TemplateError(`${where}.content must be a string, an array of text parts or null`);
}

/** Arguments reach templates as objects (templates iterate or `tojson` them); an empty string is `{}`. */
function parsedArguments(value: unknown, where: string): unknown {
  if (value === null || value === undefined || value === '') return {};
  if (typeof value !== 'string') return value;
  try {
    return JSON.parse(value);
  } catch (error) {
    throw new TemplateError(
      `${where}.function.arguments is not valid JSON (${(error as Error).message}); tool-call arguments must be a JSON object string`,
    );
  }
}

function toolCalls(calls: unknown, where: string): Message[] | undefined {
  // An empty list is "no calls": Llama 3.1's template raises on it.
  if (!Array.isArray(calls) || calls.length === 0) return undefined;
  return calls.map((call: Message, index) => {
    const fn = (call?.function ?? {}) as Message;
    // Templates print the name as it is: without one, a call to nothing would be rendered (and trained on).
    if (typeof fn.name !== 'string' || fn.name === '')
      throw new TemplateError(
        `${where}.tool_calls[${index}].function.name must be a non-empty string: the function the call names`,
      );
    return { ...call, function: { ...fn, arguments: parsedArguments(fn.arguments, `${where}.tool_calls[${index}]`) } };
  });
}

function normaliseMessage(message: Message, index: number): Message {
  const where = `messages[${index}]`;
  const role = message.role;
  const out: Message = { role, content: contentString(message.content, where) };
  if (role === 'assistant') {
    const calls = toolCalls(message.tool_calls, where);
    if (calls) out.tool_calls = calls;
    for (const key of ['reasoning', 'reasoning_content'] as const) {
      if (typeof message[key] === 'string') out[key] = message[key];
    }
  }
  if (role === 'tool' && message.tool_call_id !== undefined) out.tool_call_id = message.tool_call_id;
  if (typeof message.name === 'string') out.name = message.name;
  return out;
}

/** The messages a template renders; throws TemplateError (a 400 naming the message) for what cannot be rendered. */
export function normaliseMessages(messages: readonly Message[]): Message[] {
  return messages.map(normaliseMessage);
}
