/**
 * An Anthropic Messages exchange read into its one generation (generation.ts): `system` and `messages` through
 * conversation/anthropic-messages.ts as the serving door reads them, the answer's `content`, and the token evidence
 * the response carries (`prompt_token_ids`, `token_ids`, `logprobs`).
 */
import type { CapturedExchange } from '../api/models.ts';
import {
  anthropicContentMessage,
  anthropicMessages,
  anthropicTemplateKwargs,
  anthropicTools,
} from '../conversation/anthropic-messages.ts';
import type { ChatMessage } from '../conversation/chat-shapes.ts';
import type { FieldProblem } from '../errors.ts';
import {
  alignedLogprobs,
  type CapturedGeneration,
  conversionProblem,
  exchangeModel,
  type Json,
  type Loc,
  plain,
  tokenIds,
} from './generation.ts';

/** An Anthropic Messages exchange: `system` and `messages` → one generation, its `content` the answer. */
export function messagesGenerations(
  exchange: CapturedExchange,
  loc: Loc,
  problems: FieldProblem[],
): Omit<CapturedGeneration, 'order'>[] {
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
