/**
 * The OpenAI Responses API's conversation as chat messages (chat-shapes.ts), for the serving door and for training
 * on captured exchanges alike: `instructions` and `input` (text, or message, reasoning, function_call and
 * function_call_output items) become the messages a chat completion would send; function tools become chat tools;
 * a response's output items become the assistant message they stand for. As ART's tokenizer reads a captured
 * exchange: text parts are joined without a separator, reasoning rides on the assistant message that follows it.
 * Function calls join the assistant message they follow, so one turn's text and calls render as the one turn the
 * model wrote. Refuses what a text-only chat template cannot render (images, files, hosted tools), naming the field.
 */
import {
  type ChatMessage,
  type ChatTool,
  type ChatToolCall,
  type ChatToolChoice,
  ConversionError,
  chatTools,
  type JsonObject,
  nameAt,
  objectAt,
  stringAt,
} from './chat-shapes.ts';

const TEXT_PARTS: Record<string, string> = {
  input_text: 'text',
  output_text: 'text',
  text: 'text',
  refusal: 'refusal',
};
const ROLES = new Set(['user', 'assistant', 'system', 'developer']);

/** Message content (a string or text parts) as one string. */
function contentText(content: unknown, param: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw new ConversionError(param, 'must be a string or a list of text parts');
  return content
    .map((raw, index) => {
      const where = `${param}.${index}`;
      const part = objectAt(raw, where);
      const key = typeof part.type === 'string' ? TEXT_PARTS[part.type] : undefined;
      if (key === undefined)
        throw new ConversionError(
          `${where}.type`,
          `content parts of type ${JSON.stringify(part.type)} are not supported: the served models are text-only (send input_text parts or a string)`,
        );
      return stringAt(part, key, where);
    })
    .join('');
}

/** The text a reasoning item carries: its reasoning content, then its summary. */
function reasoningText(item: JsonObject, param: string): string {
  let text = '';
  for (const field of ['content', 'summary']) {
    const blocks = item[field];
    if (blocks === undefined || blocks === null) continue;
    if (!Array.isArray(blocks)) throw new ConversionError(`${param}.${field}`, 'must be a list');
    blocks.forEach((block, index) => {
      text += stringAt(objectAt(block, `${param}.${field}.${index}`), 'text', `${param}.${field}.${index}`);
    });
  }
  return text;
}

function functionCall(item: JsonObject, param: string): ChatToolCall {
  return {
    id: stringAt(item, 'call_id', param),
    type: 'function',
    function: { name: nameAt(item, 'name', param), arguments: stringAt(item, 'arguments', param, '{}') },
  };
}

/** Reads items in order into messages, carrying reasoning to the next assistant turn and calls into the open one. */
class ItemReader {
  readonly messages: ChatMessage[] = [];
  private reasoning = '';
  /** The assistant message that function calls join: the one just read, until another kind of item comes. */
  private open: ChatMessage | null = null;

  read(raw: unknown, param: string): void {
    const item = objectAt(raw, param);
    const type = item.type ?? (item.role !== undefined ? 'message' : undefined);
    if (type === 'reasoning') {
      this.reasoning += reasoningText(item, param);
      this.open = null;
    } else if (type === 'function_call') {
      if (!this.open) this.open = this.push({ role: 'assistant', content: '' });
      this.open.tool_calls = [...(this.open.tool_calls ?? []), functionCall(item, param)];
    } else if (type === 'function_call_output') {
      const output = item.output === undefined ? undefined : contentText(item.output, `${param}.output`);
      if (output === undefined) throw new ConversionError(`${param}.output`, 'Field required');
      this.push({ role: 'tool', tool_call_id: stringAt(item, 'call_id', param), content: output });
      this.open = null;
    } else if (type === 'message') {
      const role = stringAt(item, 'role', param);
      if (!ROLES.has(role))
        throw new ConversionError(`${param}.role`, 'must be one of user, assistant, system, developer');
      const message = this.push({ role, content: contentText(item.content ?? '', `${param}.content`) });
      this.open = role === 'assistant' ? message : null;
    } else {
      throw new ConversionError(
        `${param}.type`,
        `input items of type ${JSON.stringify(type ?? null)} are not supported (send message, reasoning, function_call or function_call_output items)`,
      );
    }
  }

  /** The messages, with reasoning that no assistant turn followed as an assistant message of its own. */
  finish(): ChatMessage[] {
    if (this.reasoning !== '') this.messages.push({ role: 'assistant', content: '', reasoning: this.reasoning });
    this.reasoning = '';
    return this.messages;
  }

  /** Adds a message; reasoning read before it goes on it when it is the assistant's, else on a turn of its own. */
  private push(message: ChatMessage): ChatMessage {
    if (this.reasoning !== '') {
      if (message.role === 'assistant') message.reasoning = this.reasoning;
      else this.messages.push({ role: 'assistant', content: '', reasoning: this.reasoning });
      this.reasoning = '';
    }
    this.messages.push(message);
    return message;
  }
}

/** `instructions` (a system message first) and `input` (text: one user message; or items) as chat messages. */
export function responsesMessages(input: unknown, instructions?: unknown): ChatMessage[] {
  const messages: ChatMessage[] = [];
  if (instructions !== undefined && instructions !== null) {
    if (typeof instructions !== 'string') throw new ConversionError('instructions', 'must be a string');
    if (instructions !== '') messages.push({ role: 'system', content: instructions });
  }
  if (typeof input === 'string') return [...messages, { role: 'user', content: input }];
  if (!Array.isArray(input)) throw new ConversionError('input', 'must be a string or a list of input items');
  return [...messages, ...itemMessages(input, 'input')];
}

/** Items (of `input`, or a response's `output`) as chat messages; `param` names the list in errors. */
export function itemMessages(items: readonly unknown[], param: string): ChatMessage[] {
  const reader = new ItemReader();
  items.forEach((item, index) => {
    reader.read(item, `${param}.${index}`);
  });
  return reader.finish();
}

/** Function tools as chat tools; any other kind (web search, file search, MCP, …) is refused, naming it. */
export function responsesTools(tools: unknown): ChatTool[] | null {
  return chatTools(tools, { name: 'function', accepts: (type) => type === 'function', schemaKey: 'parameters' });
}

/** `tool_choice` as a chat completion's: the same words, or a named function. */
export function responsesToolChoice(choice: unknown): ChatToolChoice | null {
  if (choice === undefined || choice === null) return null;
  if (choice === 'none' || choice === 'auto' || choice === 'required') return choice;
  const named = typeof choice === 'object' ? (choice as JsonObject) : {};
  if (named.type === 'function') return { type: 'function', function: { name: nameAt(named, 'name', 'tool_choice') } };
  throw new ConversionError(
    'tool_choice',
    'must be "none", "auto", "required" or {"type": "function", "name": ...}: hosted tools do not run on this server',
  );
}
