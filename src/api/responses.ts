/**
 * The OpenAI Responses interface (`POST /v1/responses`, `GET`/`DELETE /v1/responses/{id}`): the request's top-level
 * fields with their types (input items and tools are read and checked by conversation/responses-items.ts, which
 * names the field at fault), and the response object with its output items (reasoning, message, function_call) as
 * serving/responses/response.ts assembles it. Beside OpenAI's fields a response carries `token_generations`, the
 * sampler's evidence ART trains on: the prompt's ids, the sampled ids and their logprobs, and the output items
 * they produced.
 */
import { type Static, Type } from '@sinclair/typebox';
import { ChatLogprob } from './chat.ts';
import { Closed, Nullable } from './generation.ts';

const Json = Type.Record(Type.String(), Type.Unknown());

export const ResponsesBody = Type.Object(
  {
    model: Nullable(Type.String()),
    input: Type.Optional(Type.Union([Type.String(), Type.Array(Json)])),
    instructions: Nullable(Type.String()),
    previous_response_id: Nullable(Type.String()),
    tools: Nullable(Type.Array(Json)),
    tool_choice: Nullable(Type.Union([Type.String(), Json])),
    parallel_tool_calls: Nullable(Type.Boolean()),
    max_output_tokens: Nullable(Type.Integer()),
    temperature: Nullable(Type.Number()),
    top_p: Nullable(Type.Number()),
    top_logprobs: Nullable(Type.Integer()),
    text: Nullable(Type.Object({ format: Nullable(Json) }, { additionalProperties: true })),
    reasoning: Nullable(
      Type.Object(
        { effort: Nullable(Type.String()), summary: Nullable(Type.String()) },
        { additionalProperties: true },
      ),
    ),
    include: Nullable(Type.Array(Type.String())),
    stream: Nullable(Type.Boolean()),
    store: Nullable(Type.Boolean()),
    background: Nullable(Type.Boolean()),
    truncation: Nullable(Type.String()),
    metadata: Nullable(Type.Record(Type.String(), Type.String())),
    user: Nullable(Type.String()),
    /** vLLM's extension: template variables (`enable_thinking`, …). */
    chat_template_kwargs: Nullable(Json),
    /** Ours: whether the response carries `token_generations` (default: the server's LOGPROBS_BY_DEFAULT). */
    return_token_ids: Nullable(Type.Boolean()),
  },
  { additionalProperties: true },
);
export type ResponsesBody = Static<typeof ResponsesBody>;

const OutputText = Closed({
  type: Type.Literal('output_text'),
  text: Type.String(),
  annotations: Type.Array(Json, { maxItems: 0 }),
  logprobs: Type.Optional(Type.Array(ChatLogprob)),
});

const ItemStatus = Type.Union([Type.Literal('in_progress'), Type.Literal('completed'), Type.Literal('incomplete')]);

const MessageItem = Closed({
  type: Type.Literal('message'),
  id: Type.String(),
  status: ItemStatus,
  role: Type.Literal('assistant'),
  content: Type.Array(OutputText),
});
const FunctionCallItem = Closed({
  type: Type.Literal('function_call'),
  id: Type.String(),
  call_id: Type.String(),
  name: Type.String(),
  arguments: Type.String(),
  status: ItemStatus,
});
const ReasoningItem = Closed({
  type: Type.Literal('reasoning'),
  id: Type.String(),
  summary: Type.Array(Closed({ type: Type.Literal('summary_text'), text: Type.String() })),
  content: Type.Array(Closed({ type: Type.Literal('reasoning_text'), text: Type.String() })),
  status: ItemStatus,
});
export const OutputItem = Type.Union([MessageItem, FunctionCallItem, ReasoningItem]);
export type OutputItem = Static<typeof OutputItem>;

/** ART's exact-token evidence of one generation: its prompt, its sampled ids and logprobs, the items it produced. */
const TokenGeneration = Closed({
  prompt_token_ids: Type.Array(Type.Integer()),
  output_indices: Type.Array(Type.Integer()),
  token_ids: Type.Array(Type.Integer()),
  compact_logprobs: Type.Optional(Type.Array(Type.Number())),
});

export const ResponseObject = Closed({
  id: Type.String(),
  object: Type.Literal('response'),
  created_at: Type.Integer(),
  status: Type.Union([Type.Literal('in_progress'), Type.Literal('completed'), Type.Literal('incomplete')]),
  error: Type.Null(),
  incomplete_details: Type.Union([Closed({ reason: Type.String() }), Type.Null()]),
  instructions: Type.Union([Type.String(), Type.Null()]),
  max_output_tokens: Type.Union([Type.Integer(), Type.Null()]),
  model: Type.String(),
  output: Type.Array(OutputItem),
  parallel_tool_calls: Type.Boolean(),
  previous_response_id: Type.Union([Type.String(), Type.Null()]),
  reasoning: Closed({
    effort: Type.Union([Type.String(), Type.Null()]),
    summary: Type.Union([Type.String(), Type.Null()]),
  }),
  store: Type.Boolean(),
  temperature: Type.Union([Type.Number(), Type.Null()]),
  top_p: Type.Union([Type.Number(), Type.Null()]),
  text: Closed({ format: Json }),
  tool_choice: Type.Union([Type.String(), Json]),
  tools: Type.Array(Json),
  truncation: Type.Literal('disabled'),
  usage: Type.Union([
    Closed({
      input_tokens: Type.Integer(),
      input_tokens_details: Closed({ cached_tokens: Type.Integer(), cache_write_tokens: Type.Integer() }),
      output_tokens: Type.Integer(),
      output_tokens_details: Closed({ reasoning_tokens: Type.Integer() }),
      total_tokens: Type.Integer(),
    }),
    Type.Null(),
  ]),
  user: Type.Union([Type.String(), Type.Null()]),
  metadata: Type.Record(Type.String(), Type.String()),
  token_generations: Type.Optional(Type.Array(TokenGeneration)),
});
export type ResponseObject = Static<typeof ResponseObject>;

export const DeletedResponse = Closed({ id: Type.String(), object: Type.Literal('response'), deleted: Type.Boolean() });
