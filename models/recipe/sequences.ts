/**
 * Conversations → token ids with a loss mask, rendered by the model's own chat template and tokenized
 * by its own tokenizer, exactly as the service renders a prompt. The mask is 1 on the tokens of every
 * assistant turn after its generation prompt, including the `<|im_end|>` that ends it (the model must
 * learn to stop), and 0 elsewhere.
 *
 * Fast on tens of thousands of conversations: one template render each, and the text is tokenized
 * piece by piece between added tokens (which is how the tokenizer itself splits it first), so the
 * pieces that repeat, such as system prompts with their tool lists, are tokenized once.
 */
import { renderChat } from '../../src/conversation/template.ts';
import type { ChatTokenizer } from '../../src/conversation/tokenizer.ts';
import type { Conversation, Message, Tool } from './chat-data.ts';
import { ADDED_TOKENS } from './recipe.ts';

export interface TokenizedConversation {
  ids: number[];
  /** mask[t] = 1: token t is a target of the loss (predicted from the tokens before it). */
  mask: number[];
}

const START = '<|im_start|>';
const END = '<|im_end|>';
const ASSISTANT_HEADER = 'assistant\n';
const EMPTY_THINK = ['<think>', '\n\n', '</think>', '\n\n'];
/** A regex source matching any added token. */
export const ADDED_TOKEN_ALTERNATION = ADDED_TOKENS.map((t) => t.content.replace(/[|\\/<>]/g, (c) => `\\${c}`)).join(
  '|',
);
const ADDED_TOKEN_SPLIT = new RegExp(`(${ADDED_TOKEN_ALTERNATION})`);
const ADDED = new Set<string>(ADDED_TOKENS.map((t) => t.content));

export function renderPrompt(template: string, messages: Message[], tools?: Tool[], thinkingOff = false): string {
  return renderChat({
    template,
    messages,
    tools,
    addGenerationPrompt: true,
    kwargs: thinkingOff ? { enable_thinking: false } : {},
  });
}

/** The whole conversation as the template renders it; a thinking-off final turn follows its own generation prompt. */
function renderConversation({ messages, tools, thinkingOff }: Conversation, template: string): string {
  const last = messages.at(-1);
  if (thinkingOff && last?.role === 'assistant') {
    return `${renderPrompt(template, messages.slice(0, -1), tools, true)}${String(last.content)}${END}\n`;
  }
  return renderChat({ template, messages, tools, addGenerationPrompt: false });
}

export class ConversationTokenizer {
  private readonly pieceIds = new Map<string, number[]>();

  constructor(
    private readonly tokenizer: ChatTokenizer,
    private readonly template: string,
  ) {}

  private encodePiece(piece: string): number[] {
    let ids = this.pieceIds.get(piece);
    if (!ids) {
      ids = this.tokenizer.encode(piece);
      this.pieceIds.set(piece, ids);
    }
    return ids;
  }

  tokenize(conversation: Conversation): TokenizedConversation {
    const text = renderConversation(conversation, this.template);
    const parts = text.split(ADDED_TOKEN_SPLIT).filter((part) => part !== '');
    const ids: number[] = [];
    const mask: number[] = [];
    const push = (pieceIds: number[], trained: boolean) => {
      ids.push(...pieceIds);
      for (let i = 0; i < pieceIds.length; i++) mask.push(trained ? 1 : 0);
    };
    let inAssistantTurn = false;
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i];
      if (ADDED.has(part)) {
        push(this.encodePiece(part), inAssistantTurn);
        if (part === END) inAssistantTurn = false;
        continue;
      }
      if (parts[i - 1] !== START || !part.startsWith(ASSISTANT_HEADER)) {
        push(this.encodePiece(part), inAssistantTurn);
        continue;
      }
      // An assistant turn: its header, and an empty think block when the turn opens with one, are prompt.
      let header = ASSISTANT_HEADER;
      let content = part.slice(header.length);
      if (
        content === '' &&
        EMPTY_THINK.every((piece, k) => (k === 3 ? parts[i + 1 + k]?.startsWith(piece) : parts[i + 1 + k] === piece))
      ) {
        push(this.encodePiece(header), false);
        for (const piece of EMPTY_THINK.slice(0, 3)) push(this.encodePiece(piece), false);
        i += 4;
        header = EMPTY_THINK[3];
        content = parts[i].slice(header.length);
      }
      const whole = this.encodePiece(header + content);
      const headerIds = this.encodePiece(header);
      if (headerIds.some((id, k) => whole[k] !== id)) {
        throw new Error(
          `the assistant header does not tokenize apart from its content: ${JSON.stringify(header + content)}`,
        );
      }
      push(headerIds, false);
      push(whole.slice(headerIds.length), true);
      inAssistantTurn = true;
    }
    return { ids, mask };
  }
}
