/**
 * A chat completion request, read and checked before its model is known (vLLM's rules and messages, 400 with the
 * offending `param`), into the one internal `ChatRequest` (../request.ts): the conversation, its tools and tool
 * choice, sampled and prompt logprobs, and the shared sampling fields. The Responses and Messages doors read their
 * own wire shapes into a chat completion body first, so every door's conversation is checked here.
 */

import type { ChatCompletionBody } from '../../api/chat.ts';
import { ConstraintRequestError } from '../../constraints/constraint-error.ts';
import { requestedConstraint } from '../../constraints/request.ts';
import { contentPartProblem } from '../../conversation/messages.ts';
import { badRequest } from '../../errors.ts';
import {
  type ChatRequest,
  checkGenerationRefused,
  checkPromptLogprobs,
  checkRange,
  checkSchedulingOptions,
  isTruthyObject,
  MAX_LOGPROBS,
  outputSwitches,
  type ParseOptions,
  samplingPlan,
  type ToolChoice,
} from '../request.ts';

function parseToolChoice(body: ChatCompletionBody): ToolChoice {
  const tools = body.tools;
  if (tools && tools.length === 0) {
    throw badRequest(
      '`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.',
      'tools',
    );
  }
  const choice = body.tool_choice;
  if (choice === undefined || choice === null) return tools ? 'auto' : 'none';
  if (choice === 'none') return 'none';
  if (!tools) throw badRequest('When using `tool_choice`, `tools` must be set.', 'tool_choice');
  if (typeof choice === 'string') {
    if (choice === 'auto' || choice === 'required') return choice;
    throw badRequest(
      `Invalid value for \`tool_choice\`: ${choice}! Only named tools, "none", "auto" or "required" are supported.`,
      'tool_choice',
    );
  }
  const fn = (choice as { function?: unknown }).function;
  const usage = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`';
  if (!fn || typeof fn !== 'object')
    throw badRequest(
      `Invalid value for \`function\`: \`${JSON.stringify(fn ?? null)}\` in \`tool_choice\`! ${usage}`,
      'tool_choice',
    );
  if (!('name' in fn))
    throw badRequest(`Expected field \`name\` in \`function\` in \`tool_choice\`! ${usage}`, 'tool_choice');
  const name = (fn as { name: unknown }).name;
  if (typeof name !== 'string' || name === '')
    throw badRequest(
      `Invalid \`name\` in \`function\`: \`${JSON.stringify(name)}\` in \`tool_choice\`! ${usage}`,
      'tool_choice',
    );
  if (!tools.some((tool) => tool.function.name === name))
    throw badRequest('The tool specified in `tool_choice` does not match any of the specified `tools`', 'tool_choice');
  return { name };
}

/** The first content part that cannot be rendered, as a 400 naming it (messages.ts says what can be). */
function checkContentParts(messages: Record<string, unknown>[]): void {
  messages.forEach((message, index) => {
    if (!Array.isArray(message.content)) return;
    message.content.forEach((part: unknown, at) => {
      const param = `messages.${index}.content.${at}`;
      const problem = contentPartProblem(part);
      if (problem !== null) throw badRequest(`${param}: ${problem}`, param);
    });
  });
}

/** Features this server refuses outright, and request shapes vLLM refuses before looking at anything else. */
function checkRefused(body: ChatCompletionBody, options: ParseOptions): void {
  if (typeof body.chat_template === 'string' && !options.requestTemplatesAllowed) {
    throw badRequest(
      "chat_template: this server does not run chat templates sent with a request, because a template is code; send none to use the model's own, or ask the operator to start the server with TRUST_REQUEST_CHAT_TEMPLATE=on",
      'chat_template',
    );
  }
  if (isTruthyObject(body.mm_processor_kwargs))
    throw badRequest('mm_processor_kwargs is not supported: the served models are text-only', 'mm_processor_kwargs');
  checkContentParts(body.messages);
  checkGenerationRefused(body);
}

