/**
 * Chat completions and completions exchanges read into their generations (generation.ts): one per choice, with the
 * conversation or prompt it answered and the token ids the response carries (chat `token_ids`/`prompt_token_ids`,
 * completions `token_ids` or `logprobs.tokens` as `token_id:<id>`), as ART's tokenizer reads them.
 */
import type { CapturedExchange } from '../api/models.ts';
import type { ChatTokenizer } from '../conversation/tokenizer.ts';
import type { FieldProblem } from '../errors.ts';
import {
  type CapturedGeneration,
  choicesOf,
  exchangeModel,
  isObject,
  isTokenId,
  type Json,
  type Loc,
  problem,
  stopStringsOf,
  tokenIds,
} from './generation.ts';
import { type SampledTurn, sampledTokens } from './items.ts';

const TOKEN_ID = /^token_id:(\d+)$/;

/** A chat completions exchange: `request.messages` → one generation per choice (its `message`). */
export function chatGenerations(
  exchange: CapturedExchange,
  loc: Loc,
  problems: FieldProblem[],
): Omit<CapturedGeneration, 'order'>[] {
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
export function completionGenerations(
  exchange: CapturedExchange,
  loc: Loc,
  problems: FieldProblem[],
): Omit<CapturedGeneration, 'order'>[] {
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
