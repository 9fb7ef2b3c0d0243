/**
 * Our generate request as a vLLM `/v1/completions` request with a token-id prompt, and vLLM's answer (whole or
 * streamed) as our generate events (docs/vllm.md maps every field). Pure functions: no HTTP, no state.
 */
import { EngineError } from '../errors.ts';
import { withGenerateDefaults } from '../ops.ts';
import type { GenerateEvent, GenerateRequest, PromptLogprobsEvent, TokensEvent, TopLogprob } from '../protocol.ts';

/** vLLM clamps logit biases to ±100: a token banned outright. */
const BANNED = -100;

/** One choice of a completion answer or stream chunk, as vLLM sends it (the fields we read). */
export interface VllmChoice {
  index: number;
  token_ids?: number[] | null;
  prompt_token_ids?: number[] | null;
  logprobs?: { token_logprobs?: (number | null)[]; top_logprobs?: (Record<string, number> | null)[] | null } | null;
  finish_reason?: string | null;
  stop_reason?: number | string | null;
  prompt_logprobs?: (Record<string, { logprob: number; rank: number | null }> | null)[] | null;
}

export interface VllmUsage {
  prompt_tokens: number;
  completion_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number | null } | null;
}

/**
 * Single-token bans become biases of −100 (vLLM has no token-id bad words); a ban of a longer sequence has no
 * equivalent there, so it is refused rather than silently ignored.
 */
function banned(badWords: number[][], bias: Record<string, number>): Record<string, number> {
  const merged = { ...bias };
  for (const word of badWords) {
    if (word.length !== 1)
      throw new EngineError(
        'bad_request',
        'bad_words: the vLLM sampler bans single tokens only; this word is several tokens',
      );
    merged[String(word[0])] = BANNED;
  }
  return merged;
}

/** The `/v1/completions` body: every sampling field explicit (vLLM's own defaults never apply), token ids back. */
export function completionBody(request: GenerateRequest, model: string, stream: boolean): Record<string, unknown> {
  const r = withGenerateDefaults(request);
  const optional = (name: string, value: unknown) => (value === null || value === undefined ? {} : { [name]: value });
  return {
    model,
    prompt: r.prompt,
    n: r.n,
    max_tokens: r.max_tokens,
    min_tokens: r.min_tokens,
    ignore_eos: r.ignore_eos,
    stop_token_ids: r.stop_token_ids,
    temperature: r.temperature,
    top_p: r.top_p,
    top_k: r.top_k,
    min_p: r.min_p,
    presence_penalty: r.presence_penalty,
    frequency_penalty: r.frequency_penalty,
    repetition_penalty: r.repetition_penalty,
    logit_bias: banned(r.bad_words_ids, r.logit_bias),
    ...optional('allowed_token_ids', r.allowed_token_ids),
    ...optional('seed', r.seed),
    ...optional('logprobs', r.logprobs),
    ...optional('prompt_logprobs', r.prompt_logprobs),
    ...optional('structured_outputs', r.constraint), // our constraint is vLLM's structured_outputs object
    return_token_ids: true,
    return_tokens_as_token_ids: true,
    stream,
    ...(stream ? { stream_options: { include_usage: true } } : {}),
  };
}

/** `token_id:<id>` (return_tokens_as_token_ids) or a bare id, as a number. */
function tokenIdOf(key: string): number {
  return Number(key.startsWith('token_id:') ? key.slice('token_id:'.length) : key);
}

/** vLLM's per-token top dict (the sampled token and the top k) as our top k, most likely first. */
function topOf(entry: Record<string, number> | null | undefined, sampled: number, k: number): TopLogprob[] {
  if (!entry) return [];
  let top: TopLogprob[] = Object.entries(entry).map(([key, logprob]) => [tokenIdOf(key), logprob]);
  top.sort((a, b) => b[1] - a[1]);
  // k + 1 entries: the sampled token was not among the top k and came first.
  if (top.length > k) top = top.filter(([id]) => id !== sampled);
  return top.slice(0, k);
}

/** The events one choice (or one stream chunk of it) stands for: its new tokens, then its finish if it ended. */
export function choiceEvents(choice: VllmChoice, logprobsK: number | null): GenerateEvent[] {
  const events: GenerateEvent[] = [];
  const tokens = choice.token_ids ?? [];
  if (tokens.length > 0) {
    const event: TokensEvent = { type: 'tokens', seq: choice.index, tokens };
    if (logprobsK !== null) {
      event.logprobs = choice.logprobs?.token_logprobs ?? tokens.map(() => null);
      if (logprobsK > 0)
        event.top_logprobs = tokens.map((id, i) => topOf(choice.logprobs?.top_logprobs?.[i], id, logprobsK));
    }
    events.push(event);
  }
  const reason = choice.finish_reason;
  if (reason === 'stop' || reason === 'length') {
    const stopId = typeof choice.stop_reason === 'number' ? choice.stop_reason : null;
    events.push({
      type: 'finish',
      seq: choice.index,
      finish_reason: reason,
      stop_token_id: reason === 'stop' ? stopId : null,
    });
  } else if (reason) {
    throw new EngineError(
      'internal',
      `vLLM ended sequence ${choice.index} with finish_reason ${JSON.stringify(reason)}`,
    );
  }
  return events;
}

/** vLLM's prompt logprobs (first entry null; each the prompt token and the top k by rank) as our prompt event. */
export function promptEvent(
  entries: NonNullable<VllmChoice['prompt_logprobs']>,
  prompt: number[],
  k: number,
): PromptLogprobsEvent {
  return {
    type: 'prompt',
    prompt_logprobs: entries.map((entry, position) => {
      if (!entry) return null;
      const actual = prompt[position];
      const ranked = Object.entries(entry)
        .map(([key, value]) => ({ id: tokenIdOf(key), ...value }))
        .filter((value) => value.rank !== null && value.rank <= k)
        .sort((a, b) => (a.rank ?? 0) - (b.rank ?? 0));
      return {
        logprob: entry[String(actual)]?.logprob ?? -9999,
        top: ranked.map((value): TopLogprob => [value.id, value.logprob]),
      };
    }),
  };
}

/** The final event: prompt length and the prompt tokens vLLM found cached (0 unless it reports them). */
export function doneEvent(usage: VllmUsage | null | undefined, promptLength: number): GenerateEvent {
  return {
    type: 'done',
    prompt_tokens: usage?.prompt_tokens ?? promptLength,
    cached_tokens: usage?.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

/** vLLM's error body (`{error: {message}}` or FastAPI's `{detail}`) as our error, by HTTP status. */
export function errorOf(status: number, body: unknown, peer: string): EngineError {
  const object = (typeof body === 'object' && body !== null ? body : {}) as {
    error?: { message?: unknown } | string;
    detail?: unknown;
    message?: unknown;
  };
  const raw =
    typeof object.error === 'object'
      ? object.error?.message
      : (object.error ?? object.message ?? object.detail ?? body);
  const message = typeof raw === 'string' ? raw : JSON.stringify(raw);
  if (status === 400 || status === 422) return new EngineError('bad_request', message);
  if (status === 404) return new EngineError('not_found', message);
  if (status === 401 || status === 403)
    return new EngineError('unauthorized', `${peer} refused our VLLM_API_KEY: ${message}`);
  if (status === 503) return new EngineError('engine_unavailable', `${peer} is not available: ${message}`);
  return new EngineError('internal', `${peer} answered ${status}: ${message}`);
}
