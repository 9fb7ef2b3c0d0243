/**
 * An Anthropic Messages request read into a chat completion body (the conversation by
 * conversation/anthropic-messages.ts; `max_tokens`, `stop_sequences`, temperature, top-p/k, `output_config.format`
 * as a JSON schema, `thinking` as the template's `enable_thinking`), then checked as every chat-shaped request is
 * (../chat/request.ts), its errors naming this API's fields. One choice; the sampler's evidence (token ids and
 * logprobs) unless the request says `return_token_ids: false` or the operator turned it off by default.
 */
import type { ChatCompletionBody } from '../../api/chat.ts';
import type { CountTokensBody, MessagesBody } from '../../api/messages.ts';
import {
  anthropicMessages,
  anthropicTemplateKwargs,
  anthropicToolChoice,
  anthropicTools,
} from '../../conversation/anthropic-messages.ts';
import { ConversionError } from '../../conversation/chat-shapes.ts';
import { parseChatRequest } from '../chat/request.ts';
import { inDoorTerms } from '../door.ts';
import type { ChatRequest, ParseOptions } from '../request.ts';

/** Chat body fields by the Messages field they came from, for errors. */
const FIELD_NAMES = {
  stop: 'stop_sequences',
  response_format: 'output_config.format',
  max_completion_tokens: 'max_tokens',
  parallel_tool_calls: 'tool_choice',
};

/** The conversation, its tools and the template's switches, as a chat body (a token count reads no more). */
function conversationBody(body: CountTokensBody) {
  const tools = anthropicTools(body.tools);
  const { toolChoice, parallel } = anthropicToolChoice(body.tool_choice);
  return {
    model: body.model,
    messages: anthropicMessages(body.system, body.messages),
    ...(tools ? { tools, parallel_tool_calls: parallel } : {}),
    ...(toolChoice !== null ? { tool_choice: toolChoice } : {}),
    chat_template_kwargs: anthropicTemplateKwargs(body.chat_template_kwargs, body.thinking),
  };
}

/** `output_config.format` (a JSON schema) as the chat body's response format. */
function responseFormat(body: MessagesBody) {
  const format = body.output_config?.format;
  if (!format) return {};
  if (format.type !== 'json_schema' || !format.schema)
    throw new ConversionError('output_config.format', 'must be {"type": "json_schema", "schema": {...}}');
  return { response_format: { type: 'json_schema', json_schema: { name: 'output', schema: format.schema } } };
}

/** The whole request as a chat completion body; `evidence`: the answer carries token ids and logprobs. */
export function messagesChatBody(body: MessagesBody, evidence: boolean): ChatCompletionBody {
  return {
    ...conversationBody(body),
    ...responseFormat(body),
    max_completion_tokens: body.max_tokens,
    stop: body.stop_sequences,
    temperature: body.temperature,
    top_p: body.top_p,
    top_k: body.top_k,
    stream: body.stream ?? false,
    ...(body.stream ? { stream_options: { include_usage: true } } : {}),
    logprobs: evidence,
    return_tokens_as_token_ids: evidence,
    return_token_ids: evidence,
  } as ChatCompletionBody;
}

/** The request checked as a chat request, its errors in Messages terms. */
export function parseMessagesRequest(body: MessagesBody, options: ParseOptions): ChatRequest {
  try {
    return parseChatRequest(messagesChatBody(body, body.return_token_ids ?? options.logprobsByDefault), options);
  } catch (error) {
    throw inDoorTerms(error, FIELD_NAMES);
  }
}

/** A token count's request: the conversation as a chat request would render it. */
export function parseCountTokensRequest(body: CountTokensBody, options: ParseOptions): ChatRequest {
  try {
    return parseChatRequest({ ...conversationBody(body) } as ChatCompletionBody, options);
  } catch (error) {
    throw inDoorTerms(error, FIELD_NAMES);
  }
}
