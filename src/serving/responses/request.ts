/**
 * A Responses API request read into a chat completion body, then checked as every chat-shaped request is
 * (../chat/request.ts), its errors naming this API's fields: the conversation (a stored response's, when it
 * continues one, then `input`, by conversation/responses-items.ts) after `instructions` (never carried over from the
 * previous response, as OpenAI does); function tools and tool choice; `max_output_tokens`, temperature, top-p,
 * `text.format` (a JSON schema or a JSON object), `reasoning.effort`; logprobs on the output text when `include`
 * asks for them, and the sampler's evidence (`token_generations`) unless the request or the operator says no.
 */
import type { ChatCompletionBody } from '../../api/chat.ts';
import type { ResponsesBody } from '../../api/responses.ts';
import { type ChatMessage, ConversionError, objectAt } from '../../conversation/chat-shapes.ts';
import { responsesMessages, responsesToolChoice, responsesTools } from '../../conversation/responses-items.ts';
import { badRequest } from '../../errors.ts';
import { parseChatRequest } from '../chat/request.ts';
import { inDoorTerms } from '../door.ts';
import type { ChatRequest, ParseOptions } from '../request.ts';

/** Chat body fields by the Responses field they came from, for errors. */
const FIELD_NAMES = {
  max_completion_tokens: 'max_output_tokens',
  response_format: 'text.format',
  messages: 'input',
  reasoning_effort: 'reasoning.effort',
};
const LOGPROBS_INCLUDE = 'message.output_text.logprobs';

export interface ResponsesRequest {
  chat: ChatRequest;
  /** The conversation without the instructions: the stored one it continues, then the input. */
  conversation: ChatMessage[];
  /** Whether the output text carries its tokens' logprobs (`include: ["message.output_text.logprobs"]`). */
  outputLogprobs: boolean;
  /** Whether the response carries `token_generations`. */
  evidence: boolean;
}

/** What this server refuses outright: background responses, truncation of the conversation. */
function checkRefused(body: ResponsesBody, continues: boolean): void {
  if (body.background)
    throw badRequest('background responses are not supported: send the request and wait', 'background');
  if (body.truncation && body.truncation !== 'disabled')
    throw badRequest(
      'truncation: only "disabled" is supported (a conversation longer than the context is a 400)',
      'truncation',
    );
  if (body.input === undefined && !continues) throw badRequest('input: Field required', 'input');
}

/** `text.format` as a chat response format: text, a JSON object, or a JSON schema. */
function responseFormat(body: ResponsesBody) {
  const format = body.text?.format;
  if (!format || format.type === 'text') return {};
  if (format.type === 'json_object') return { response_format: { type: 'json_object' } };
  if (format.type !== 'json_schema')
    throw new ConversionError('text.format.type', 'must be one of text, json_object, json_schema');
  const schema = objectAt(format.schema, 'text.format.schema');
  const name = typeof format.name === 'string' ? format.name : 'output';
  return { response_format: { type: 'json_schema', json_schema: { name, schema, strict: format.strict ?? null } } };
}

/** The whole request as a chat completion body over the given conversation. */
function chatBody(body: ResponsesBody, messages: ChatMessage[], outputLogprobs: boolean, evidence: boolean) {
  const tools = responsesTools(body.tools);
  const toolChoice = responsesToolChoice(body.tool_choice);
  return {
    model: body.model,
    messages,
    ...(tools ? { tools } : {}),
    ...(toolChoice !== null ? { tool_choice: toolChoice } : {}),
    parallel_tool_calls: body.parallel_tool_calls,
    ...responseFormat(body),
    max_completion_tokens: body.max_output_tokens,
    temperature: body.temperature,
    top_p: body.top_p,
    ...(body.reasoning?.effort ? { reasoning_effort: body.reasoning.effort } : {}),
    chat_template_kwargs: body.chat_template_kwargs,
    stream: body.stream ?? false,
    logprobs: outputLogprobs || evidence,
    top_logprobs: outputLogprobs ? (body.top_logprobs ?? 0) : 0,
    return_tokens_as_token_ids: evidence && !outputLogprobs,
    return_token_ids: evidence,
  } as ChatCompletionBody;
}

/** The request checked; `previous` is the conversation of the response it continues (none: empty). */
export function parseResponsesRequest(
  body: ResponsesBody,
  previous: ChatMessage[] | null,
  options: ParseOptions,
): ResponsesRequest {
  try {
    checkRefused(body, previous !== null);
    const outputLogprobs = (body.include ?? []).includes(LOGPROBS_INCLUDE) || (body.top_logprobs ?? 0) > 0;
    const evidence = body.return_token_ids ?? options.logprobsByDefault;
    const instructions = responsesMessages([], body.instructions);
    const conversation = [...(previous ?? []), ...(body.input === undefined ? [] : responsesMessages(body.input))];
    const chat = parseChatRequest(chatBody(body, [...instructions, ...conversation], outputLogprobs, evidence), {
      ...options,
      // A stored response's id must be unique, so it never comes from the request's x-request-id.
      requestIdHeader: undefined,
    });
    return { chat: { ...chat, requestId: null }, conversation, outputLogprobs, evidence };
  } catch (error) {
    throw inDoorTerms(error, FIELD_NAMES);
  }
}
