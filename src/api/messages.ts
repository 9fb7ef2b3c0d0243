/**
 * The Anthropic Messages interface (`POST /v1/messages`, `POST /v1/messages/count_tokens`): the request's top-level
 * fields with their types (content blocks, tools and tool choice are read and checked by
 * conversation/anthropic-messages.ts, which names the field at fault), and the answer whole (`AnthropicMessage`)
 * or as the stream's events, as serving/messages/response.ts assembles them. Beside Anthropic's fields an answer
 * carries the sampler's evidence ART trains on: `prompt_token_ids`, `token_ids` and their `logprobs`.
 */
import { type Static, Type } from '@sinclair/typebox';
import { Closed, Nullable } from './generation.ts';

const Block = Type.Record(Type.String(), Type.Unknown());
const Content = Type.Union([Type.String(), Type.Array(Block)]);

/** What a Messages request and a token count share: the conversation, its tools and the template's switches. */
const CONVERSATION_FIELDS = {
  model: Type.String(),
  messages: Type.Array(Type.Object({ role: Type.String(), content: Content }, { additionalProperties: true })),
  system: Type.Optional(Content),
  tools: Type.Optional(Type.Array(Block)),
  tool_choice: Type.Optional(Type.Object({ type: Type.String() }, { additionalProperties: true })),
  thinking: Type.Optional(Type.Object({ type: Type.String() }, { additionalProperties: true })),
  /** vLLM's extension: template variables (`enable_thinking`, …). */
  chat_template_kwargs: Nullable(Type.Record(Type.String(), Type.Unknown())),
};

export const MessagesBody = Type.Object(
  {
    ...CONVERSATION_FIELDS,
    max_tokens: Type.Integer(),
    stop_sequences: Type.Optional(Type.Array(Type.String())),
    stream: Type.Optional(Type.Boolean()),
    temperature: Type.Optional(Type.Number()),
    top_p: Type.Optional(Type.Number()),
    top_k: Type.Optional(Type.Integer()),
    metadata: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    output_config: Type.Optional(
      Type.Object(
        {
          format: Nullable(Type.Object({ type: Type.String(), schema: Type.Optional(Block) })),
          effort: Nullable(Type.String()),
        },
        { additionalProperties: true },
      ),
    ),
    /** Ours: whether the answer carries the sampler's token ids and logprobs (default: the server's LOGPROBS_BY_DEFAULT). */
    return_token_ids: Nullable(Type.Boolean()),
  },
  { additionalProperties: true },
);
export type MessagesBody = Static<typeof MessagesBody>;

export const CountTokensBody = Type.Object(CONVERSATION_FIELDS, { additionalProperties: true });
export type CountTokensBody = Static<typeof CountTokensBody>;

export const CountTokens = Closed({ input_tokens: Type.Integer() });

const TextBlock = Closed({ type: Type.Literal('text'), text: Type.String() });
const ThinkingBlock = Closed({
  type: Type.Literal('thinking'),
  thinking: Type.String(),
  signature: Type.String(),
});
const ToolUseBlock = Closed({
  type: Type.Literal('tool_use'),
  id: Type.String(),
  name: Type.String(),
  input: Type.Record(Type.String(), Type.Unknown()),
});
export const ContentBlock = Type.Union([TextBlock, ThinkingBlock, ToolUseBlock]);
export type ContentBlock = Static<typeof ContentBlock>;

export const StopReason = Type.Union([
  Type.Literal('end_turn'),
  Type.Literal('max_tokens'),
  Type.Literal('stop_sequence'),
  Type.Literal('tool_use'),
  Type.Null(),
]);
export type StopReason = Static<typeof StopReason>;

const MessagesUsage = Closed({
  input_tokens: Type.Integer(),
  output_tokens: Type.Integer(),
  cache_creation_input_tokens: Type.Integer(),
  cache_read_input_tokens: Type.Integer(),
});

/** The sampler's evidence: the prompt's ids, the sampled ids and each sampled id's logprob. */
const EVIDENCE = {
  prompt_token_ids: Type.Optional(Type.Array(Type.Integer())),
  token_ids: Type.Optional(Type.Array(Type.Integer())),
  logprobs: Type.Optional(Type.Array(Type.Number())),
};

export const AnthropicMessage = Closed({
  id: Type.String(),
  type: Type.Literal('message'),
  role: Type.Literal('assistant'),
  model: Type.String(),
  content: Type.Array(ContentBlock),
  stop_reason: StopReason,
  stop_sequence: Type.Union([Type.String(), Type.Null()]),
  usage: MessagesUsage,
  ...EVIDENCE,
});
export type AnthropicMessage = Static<typeof AnthropicMessage>;

/** The stream's events, in Anthropic's order: message_start, per block start/deltas/stop, message_delta, message_stop. */
export const MessageStreamEvent = Type.Union([
  /** The message before any content: no blocks, no stop reason yet, the prompt's ids when asked. */
  Closed({ type: Type.Literal('message_start'), message: AnthropicMessage }),
  Closed({ type: Type.Literal('content_block_start'), index: Type.Integer(), content_block: ContentBlock }),
  Closed({
    type: Type.Literal('content_block_delta'),
    index: Type.Integer(),
    delta: Type.Union([
      Closed({ type: Type.Literal('text_delta'), text: Type.String() }),
      Closed({ type: Type.Literal('thinking_delta'), thinking: Type.String() }),
      Closed({ type: Type.Literal('signature_delta'), signature: Type.String() }),
      Closed({ type: Type.Literal('input_json_delta'), partial_json: Type.String() }),
    ]),
  }),
  Closed({ type: Type.Literal('content_block_stop'), index: Type.Integer() }),
  Closed({
    type: Type.Literal('message_delta'),
    delta: Closed({ stop_reason: StopReason, stop_sequence: Type.Union([Type.String(), Type.Null()]) }),
    usage: Closed({ input_tokens: Type.Integer(), output_tokens: Type.Integer() }),
    token_ids: EVIDENCE.token_ids,
    logprobs: EVIDENCE.logprobs,
  }),
  Closed({ type: Type.Literal('message_stop') }),
]);
export type MessageStreamEvent = Static<typeof MessageStreamEvent>;