/** Sampled and prompt logprobs: how many, in which token format; ART trains only on choices that carry them. */
function logprobsPlan(
  body: ChatCompletionBody,
  options: ParseOptions,
): Pick<ChatRequest, 'logprobs' | 'promptLogprobs'> {
  const promptLogprobs = checkPromptLogprobs(body);
  const topLogprobs = body.top_logprobs ?? 0;
  checkRange(topLogprobs >= 0 || topLogprobs === -1, '`top_logprobs` must be a positive value or -1.', 'top_logprobs');
  if ((topLogprobs > 0 || topLogprobs === -1) && body.logprobs !== true)
    throw badRequest('when using `top_logprobs`, `logprobs` must be set to true.', 'top_logprobs');
  checkRange(
    topLogprobs !== -1 && topLogprobs <= MAX_LOGPROBS,
    `Requested sample logprobs of ${topLogprobs === -1 ? 'the whole vocabulary' : topLogprobs}, which is greater than max allowed: ${MAX_LOGPROBS}`,
    'top_logprobs',
  );
  // An unset `logprobs` means "yes, as token ids" when the operator turned logprobs on by default.
  const logprobsOn = body.logprobs ?? options.logprobsByDefault;
  const asTokenIds =
    body.return_tokens_as_token_ids ??
    (body.logprobs === undefined || body.logprobs === null ? options.logprobsByDefault : false);
  return {
    logprobs: logprobsOn ? { top: topLogprobs, asTokenIds } : null,
    promptLogprobs: promptLogprobs ?? (body.echo ? topLogprobs : null),
  };
}

function toolsPlan(body: ChatCompletionBody): Pick<ChatRequest, 'toolChoice' | 'parallelToolCalls' | 'constraint'> {
  const toolChoice = parseToolChoice(body);
  const parallelToolCalls = body.parallel_tool_calls ?? true;
  try {
    return { toolChoice, parallelToolCalls, constraint: requestedConstraint(body, toolChoice, parallelToolCalls) };
  } catch (error) {
    if (error instanceof ConstraintRequestError) throw badRequest(error.message, error.param);
    throw error;
  }
}

function checkPromptOptions(body: ChatCompletionBody): void {
  if ((body.continue_final_message ?? false) && (body.add_generation_prompt ?? true)) {
    throw badRequest(
      'Cannot set both `continue_final_message` and `add_generation_prompt` to True.',
      'continue_final_message',
    );
  }
  checkSchedulingOptions(body);
}

/** The request checked in vLLM's order, as the plan reads it. */
export function parseChatRequest(body: ChatCompletionBody, options: ParseOptions): ChatRequest {
  checkRefused(body, options);
  const logprobs = logprobsPlan(body, options);
  const tools = toolsPlan(body);
  checkPromptOptions(body);
  const budget = body.max_completion_tokens ?? null;
  const sampling = samplingPlan(
    body,
    budget !== null
      ? { value: budget, param: 'max_completion_tokens' }
      : { value: body.max_tokens ?? null, param: 'max_tokens' },
  );
  const templateKwargs: Record<string, unknown> = { ...(body.chat_template_kwargs ?? {}) };
  if (body.reasoning_effort) templateKwargs.reasoning_effort = body.reasoning_effort;
  return {
    ...outputSwitches(body, options.requestIdHeader),
    ...logprobs,
    ...tools,
    ...sampling,
    messages: body.messages as Record<string, unknown>[],
    tools: (body.tools as Record<string, unknown>[] | null | undefined) ?? null,
    returnTokenIds: body.return_token_ids ?? false,
    echo: body.echo ?? false,
    addGenerationPrompt: body.add_generation_prompt ?? true,
    continueFinalMessage: body.continue_final_message ?? false,
    addSpecialTokens: body.add_special_tokens ?? false,
    chatTemplate: body.chat_template ?? null,
    templateKwargs,
    documents: body.documents ?? null,
    includeReasoning: body.include_reasoning ?? true,
  };
}
