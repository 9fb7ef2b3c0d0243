/**
 * Each API's captured exchange (ART 0.5.20+'s `exchanges`: the request as sent, the response as received) read into
 * the generations it holds, one per sampled output: the conversation or prompt it was sampled from (the Responses and
 * Messages conversations through conversation/'s readers, as the serving doors read them), what came back, and the
 * token evidence the response carries (ART's, art.trajectories._tokenize: chat `token_ids`/`prompt_token_ids`,
 * completions `token_ids`, Responses `token_generations`, Messages `prompt_token_ids`/`token_ids`/`logprobs`). A field
 * that is not what its kind needs is a problem naming it. trajectory-exchanges.ts reads a trajectory through these.
 */
import type { CapturedExchange } from '../api/models.ts';
import {
  anthropicContentMessage,
  anthropicMessages,
  anthropicTemplateKwargs,
  anthropicTools,
} from '../conversation/anthropic-messages.ts';
import { type ChatMessage, ConversionError } from '../conversation/chat-shapes.ts';
import { itemMessages, responsesMessages, responsesTools } from '../conversation/responses-items.ts';
import type { ChatTokenizer } from '../conversation/tokenizer.ts';
import type { FieldProblem } from '../errors.ts';
import { type SampledTurn, sampledTokens } from './trajectory-items.ts';

export const EXCHANGE_KINDS = ['chat_completions', 'completions', 'responses', 'messages'] as const;
export type ExchangeKind = (typeof EXCHANGE_KINDS)[number];

export type Loc = (string | number)[];
type Json = Record<string, unknown>;

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

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const isTokenId = (value: unknown): value is number => Number.isInteger(value) && (value as number) >= 0;
const TOKEN_ID = /^token_id:(\d+)$/;

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
) => Omit<Generation, 'order'>[];
type Generation = CapturedGeneration;

function problem(problems: FieldProblem[], loc: Loc, msg: string, type = 'value_error'): void {
  problems.push({ loc, msg, type });
}

/** A list of token ids, or null when absent; anything else is a problem at `loc`. */
function tokenIds(value: unknown, loc: Loc, problems: FieldProblem[]): number[] | null {
  if (value === undefined || value === null) return null;
  if (Array.isArray(value) && value.every(isTokenId)) return value;
  problem(problems, loc, 'Input should be a list of non-negative integer token ids', 'list_type');
  return null;
}

const exchangeModel = (exchange: CapturedExchange): string | null => {
  const requested = exchange.request.model;
  if (typeof requested === 'string') return requested;
  if (typeof exchange.model === 'string') return exchange.model;
  return typeof exchange.response.model === 'string' ? exchange.response.model : null;
};

