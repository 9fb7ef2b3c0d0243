/**
 * The chat completion request of the interface, field by field with its type and range. Unknown fields
 * are tolerated (vLLM's `extra="allow"`); the cross-field rules live in chat/request.ts.
 */
import { Type, type Static } from '@sinclair/typebox';

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) => Type.Optional(Type.Union([schema, Type.Null()]));
const INT64_MIN = -9223372036854775808;
const INT64_MAX = 9223372036854775807;

const Message = Type.Object({ role: Type.String() }, { additionalProperties: true });

const Tool = Type.Object(
  {
    type: Type.Optional(Type.Literal('function')),
    function: Type.Object(
      {
        name: Type.String({ minLength: 1 }),
        description: Nullable(Type.String()),
        parameters: Nullable(Type.Record(Type.String(), Type.Unknown())),
      },
      { additionalProperties: true },
    ),
  },
  { additionalProperties: true },
);

export const ChatCompletionBody = Type.Object(
  {
    messages: Type.Array(Message),
    model: Nullable(Type.String()),
    frequency_penalty: Nullable(Type.Number()),
    logit_bias: Nullable(Type.Record(Type.String(), Type.Number())),
    logprobs: Nullable(Type.Boolean()),
    top_logprobs: Nullable(Type.Integer()),
    max_tokens: Nullable(Type.Integer()),
    max_completion_tokens: Nullable(Type.Integer()),
    n: Nullable(Type.Integer()),
    presence_penalty: Nullable(Type.Number()),
    response_format: Nullable(Type.Record(Type.String(), Type.Unknown())),
    seed: Nullable(Type.Integer({ minimum: INT64_MIN, maximum: INT64_MAX })),
    stop: Nullable(Type.Union([Type.String(), Type.Array(Type.String())])),
    stream: Nullable(Type.Boolean()),
    stream_options: Nullable(
      Type.Object(
        { include_usage: Nullable(Type.Boolean()), continuous_usage_stats: Nullable(Type.Boolean()) },
        { additionalProperties: true },
      ),
    ),
    temperature: Nullable(Type.Number()),
    top_p: Nullable(Type.Number()),
    tools: Nullable(Type.Array(Tool)),
    tool_choice: Nullable(Type.Union([Type.String(), Type.Record(Type.String(), Type.Unknown())])),
    reasoning_effort: Nullable(Type.Union([Type.Literal('low'), Type.Literal('medium'), Type.Literal('high')])),
    include_reasoning: Type.Optional(Type.Boolean()),
    parallel_tool_calls: Nullable(Type.Boolean()),
    user: Nullable(Type.String()),
    use_beam_search: Type.Optional(Type.Boolean()),
    top_k: Nullable(Type.Integer()),
    min_p: Nullable(Type.Number()),
    repetition_penalty: Nullable(Type.Number()),
    length_penalty: Type.Optional(Type.Number()),
    stop_token_ids: Nullable(Type.Array(Type.Integer())),
    include_stop_str_in_output: Type.Optional(Type.Boolean()),
    ignore_eos: Type.Optional(Type.Boolean()),
    min_tokens: Type.Optional(Type.Integer()),
    skip_special_tokens: Type.Optional(Type.Boolean()),
    spaces_between_special_tokens: Type.Optional(Type.Boolean()),
    truncate_prompt_tokens: Nullable(Type.Integer({ minimum: -1, maximum: INT64_MAX })),
    prompt_logprobs: Nullable(Type.Integer()),
    allowed_token_ids: Nullable(Type.Array(Type.Integer())),
    bad_words: Type.Optional(Type.Array(Type.String())),
    echo: Type.Optional(Type.Boolean()),
    add_generation_prompt: Type.Optional(Type.Boolean()),
    continue_final_message: Type.Optional(Type.Boolean()),
    add_special_tokens: Type.Optional(Type.Boolean()),
    documents: Nullable(Type.Array(Type.Record(Type.String(), Type.String()))),
    chat_template: Nullable(Type.String()),
    chat_template_kwargs: Nullable(Type.Record(Type.String(), Type.Unknown())),
    mm_processor_kwargs: Nullable(Type.Record(Type.String(), Type.Unknown())),
    structured_outputs: Nullable(Type.Record(Type.String(), Type.Unknown())),
    priority: Type.Optional(Type.Integer({ minimum: INT64_MIN, maximum: INT64_MAX })),
    request_id: Type.Optional(Type.String()),
    return_tokens_as_token_ids: Nullable(Type.Boolean()),
    return_token_ids: Nullable(Type.Boolean()),
    cache_salt: Nullable(Type.String()),
    kv_transfer_params: Nullable(Type.Record(Type.String(), Type.Unknown())),
    repetition_detection: Nullable(
      Type.Object(
        { max_pattern_size: Type.Optional(Type.Integer()), min_pattern_size: Type.Optional(Type.Integer()), min_count: Type.Optional(Type.Integer()) },
        { additionalProperties: true },
      ),
    ),
  },
  { additionalProperties: true },
);
export type ChatCompletionBody = Static<typeof ChatCompletionBody>;
