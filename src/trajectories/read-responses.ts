/**
 * A Responses exchange read into its generations (generation.ts): the conversation it was sampled in (instructions,
 * the captured response it continues, its input, through conversation/responses-items.ts as the serving door reads
 * them) and one generation per sampling the answer's `token_generations` reports, else the answer as one turn.
 */
import type { CapturedExchange } from '../api/models.ts';
import type { ChatMessage } from '../conversation/chat-shapes.ts';
import { itemMessages, responsesMessages, responsesTools } from '../conversation/responses-items.ts';
import type { ChatTokenizer } from '../conversation/tokenizer.ts';
import type { FieldProblem } from '../errors.ts';
import {
  alignedLogprobs,
  type CapturedGeneration,
  conversionProblem,
  exchangeModel,
  isObject,
  isTokenId,
  type Json,
  type Loc,
  plain,
  problem,
  type ReadingContext,
  tokenIds,
} from './generation.ts';
import { type SampledTurn, sampledTokens } from './items.ts';

/** Several output messages (a reasoning item, text, calls) as the one assistant turn the model wrote. */
function oneTurn(messages: ChatMessage[]): ChatMessage {
  const turn: ChatMessage = { role: 'assistant', content: messages.map((message) => message.content).join('') };
  const reasoning = messages.map((message) => message.reasoning ?? '').join('');
  const calls = messages.flatMap((message) => message.tool_calls ?? []);
  return { ...turn, ...(reasoning ? { reasoning } : {}), ...(calls.length > 0 ? { tool_calls: calls } : {}) };
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
export function responsesGenerations(
  exchange: CapturedExchange,
  loc: Loc,
  problems: FieldProblem[],
  context: ReadingContext,
): Omit<CapturedGeneration, 'order'>[] {
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