/** The response's choices (at least one object each), or a problem. */
function choicesOf(exchange: CapturedExchange, loc: Loc, problems: FieldProblem[]): Json[] {
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

const stopStringsOf = (request: Json) =>
  (typeof request.stop === 'string' && request.stop !== '') || (Array.isArray(request.stop) && request.stop.length > 0);

/** A chat completions exchange: `request.messages` → one generation per choice (its `message`). */
function chatGenerations(exchange: CapturedExchange, loc: Loc, problems: FieldProblem[]): Omit<Generation, 'order'>[] {
  const { request, response } = exchange;
  const messages = request.messages;
  if (!Array.isArray(messages) || !messages.every(isObject)) {
    problem(problems, [...loc, 'request', 'messages'], 'Input should be a list of chat messages', 'list_type');
    return [];
  }
  const tools = Array.isArray(request.tools) ? request.tools : null;
  const responsePrompt = tokenIds(response.prompt_token_ids, [...loc, 'response', 'prompt_token_ids'], problems);
  return choicesOf(exchange, loc, problems).flatMap((choice, index) => {
    const choiceLoc = [...loc, 'response', 'choices', index];
    if (!isObject(choice.message)) {
      problem(problems, [...choiceLoc, 'message'], 'Field required: a choice carries the assistant message', 'missing');
      return [];
    }
    const promptIds = tokenIds(choice.prompt_token_ids, [...choiceLoc, 'prompt_token_ids'], problems) ?? responsePrompt;
    tokenIds(choice.token_ids, [...choiceLoc, 'token_ids'], problems);
    return [
      {
        kind: 'chat_completions' as const,
        loc,
        choiceLoc,
        model: exchangeModel(exchange),
        messages: messages as Json[],
        tools,
        templateKwargs: isObject(request.chat_template_kwargs) ? request.chat_template_kwargs : null,
        chatTemplate: typeof request.chat_template === 'string' ? request.chat_template : null,
        promptText: null,
        addSpecialTokens: false,
        promptIds: promptIds && promptIds.length > 0 ? promptIds : null,
        message: { ...choice.message, role: 'assistant' },
        text: null,
        item: choice,
        sampled: (tokenizer: ChatTokenizer | null) => sampledTokens(tokenizer, choice),
        hasLogprobs: choice.logprobs !== null && choice.logprobs !== undefined,
        finishReason: typeof choice.finish_reason === 'string' ? choice.finish_reason : null,
        stopStrings: stopStringsOf(request),
      },
    ];
  });
}

/** A completions `prompt`: one text or token-id prompt, or a batch of them; null (and a problem) for anything else. */
function completionPrompts(prompt: unknown, loc: Loc, problems: FieldProblem[]): (string | number[])[] | null {
  if (typeof prompt === 'string') return [prompt];
  if (Array.isArray(prompt) && prompt.length > 0) {
    if (prompt.every(isTokenId)) return [prompt];
    if (prompt.every((item) => typeof item === 'string' || (Array.isArray(item) && item.every(isTokenId))))
      return prompt as (string | number[])[];
  }
  problem(
    problems,
    [...loc, 'request', 'prompt'],
    'Input should be a text prompt, a list of token ids, or a batch of either',
    'union_error',
  );
  return null;
}

/**
 * The sampled ids of a completions choice and their logprobs: `token_ids` (vLLM's `return_token_ids`), else
 * `logprobs.tokens` written as `token_id:<id>`; an echoed prompt's part of the logprobs is cut off.
 */
function completionSampled(choice: Json, promptIds: number[] | null, echo: boolean): SampledTurn | null {
  const logprobs = isObject(choice.logprobs) ? choice.logprobs : {};
  const values = Array.isArray(logprobs.token_logprobs)
    ? logprobs.token_logprobs.map((value) => (typeof value === 'number' && Number.isFinite(value) ? value : null))
    : [];
  const tokens = Array.isArray(logprobs.tokens) ? logprobs.tokens : [];
  const fromTokens = tokens.map((token) => TOKEN_ID.exec(String(token))?.[1]).map((id) => (id ? Number(id) : null));
  let ids: number[] | null = Array.isArray(choice.token_ids) && choice.token_ids.length > 0 ? choice.token_ids : null;
  let path: Loc = ['token_ids'];
  if (!ids && fromTokens.length > 0 && fromTokens.every((id) => id !== null)) {
    ids = fromTokens as number[];
    path = ['logprobs', 'tokens'];
  }
  if (!ids) return null;
  const echoed = echo && promptIds !== null ? promptIds.length : 0;
  if (path[0] === 'logprobs' && echoed > 0) ids = ids.slice(echoed);
  const own = values.length === ids.length + echoed ? values.slice(echoed) : values;
  return {
    ids,
    logprobs: own.length === ids.length ? own : ids.map(() => null),
    pathOf: (position) => [...path, position + (path[0] === 'logprobs' ? echoed : 0)],
  };
}

/** Which prompt of a batch each choice answers: `n` choices per prompt, in order (vLLM's and OpenAI's layout). */
function promptOfChoice(count: number, choices: number, loc: Loc, problems: FieldProblem[]): number {
  if (choices % count === 0) return choices / count;
  problem(
    problems,
    [...loc, 'response', 'choices'],
    `${choices} choices cannot answer ${count} batched prompts (n choices each)`,
  );
  return 0;
}

/** A completions exchange: `request.prompt` → one generation per choice (its `text`). */
function completionGenerations(
  exchange: CapturedExchange,
  loc: Loc,
  problems: FieldProblem[],
): Omit<Generation, 'order'>[] {
  const { request, response } = exchange;
  if (request.suffix !== undefined && request.suffix !== null) {
    problem(problems, [...loc, 'request', 'suffix'], 'A completions suffix cannot be trained (ART refuses it too)');
    return [];
  }
  const prompts = completionPrompts(request.prompt, loc, problems);
  const choices = choicesOf(exchange, loc, problems);
  if (!prompts || choices.length === 0) return [];
  const perPrompt = promptOfChoice(prompts.length, choices.length, loc, problems);
  if (perPrompt === 0) return [];
  const echo = request.echo === true;
  const responsePrompt = tokenIds(response.prompt_token_ids, [...loc, 'response', 'prompt_token_ids'], problems);
  return choices.flatMap((choice, index) => {
    const choiceLoc = [...loc, 'response', 'choices', index];
    if (typeof choice.text !== 'string') {
      problem(problems, [...choiceLoc, 'text'], 'Input should be a valid string', 'string_type');
      return [];
    }
    const prompt = prompts[Math.floor(index / perPrompt)];
    const sent = typeof prompt === 'string' ? null : prompt;
    const promptIds =
      tokenIds(choice.prompt_token_ids, [...choiceLoc, 'prompt_token_ids'], problems) ??
      (prompts.length === 1 ? responsePrompt : null) ??
      sent;
    tokenIds(choice.token_ids, [...choiceLoc, 'token_ids'], problems);
    let text = choice.text;
    if (echo && typeof prompt === 'string') {
      if (!text.startsWith(prompt))
        problem(problems, [...choiceLoc, 'text'], 'An echoed completion should start with its prompt');
      text = text.slice(prompt.length);
    }
    return [
      {
        kind: 'completions' as const,
        loc,
        choiceLoc,
        model: exchangeModel(exchange),
        messages: null,
        tools: null,
        templateKwargs: null,
        chatTemplate: null,
        promptText: typeof prompt === 'string' ? prompt : null,
        addSpecialTokens: request.add_special_tokens !== false,
        promptIds: promptIds && promptIds.length > 0 ? promptIds : null,
        message: null,
        text: echo && sent ? null : text,
        item: {
          index: choice.index ?? index,
          message: { role: 'assistant', content: text },
          logprobs: choice.logprobs ?? null,
          finish_reason: choice.finish_reason ?? null,
        },
        sampled: () => completionSampled(choice, promptIds, echo),
        hasLogprobs: choice.logprobs !== null && choice.logprobs !== undefined,
        finishReason: typeof choice.finish_reason === 'string' ? choice.finish_reason : null,
        stopStrings: stopStringsOf(request),
      },
    ];
  });
}

/** A conversion's error as a problem at the field of the exchange's request or response it names. */
function conversionProblem(problems: FieldProblem[], loc: Loc, side: 'request' | 'response', error: unknown): void {
  if (!(error instanceof ConversionError)) throw error;
  const path = error.param.split('.').map((part) => (/^\d+$/.test(part) ? Number(part) : part));
  problems.push({
    loc: [...loc, side, ...path],
    msg: error.message.slice(error.param.length + 2),
    type: 'value_error',
  });
}

/** A chat message as the plain JSON object generations carry. */
const plain = (message: ChatMessage): Json => ({ ...message });

/** Several output messages (a reasoning item, text, calls) as the one assistant turn the model wrote. */
function oneTurn(messages: ChatMessage[]): ChatMessage {
  const turn: ChatMessage = { role: 'assistant', content: messages.map((message) => message.content).join('') };
  const reasoning = messages.map((message) => message.reasoning ?? '').join('');
  const calls = messages.flatMap((message) => message.tool_calls ?? []);
  return { ...turn, ...(reasoning ? { reasoning } : {}), ...(calls.length > 0 ? { tool_calls: calls } : {}) };
}

/** A logprob list (`compact_logprobs`, Messages' `logprobs`) aligned with `ids`, or nulls when it is not one. */
function alignedLogprobs(values: unknown, ids: number[]): (number | null)[] {
  if (!Array.isArray(values) || values.length !== ids.length) return ids.map(() => null);
  return values.map((value) => (typeof value === 'number' && Number.isFinite(value) ? value : null));
}

/** What a Responses exchange was sampled in: instructions, the response it continues (when captured), its input. */
function responsesConversation(
  exchange: CapturedExchange,
  loc: Loc,
  problems: FieldProblem[],
  context: ReadingContext,
) {
  const { request } = exchange;
  const previousId = request.previous_response_id;
  const previous = typeof previousId === 'string' ? context.responses.get(previousId) : [];
  if (!previous) {
    problem(problems, [...loc, 'request', 'previous_response_id'], 'names a response this trajectory did not capture');
    return null;
  }
  try {
    const input = request.input === undefined || request.input === null ? [] : responsesMessages(request.input);
    return {
      instructions: responsesMessages([], request.instructions),
      conversation: [...previous, ...input],
      tools: responsesTools(request.tools),
    };
  } catch (error) {
    conversionProblem(problems, loc, 'request', error);
    return null;
  }
}

/** The sampler's generations a Responses answer reports (`token_generations`), each with its output items' turn. */
function tokenGenerations(
  response: Json,
  loc: Loc,
  problems: FieldProblem[],
  turn: (indices: number[]) => ChatMessage,
) {
  const raw = response.token_generations;
  if (raw === undefined || raw === null) return null;
  if (!Array.isArray(raw) || raw.length === 0 || !raw.every(isObject)) {
    problem(problems, [...loc, 'response', 'token_generations'], 'Input should be a non-empty list of generations');
    return [];
  }
  return raw.flatMap((generation, index) => {
    const at = [...loc, 'response', 'token_generations', index];
    const promptIds = tokenIds(generation.prompt_token_ids, [...at, 'prompt_token_ids'], problems);
    const ids = tokenIds(generation.token_ids, [...at, 'token_ids'], problems);
    const indices = Array.isArray(generation.output_indices) ? generation.output_indices.filter(isTokenId) : [];
    if (!promptIds || !ids) {
      if (!promptIds) problem(problems, [...at, 'prompt_token_ids'], 'Field required', 'missing');
      if (!ids) problem(problems, [...at, 'token_ids'], 'Field required', 'missing');
      return [];
    }
    const logprobs = alignedLogprobs(generation.compact_logprobs, ids);
    const sampled: SampledTurn = {
      ids,
      logprobs,
      pathOf: (position) => ['token_generations', index, 'token_ids', position],
    };
    return [{ promptIds, sampled, hasLogprobs: logprobs.some((value) => value !== null), message: turn(indices), at }];
  });
}

/** A Responses exchange: instructions and input (or the captured response it continues) → one generation per sampling. */
function responsesGenerations(
  exchange: CapturedExchange,
  loc: Loc,
  problems: FieldProblem[],
  context: ReadingContext,
): Omit<Generation, 'order'>[] {
  const { request, response } = exchange;
  const read = responsesConversation(exchange, loc, problems, context);
  const output = response.output;
  if (!Array.isArray(output)) {
    problem(problems, [...loc, 'response', 'output'], 'Input should be a list of output items', 'list_type');
    return [];
  }
  if (!read) return [];
  const turn = (indices: number[] | null) => {
    try {
      const items = indices === null ? output : indices.map((index) => output[index]);
      return oneTurn(itemMessages(items, 'output'));
    } catch (error) {
      conversionProblem(problems, loc, 'response', error);
      return null;
    }
  };
  const whole = turn(null);
  if (!whole) return [];
  if (typeof response.id === 'string') context.responses.set(response.id, [...read.conversation, whole]);
  const messages = [...read.instructions, ...read.conversation].map(plain);
  const generations = tokenGenerations(response, loc, problems, (indices) => turn(indices) ?? whole);
  const common = {
    kind: 'responses' as const,
    loc,
    model: exchangeModel(exchange),
    messages,
    tools: read.tools,
    templateKwargs: isObject(request.chat_template_kwargs) ? request.chat_template_kwargs : null,
    chatTemplate: typeof request.chat_template === 'string' ? request.chat_template : null,
    promptText: null,
    addSpecialTokens: false,
    text: null,
    finishReason: response.status === 'incomplete' ? 'length' : 'stop',
    stopStrings: false,
  };
  if (generations === null) {
    // No exact evidence: the answer's text logprobs, when it is text alone, as a chat choice's would be read.
    const textOnly = output.every((item) => isObject(item) && item.type === 'message');
    const entries = output.flatMap((item) =>
      isObject(item) && Array.isArray(item.content)
        ? item.content.flatMap((part) => (isObject(part) && Array.isArray(part.logprobs) ? part.logprobs : []))
        : [],
    );
    const choice = { logprobs: textOnly && entries.length > 0 ? { content: entries } : null };
    return [
      {
        ...common,
        choiceLoc: [...loc, 'response', 'output'],
        promptIds: null,
        message: plain(whole),
        item: { index: 0, message: plain(whole), logprobs: choice.logprobs, finish_reason: common.finishReason },
        sampled: (tokenizer: ChatTokenizer | null) => sampledTokens(tokenizer, choice),
        hasLogprobs: choice.logprobs !== null,
      },
    ];
  }
  return generations.map((generation) => ({
    ...common,
    choiceLoc: generation.at,
    promptIds: generation.promptIds,
    message: plain(generation.message),
    item: { index: 0, message: plain(generation.message), finish_reason: common.finishReason },
    sampled: () => generation.sampled,
    hasLogprobs: generation.hasLogprobs,
  }));
}

/** An Anthropic Messages exchange: `system` and `messages` → one generation, its `content` the answer. */
function messagesGenerations(
  exchange: CapturedExchange,
  loc: Loc,
  problems: FieldProblem[],
): Omit<Generation, 'order'>[] {
  const { request, response } = exchange;
  let messages: ChatMessage[];
  let message: ChatMessage;
  let tools: unknown[] | null;
  let templateKwargs: Json;
  try {
    messages = anthropicMessages(request.system, request.messages);
    tools = anthropicTools(request.tools);
    templateKwargs = anthropicTemplateKwargs(request.chat_template_kwargs, request.thinking);
  } catch (error) {
    conversionProblem(problems, loc, 'request', error);
    return [];
  }
  try {
    message = anthropicContentMessage(response.content);
  } catch (error) {
    conversionProblem(problems, loc, 'response', error);
    return [];
  }
  const promptIds = tokenIds(response.prompt_token_ids, [...loc, 'response', 'prompt_token_ids'], problems);
  const ids = tokenIds(response.token_ids, [...loc, 'response', 'token_ids'], problems);
  const logprobs = ids ? alignedLogprobs(response.compact_logprobs ?? response.logprobs, ids) : null;
  const finishReason = response.stop_reason === 'max_tokens' ? 'length' : 'stop';
  return [
    {
      kind: 'messages',
      loc,
      choiceLoc: [...loc, 'response'],
      model: exchangeModel(exchange),
      messages: messages.map(plain),
      tools,
      templateKwargs,
      chatTemplate: typeof request.chat_template === 'string' ? request.chat_template : null,
      promptText: null,
      addSpecialTokens: false,
      promptIds: promptIds && promptIds.length > 0 ? promptIds : null,
      message: plain(message),
      text: null,
      item: { index: 0, message: plain(message), finish_reason: finishReason },
      sampled: () =>
        ids && ids.length > 0 ? { ids, logprobs: logprobs!, pathOf: (position) => ['token_ids', position] } : null,
      hasLogprobs: logprobs?.some((value) => value !== null) ?? false,
      finishReason,
      stopStrings: Array.isArray(request.stop_sequences) && request.stop_sequences.length > 0,
    },
  ];
}

/** Each API's reader. */
export const READERS: Record<ExchangeKind, ExchangeReader> = {
  chat_completions: chatGenerations,
  completions: completionGenerations,
  responses: responsesGenerations,
  messages: messagesGenerations,
};
