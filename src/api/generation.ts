/**
 * What the OpenAI-style doors (chat completions and completions, api/chat.ts and api/completions.ts) share on the
 * wire: the request fields that decide how tokens are sampled (vLLM's sampling and extra parameters, with their
 * types and ranges; cross-field rules live in serving/request.ts), and the answer parts both return (usage, stop
 * reasons, token ids, prompt logprobs). Unknown request fields are tolerated, vLLM's `extra="allow"`.
 */
import { type Static, type TProperties, Type } from '@sinclair/typebox';

export const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) =>
  Type.Optional(Type.Union([schema, Type.Null()]));
/** int64's range as JSON numbers arrive here: as doubles, so its top is 2 ** 63 (the nearest double to 2 ** 63 - 1). */
const INT64_MIN = -(2 ** 63);
const INT64_MAX = 2 ** 63 - 1;

/** The sampling and extra parameters of vLLM's chat and completion requests alike. */
export const GENERATION_FIELDS = {
  model: Nullable(Type.String()),
  frequency_penalty: Nullable(Type.Number()),
  logit_bias: Nullable(Type.Record(Type.String(), Type.Number())),
  max_tokens: Nullable(Type.Integer()),
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
  add_special_tokens: Type.Optional(Type.Boolean()),
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
};
const GenerationFields = Type.Object(GENERATION_FIELDS, { additionalProperties: true });
/** The shared fields as the checks of serving/request.ts read them from either body. */
export type GenerationFields = Static<typeof GenerationFields>;

/** Answers are closed: a field the schema does not name is one the server must not send. */
export const Closed = <T extends TProperties>(properties: T) =>
  Type.Object(properties, { additionalProperties: false });

/** vLLM's `stop_reason`: the stop string or stop token id that ended a choice, null for EOS or length. */
export const StopReason = Type.Union([Type.String(), Type.Integer(), Type.Null()]);
export const TokenIds = Type.Union([Type.Array(Type.Integer()), Type.Null()]);

export const Usage = Closed({
  prompt_tokens: Type.Integer(),
  total_tokens: Type.Integer(),
  completion_tokens: Type.Integer(),
  prompt_tokens_details: Closed({ cached_tokens: Type.Integer() }),
});
export type Usage = Static<typeof Usage>;

/** vLLM's prompt logprobs: per prompt position (null for the first), the actual token and the top alternatives by id. */
export const PromptLogprobs = Type.Union([
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
