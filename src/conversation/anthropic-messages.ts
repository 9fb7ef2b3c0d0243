/**
 * The Anthropic Messages API's conversation as chat messages (chat-shapes.ts), for the serving door and for training
 * on captured exchanges alike: `system` becomes a system message; each message's content blocks become chat turns
 * (text joined without a separator, `thinking` as the turn's reasoning, `tool_use` as its tool calls, each
 * `tool_result` as a tool message after the text before it), as ART's tokenizer reads a captured exchange; custom
 * tools become chat tools and `tool_choice` a chat tool choice; a response's content blocks become the assistant
 * message they stand for. Refuses what a text-only chat template cannot render (images, documents, server tools).
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

const textOnly = (param: string, type: unknown) =>
  new ConversionError(
    `${param}.type`,
    `content blocks of type ${JSON.stringify(type ?? null)} are not supported: the served models are text-only`,
  );

/** Text or a list of text blocks as one string (system prompts, tool results). */
function blockText(content: unknown, param: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw new ConversionError(param, 'must be a string or a list of text blocks');
  return content
    .map((raw, index) => {
      const block = objectAt(raw, `${param}.${index}`);
      if (block.type !== 'text') throw textOnly(`${param}.${index}`, block.type);
      return stringAt(block, 'text', `${param}.${index}`);
    })
    .join('');
}

function toolUse(block: JsonObject, param: string): ChatToolCall {
  const input = block.input ?? {};
  return {
    id: stringAt(block, 'id', param),
    type: 'function',
    function: { name: nameAt(block, 'name', param), arguments: JSON.stringify(objectAt(input, `${param}.input`)) },
  };
}

/** One message's blocks as chat turns: tool results as tool messages, the rest as one turn of the message's role. */
function messageTurns(role: string, content: unknown, param: string): ChatMessage[] {
  if (typeof content === 'string') return [{ role, content }];
  if (!Array.isArray(content)) throw new ConversionError(param, 'must be a string or a list of content blocks');
  const turns: ChatMessage[] = [];
  let text = '';
  let reasoning = '';
  const calls: ChatToolCall[] = [];
  content.forEach((raw, index) => {
    const where = `${param}.${index}`;
    const block = objectAt(raw, where);
    if (block.type === 'text') text += stringAt(block, 'text', where);
    else if (block.type === 'thinking') reasoning += stringAt(block, 'thinking', where);
    else if (block.type === 'redacted_thinking')
      return; // opaque to us: accepted so a client can echo a turn back
    else if (block.type === 'tool_use') calls.push(toolUse(block, where));
    else if (block.type === 'tool_result') {
      if (text !== '') turns.push({ role, content: text });
      text = '';
      const result = block.content === undefined || block.content === null ? '' : block.content;
      turns.push({
        role: 'tool',
        tool_call_id: stringAt(block, 'tool_use_id', where),
        content: blockText(result, `${where}.content`),
      });
    } else throw textOnly(where, block.type);
  });
  if (text !== '' || reasoning !== '' || calls.length > 0 || role === 'assistant')
    turns.push({
      role,
      content: text,
      ...(reasoning !== '' ? { reasoning } : {}),
      ...(calls.length > 0 ? { tool_calls: calls } : {}),
    });
  return turns;
}

/** `system` (text or text blocks) and `messages` as chat messages. */
export function anthropicMessages(system: unknown, messages: unknown): ChatMessage[] {
  const out: ChatMessage[] = [];
  if (system !== undefined && system !== null) {
    const text = blockText(system, 'system');
    if (text !== '') out.push({ role: 'system', content: text });
  }
  if (!Array.isArray(messages)) throw new ConversionError('messages', 'must be a list of messages');
  messages.forEach((raw, index) => {
    const param = `messages.${index}`;
    const message = objectAt(raw, param);
    const role = stringAt(message, 'role', param);
    if (role !== 'user' && role !== 'assistant')
      throw new ConversionError(`${param}.role`, 'must be "user" or "assistant"');
    if (message.content === undefined) throw new ConversionError(`${param}.content`, 'Field required');
    for (const turn of messageTurns(role, message.content, `${param}.content`)) out.push(turn);
  });
  return out;
}

/** A response's content blocks (text, thinking, tool_use) as the one assistant message they stand for. */
export function anthropicContentMessage(content: unknown, param = 'content'): ChatMessage {
  const turns = messageTurns('assistant', content, param);
  if (turns.some((turn) => turn.role !== 'assistant'))
    throw new ConversionError(param, 'an assistant turn holds no tool_result blocks');
  return turns[0];
}

/**
 * The template's switches of a request: its `chat_template_kwargs`, with `thinking: {type: enabled | disabled}` as the
 * `enable_thinking` reasoning models read (a kwarg given explicitly wins).
 */
export function anthropicTemplateKwargs(kwargs: unknown, thinking: unknown): Record<string, unknown> {
  const switches = kwargs !== null && typeof kwargs === 'object' ? { ...(kwargs as JsonObject) } : {};
  const type = thinking !== null && typeof thinking === 'object' ? (thinking as JsonObject).type : undefined;
  if (type === 'enabled' || type === 'disabled') switches.enable_thinking ??= type === 'enabled';
  else if (type !== undefined) throw new ConversionError('thinking.type', 'must be "enabled" or "disabled"');
  return switches;
}

/** Custom tools (`name`, `description`, `input_schema`) as chat tools; server tools (bash, web search, …) are refused. */
export function anthropicTools(tools: unknown): ChatTool[] | null {
  return chatTools(tools, {
    name: 'custom',
    accepts: (type) => type === undefined || type === null || type === 'custom',
    schemaKey: 'input_schema',
  });
}

/** `tool_choice` ({type: auto | any | tool | none}) as a chat tool choice and whether calls may run in parallel. */
export function anthropicToolChoice(choice: unknown): { toolChoice: ChatToolChoice | null; parallel: boolean } {
  if (choice === undefined || choice === null) return { toolChoice: null, parallel: true };
  const object = objectAt(choice, 'tool_choice');
  const parallel = object.disable_parallel_tool_use !== true;
  switch (object.type) {
    case 'auto':
      return { toolChoice: 'auto', parallel };
    case 'any':
      return { toolChoice: 'required', parallel };
    case 'none':
      return { toolChoice: 'none', parallel };
    case 'tool':
      return { toolChoice: { type: 'function', function: { name: nameAt(object, 'name', 'tool_choice') } }, parallel };
    default:
      throw new ConversionError('tool_choice.type', 'must be one of auto, any, tool, none');
  }
}
