/**
 * A captured exchange (ART 0.5.20+'s `exchanges`: the request as sent, the response as received) read into the
 * generations it holds, one per sampled output, with the token evidence the response carries (ART's,
 * art.trajectories._tokenize). This file holds what every API's reader shares: the generation they produce and the
 * helpers that name a malformed field; read-chat.ts (chat completions and completions), read-responses.ts and
 * read-messages.ts read each kind, exchanges.ts reads a trajectory through them.
 */
import type { CapturedExchange } from '../api/models.ts';
import { type ChatMessage, ConversionError } from '../conversation/chat-shapes.ts';
import type { ChatTokenizer } from '../conversation/tokenizer.ts';
import type { FieldProblem } from '../errors.ts';
import type { SampledTurn } from './items.ts';

export const EXCHANGE_KINDS = ['chat_completions', 'completions', 'responses', 'messages'] as const;
export type ExchangeKind = (typeof EXCHANGE_KINDS)[number];

export type Loc = (string | number)[];
/** A JSON object as a captured request or response holds them. */
export type Json = Record<string, unknown>;

/** One sampled output of a captured exchange, with what it was sampled from. */
export interface CapturedGeneration {
  kind: ExchangeKind;
  /** The exchange inside its trajectory (`exchanges.<kind>.<i>`) and the choice inside its response. */
  loc: Loc;
  choiceLoc: Loc;
  /** The model the exchange names (ART's `model`: the request's, else the response's). */
  model: string | null;
  /** ART orders a trajectory's exchanges by start then end time; the position in the request breaks ties. */
  order: [string, string, number];
  /** The conversation it was sampled in (chat kinds), with its tools and template settings; null for a raw prompt. */
  messages: Json[] | null;
  tools: unknown[] | null;
  templateKwargs: Json | null;
  chatTemplate: string | null;
  /** A completions prompt's text (null for chat kinds and token-id prompts) and whether it was tokenized with specials. */
  promptText: string | null;
  addSpecialTokens: boolean;
  /** The prompt's exact ids: the response's `prompt_token_ids`, or a token-id completions prompt as sent. */
  promptIds: number[] | null;
  /** What came back: the assistant message (chat kinds), or completions text. */
  message: Json | null;
  text: string | null;
  /** The output as the legacy form's item for it (an OpenAI `Choice`), for readers that show conversations. */
  item: Json;
  /** The sampled ids with the sampler's logprobs, when the response identifies them (a tokenizer maps logprob bytes). */
  sampled(tokenizer: ChatTokenizer | null): SampledTurn | null;
  /** Whether the response carries the sampler's logprobs: ART trains only such outputs unless told otherwise. */
  hasLogprobs: boolean;
  finishReason: string | null;
  /** A stop string the request gave may have ended it (so no end-of-sequence token follows the text). */
  stopStrings: boolean;
}

export const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
export const isTokenId = (value: unknown): value is number => Number.isInteger(value) && (value as number) >= 0;

/** What readers of one trajectory share: the conversation of each response read so far, for `previous_response_id`. */
export interface ReadingContext {
  responses: Map<string, ChatMessage[]>;
}

/** Reads one exchange's generations, pushing a problem for each field that is not what its kind needs. */
export type ExchangeReader = (
  exchange: CapturedExchange,
  loc: Loc,
  problems: FieldProblem[],
  context: ReadingContext,
) => Omit<CapturedGeneration, 'order'>[];

export function problem(problems: FieldProblem[], loc: Loc, msg: string, type = 'value_error'): void {
  problems.push({ loc, msg, type });
}

/** A list of token ids, or null when absent; anything else is a problem at `loc`. */
export function tokenIds(value: unknown, loc: Loc, problems: FieldProblem[]): number[] | null {
  if (value === undefined || value === null) return null;
  if (Array.isArray(value) && value.every(isTokenId)) return value;
  problem(problems, loc, 'Input should be a list of non-negative integer token ids', 'list_type');
  return null;
}

export const exchangeModel = (exchange: CapturedExchange): string | null => {
  const requested = exchange.request.model;
  if (typeof requested === 'string') return requested;
  if (typeof exchange.model === 'string') return exchange.model;
  return typeof exchange.response.model === 'string' ? exchange.response.model : null;
};

/** The response's choices (at least one object each), or a problem. */
export function choicesOf(exchange: CapturedExchange, loc: Loc, problems: FieldProblem[]): Json[] {
  const choices = exchange.response.choices;
  if (!Array.isArray(choices) || choices.length === 0) {
    problem(problems, [...loc, 'response', 'choices'], 'Input should be a non-empty list of choices', 'list_type');
    return [];
  }
  const bad = choices.findIndex((choice) => !isObject(choice));
  if (bad !== -1) {
    problem(problems, [...loc, 'response', 'choices', bad], 'Input should be a valid dictionary', 'dict_type');
    return [];
  }
  return choices as Json[];
}

export const stopStringsOf = (request: Json) =>
  (typeof request.stop === 'string' && request.stop !== '') || (Array.isArray(request.stop) && request.stop.length > 0);
/** A conversion's error as a problem at the field of the exchange's request or response it names. */
export function conversionProblem(
  problems: FieldProblem[],
  loc: Loc,
  side: 'request' | 'response',
  error: unknown,
): void {
  if (!(error instanceof ConversionError)) throw error;
  const path = error.param.split('.').map((part) => (/^\d+$/.test(part) ? Number(part) : part));
  problems.push({
    loc: [...loc, side, ...path],
    msg: error.message.slice(error.param.length + 2),
    type: 'value_error',
  });
}

/** A chat message as the plain JSON object generations carry. */
export const plain = (message: ChatMessage): Json => ({ ...message });

/** A logprob list (`compact_logprobs`, Messages' `logprobs`) aligned with `ids`, or nulls when it is not one. */
export function alignedLogprobs(values: unknown, ids: number[]): (number | null)[] {
  if (!Array.isArray(values) || values.length !== ids.length) return ids.map(() => null);
  return values.map((value) => (typeof value === 'number' && Number.isFinite(value) ? value : null));
}
