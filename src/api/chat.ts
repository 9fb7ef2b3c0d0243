/**
 * The chat completion interface: the request field by field with its type and range (unknown fields are
 * tolerated, vLLM's `extra="allow"`; the cross-field rules live in serving/chat/request.ts), and the answer, whole
 * (`ChatCompletion`) or streamed (`ChatCompletionChunk`), as serving/chat/response.ts assembles it and the dashboard
 * reads it. The fields chat shares with completions are in generation.ts.
 */
import { type Static, Type } from '@sinclair/typebox';
import { Closed, GENERATION_FIELDS, Nullable, PromptLogprobs, StopReason, TokenIds, Usage } from './generation.ts';

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
    ...GENERATION_FIELDS,
    messages: Type.Array(Message),
    logprobs: Nullable(Type.Boolean()),
    top_logprobs: Nullable(Type.Integer()),
    max_completion_tokens: Nullable(Type.Integer()),
    tools: Nullable(Type.Array(Tool)),
    tool_choice: Nullable(Type.Union([Type.String(), Type.Record(Type.String(), Type.Unknown())])),
    reasoning_effort: Nullable(Type.Union([Type.Literal('low'), Type.Literal('medium'), Type.Literal('high')])),
    include_reasoning: Type.Optional(Type.Boolean()),
    parallel_tool_calls: Nullable(Type.Boolean()),
    add_generation_prompt: Type.Optional(Type.Boolean()),
    continue_final_message: Type.Optional(Type.Boolean()),
    documents: Nullable(Type.Array(Type.Record(Type.String(), Type.String()))),
    chat_template: Nullable(Type.String()),
    chat_template_kwargs: Nullable(Type.Record(Type.String(), Type.Unknown())),
    mm_processor_kwargs: Nullable(Type.Record(Type.String(), Type.Unknown())),
  },
  { additionalProperties: true },
);
export type ChatCompletionBody = Static<typeof ChatCompletionBody>;

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
export const ChatUsage = Usage;
export type ChatUsage = Usage;

/** ART 0.5.20+'s per-choice policy provenance: which weights produced which span of the choice's tokens. */
const PolicyTokenSpan = Closed({
  start_token: Type.Integer(),
  end_token: Type.Integer(),
  generation_id: Type.String(),
  policy_version: Type.Integer(),
  lora_slot: Type.String(),
  update_seq: Type.Integer(),
});

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
