/**
 * The chat completion interface: the request field by field with its type and range (unknown fields are
 * tolerated, vLLM's `extra="allow"`; the cross-field rules live in chat/request.ts), and the answer, whole
 * (`ChatCompletion`) or streamed (`ChatCompletionChunk`), as chat/response.ts assembles it and the dashboard reads it.
 */
import { type Static, type TProperties, Type } from '@sinclair/typebox';

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) =>
  Type.Optional(Type.Union([schema, Type.Null()]));
/** int64's range as JSON numbers arrive here: as doubles, so its top is 2 ** 63 (the nearest double to 2 ** 63 - 1). */
const INT64_MIN = -(2 ** 63);
const INT64_MAX = 2 ** 63 - 1;

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
        {
          max_pattern_size: Type.Optional(Type.Integer()),
          min_pattern_size: Type.Optional(Type.Integer()),
          min_count: Type.Optional(Type.Integer()),
        },
        { additionalProperties: true },
      ),
    ),
  },
  { additionalProperties: true },
);
export type ChatCompletionBody = Static<typeof ChatCompletionBody>;

/** Answers are closed: a field the schema does not name is one the server must not send. */
const Closed = <T extends TProperties>(properties: T) => Type.Object(properties, { additionalProperties: false });

/** One sampled token's logprob entry as OpenAI shapes it (the token as text, or `token_id:<id>` when asked). */
const TopLogprob = Closed({
  token: Type.String(),
  logprob: Type.Number(),
  bytes: Type.Union([Type.Array(Type.Integer()), Type.Null()]),
});
export const ChatLogprob = Closed({ ...TopLogprob.properties, top_logprobs: Type.Array(TopLogprob) });
export type ChatLogprob = Static<typeof ChatLogprob>;

/** A tool call, whole in a message and in the one stream delta that carries it (the parser emits it complete). */
export const ChatToolCall = Closed({
  index: Type.Integer(),
  id: Type.String(),
  type: Type.Literal('function'),
  function: Closed({ name: Type.String(), arguments: Type.String() }),
});
export type ChatToolCall = Static<typeof ChatToolCall>;

const ChoiceLogprobs = Type.Union([Closed({ content: Type.Array(ChatLogprob) }), Type.Null()]);
const FinishReason = Type.Union([
  Type.Literal('stop'),
  Type.Literal('length'),
  Type.Literal('tool_calls'),
  Type.Literal('repetition'),
]);
/** vLLM's `stop_reason`: the stop string or stop token id that ended a choice, null for EOS or length. */
const StopReason = Type.Union([Type.String(), Type.Integer(), Type.Null()]);
const TokenIds = Type.Union([Type.Array(Type.Integer()), Type.Null()]);

export const ChatUsage = Closed({
  prompt_tokens: Type.Integer(),
  total_tokens: Type.Integer(),
  completion_tokens: Type.Integer(),
  prompt_tokens_details: Closed({ cached_tokens: Type.Integer() }),
});
export type ChatUsage = Static<typeof ChatUsage>;

/** ART 0.5.20+'s per-choice policy provenance: which weights produced which span of the choice's tokens. */
const PolicyTokenSpan = Closed({
  start_token: Type.Integer(),
  end_token: Type.Integer(),
  generation_id: Type.String(),
  policy_version: Type.Integer(),
  lora_slot: Type.String(),
  update_seq: Type.Integer(),
});

/** vLLM's prompt logprobs: per prompt position (null for the first), the actual token and the top alternatives by id. */
const PromptLogprobs = Type.Union([
  Type.Array(
    Type.Union([
      Type.Record(
        Type.String(),
        Closed({ logprob: Type.Number(), rank: Type.Integer(), decoded_token: Type.String() }),
      ),
      Type.Null(),
    ]),
  ),
  Type.Null(),
]);

const ChatMessageOut = Closed({
  role: Type.String(),
  content: Type.Union([Type.String(), Type.Null()]),
  refusal: Type.Null(),
  annotations: Type.Null(),
  audio: Type.Null(),
  function_call: Type.Null(),
  tool_calls: Type.Array(ChatToolCall),
  reasoning: Type.Union([Type.String(), Type.Null()]),
});

/** A whole (non-streamed) answer, field for field as vLLM sends it, plus ART's policy spans. */
export const ChatCompletion = Closed({
  id: Type.String(),
  object: Type.Literal('chat.completion'),
  created: Type.Integer(),
  model: Type.String(),
  choices: Type.Array(
    Closed({
      index: Type.Integer(),
      message: ChatMessageOut,
      logprobs: ChoiceLogprobs,
      finish_reason: Type.Union([FinishReason, Type.Null()]),
      stop_reason: StopReason,
      token_ids: TokenIds,
      policy_token_spans: Type.Union([Type.Array(PolicyTokenSpan), Type.Null()]),
    }),
  ),
  usage: ChatUsage,
  service_tier: Type.Null(),
  system_fingerprint: Type.Null(),
  prompt_logprobs: PromptLogprobs,
  prompt_token_ids: TokenIds,
  kv_transfer_params: Type.Null(),
});
export type ChatCompletion = Static<typeof ChatCompletion>;

/** What one streamed chunk adds to a choice: the role first, then text, reasoning or tool calls. */
export const ChatDelta = Closed({
  role: Type.Optional(Type.String()),
  content: Type.Optional(Type.String()),
  reasoning: Type.Optional(Type.String()),
  tool_calls: Type.Optional(Type.Array(ChatToolCall)),
});
export type ChatDelta = Static<typeof ChatDelta>;

/**
 * One SSE chunk of a streamed answer. `stop_reason` comes with a finish, `token_ids` when asked, `usage` on every
 * chunk with continuous usage stats (and alone, with no choices, last), `prompt_token_ids` on the role chunks when asked.
 */
export const ChatCompletionChunk = Closed({
  id: Type.String(),
  object: Type.Literal('chat.completion.chunk'),
  created: Type.Integer(),
  model: Type.String(),
  choices: Type.Array(
    Closed({
      index: Type.Integer(),
      delta: ChatDelta,
      logprobs: ChoiceLogprobs,
      finish_reason: Type.Union([FinishReason, Type.Null()]),
      stop_reason: Type.Optional(StopReason),
      token_ids: Type.Optional(TokenIds),
    }),
  ),
  usage: Type.Optional(ChatUsage),
  prompt_token_ids: Type.Optional(Type.Array(Type.Integer())),
});
export type ChatCompletionChunk = Static<typeof ChatCompletionChunk>;
