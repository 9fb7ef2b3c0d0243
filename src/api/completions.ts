/**
 * The completions interface (`POST /v1/completions`, vLLM's): the request (a text or token-id prompt, or a list of
 * either, with the shared sampling fields of api/generation.ts and completions-style integer `logprobs`; the
 * cross-field rules live in serving/completions/request.ts), and the answer whole (`Completion`) or streamed
 * (`CompletionChunk`), as serving/completions/response.ts assembles it.
 */
import { type Static, Type } from '@sinclair/typebox';
import { Closed, GENERATION_FIELDS, Nullable, PromptLogprobs, StopReason, TokenIds, Usage } from './generation.ts';

const TokenPrompt = Type.Array(Type.Integer({ minimum: 0 }));

export const CompletionBody = Type.Object(
  {
    prompt: Type.Union([Type.String(), Type.Array(Type.String()), TokenPrompt, Type.Array(TokenPrompt)]),
    ...GENERATION_FIELDS,
    logprobs: Nullable(Type.Integer()),
    suffix: Nullable(Type.String()),
  },
  { additionalProperties: true },
);
export type CompletionBody = Static<typeof CompletionBody>;

/** Completions-style logprobs: per token its text (or `token_id:<id>`), logprob, top alternatives and text offset. */
export const CompletionLogprobs = Closed({
  text_offset: Type.Array(Type.Integer()),
  token_logprobs: Type.Array(Type.Union([Type.Number(), Type.Null()])),
  tokens: Type.Array(Type.String()),
  top_logprobs: Type.Array(Type.Union([Type.Record(Type.String(), Type.Number()), Type.Null()])),
});
export type CompletionLogprobs = Static<typeof CompletionLogprobs>;

const FinishReason = Type.Union([
  Type.Literal('stop'),
  Type.Literal('length'),
  Type.Literal('repetition'),
  Type.Null(),
]);

/** What heads every answer and chunk. */
const HEAD = {
  id: Type.String(),
  object: Type.Literal('text_completion'),
  created: Type.Integer(),
  model: Type.String(),
};
/** What every choice says, whole or in a chunk. */
const CHOICE = {
  index: Type.Integer(),
  text: Type.String(),
  logprobs: Type.Union([CompletionLogprobs, Type.Null()]),
  finish_reason: FinishReason,
};

/** A whole answer, field for field as vLLM sends it: one choice per prompt and `n`, numbered prompt by prompt. */
export const Completion = Closed({
  ...HEAD,
  choices: Type.Array(
    Closed({
      ...CHOICE,
      stop_reason: StopReason,
      prompt_logprobs: PromptLogprobs,
      prompt_token_ids: TokenIds,
      token_ids: TokenIds,
    }),
  ),
  usage: Usage,
  service_tier: Type.Null(),
  system_fingerprint: Type.Null(),
  kv_transfer_params: Type.Null(),
});
export type Completion = Static<typeof Completion>;

/**
 * One SSE chunk: a choice's new text (its first chunk with the echoed prompt and, when asked, the prompt's ids),
 * `token_ids` when asked, `usage` on every chunk with continuous usage stats and alone (no choices) last when asked.
 */
export const CompletionChunk = Closed({
  ...HEAD,
  choices: Type.Array(
    Closed({
      ...CHOICE,
      stop_reason: Type.Optional(StopReason),
      prompt_token_ids: Type.Optional(TokenIds),
      token_ids: Type.Optional(TokenIds),
    }),
  ),
  usage: Type.Optional(Usage),
});
export type CompletionChunk = Static<typeof CompletionChunk>;
