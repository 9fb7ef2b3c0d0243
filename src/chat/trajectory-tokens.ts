/**
 * A trajectory (chat messages and OpenAI `Choice` items) → token sequences for RL, per training-rows.md §3:
 * every trainable choice is trained in exactly the context it was sampled in (the rendering of everything
 * before it with a generation prompt), followed by its sampled ids. Consecutive choices whose contexts
 * extend one another share a sequence; where the template rewrites earlier turns (Qwen3 drops earlier
 * `<think>` blocks) the later choice starts a sequence of its own.
 */
import type { ChatTokenizer } from './tokenizer.ts';
import type { TrainingRenderer } from './training-render.ts';

export interface TrainingSequence {
  tokens: number[];
  /** 1 where the token is trained on (sampled by the policy), else 0. */
  mask: number[];
  /** The sampler's logprob per token, null where unknown. */
  logprobs: (number | null)[];
}

export interface TrajectoryInput {
  messages_and_choices: Record<string, unknown>[];
}

const TOKEN_ID = /^token_id:(\d+)$/;

interface LogprobEntry {
  token?: unknown;
  logprob?: unknown;
  bytes?: unknown;
}

interface SampledTurn {
  ids: number[];
  logprobs: (number | null)[];
  /** Where each id came from in the choice, for error messages. */
  pathOf?(position: number): (string | number)[];
}

/** A trajectory no row can be made of (a sampled id the vocabulary lacks); the message says where. */
export class TrajectoryTokenizeError extends Error {}

export function isChoice(item: Record<string, unknown>): boolean {
  return typeof item.message === 'object' && item.message !== null;
}

/** A choice as the assistant message a client sends back in its next request. */
export function asMessage(item: Record<string, unknown>): Record<string, unknown> {
  return isChoice(item) ? { ...(item.message as Record<string, unknown>), role: 'assistant' } : item;
}

function logprobEntries(choice: Record<string, unknown>): LogprobEntry[] {
  const content = (choice.logprobs as { content?: unknown } | null | undefined)?.content;
  return Array.isArray(content) ? (content as LogprobEntry[]) : [];
}

/**
 * The exact sampled ids with their logprobs, in order of preference: `token_id:<id>` tokens, the choice's
 * `token_ids`, the entries' `bytes` mapped through the vocabulary (an OpenAI SDK `logprobs: true` answer).
 */
function sampledTokens(tokenizer: ChatTokenizer | null, choice: Record<string, unknown>): SampledTurn | null {
  const entries = logprobEntries(choice);
  const logprobs = entries.map((entry) => (typeof entry?.logprob === 'number' && Number.isFinite(entry.logprob) ? entry.logprob : null));
  const complete = (ids: (number | undefined)[]): ids is number[] => entries.length > 0 && ids.every((id) => id !== undefined);
  const fromTokens = entries.map((entry) => TOKEN_ID.exec(String(entry?.token ?? ''))?.[1]).map((id) => (id === undefined ? undefined : Number(id)));
  if (complete(fromTokens)) return { ids: fromTokens, logprobs, pathOf: (position) => ['logprobs', 'content', position, 'token'] };
  const tokenIds = choice.token_ids;
  if (Array.isArray(tokenIds) && tokenIds.length > 0 && tokenIds.every((id) => Number.isInteger(id))) {
    return { ids: tokenIds as number[], logprobs: logprobs.length === tokenIds.length ? logprobs : tokenIds.map(() => null), pathOf: (position) => ['token_ids', position] };
  }
  // Ids from bytes are the vocabulary's own, so they need no path.
  const fromBytes = entries.map((entry) => (tokenizer && Array.isArray(entry?.bytes) ? tokenizer.tokenIdOfBytes(entry.bytes as number[]) : undefined));
  if (complete(fromBytes)) return { ids: fromBytes, logprobs };
  return null;
}

/**
 * The sampled token ids of a trajectory's choices that a vocabulary of `vocabSize` does not have, with
 * their path inside `messages_and_choices`: such a trajectory cannot train, so it is refused up front.
 */
export function tokenIdsOutsideVocabulary(items: Record<string, unknown>[], vocabSize: number): { path: (string | number)[]; id: number }[] {
  return items.flatMap((item, index) => {
    const sampled = isChoice(item) ? sampledTokens(null, item) : null;
    if (!sampled?.pathOf) return [];
    return sampled.ids.flatMap((id, position) => (id < 0 || id >= vocabSize ? [{ path: [index, ...sampled.pathOf!(position)], id }] : []));
  });
}

/** What the policy produced for a turn it was not sampled with: the template's rendering of it, up to its end-of-turn token. */
function retokenizedTurn(renderer: TrainingRenderer, messages: Record<string, unknown>[], index: number, context: string): SampledTurn {
  const { tokenizer } = renderer;
  const full = renderer.text(messages.slice(0, index + 1), false);
  const content = messages[index].content;
  const eos = tokenizer.eosToken ?? '';
  let turn = full.startsWith(context) ? full.slice(context.length) : `${typeof content === 'string' ? content : ''}${eos}`;
  const eosAt = eos ? turn.indexOf(eos) : -1;
  if (eosAt !== -1) turn = turn.slice(0, eosAt + eos.length);
  const ids = tokenizer.encode(turn);
  return { ids, logprobs: ids.map(() => null) };
}

function startsWith(ids: readonly number[], prefix: readonly number[]): boolean {
  return prefix.length <= ids.length && prefix.every((id, t) => ids[t] === id);
}

function append(sequence: TrainingSequence, ids: readonly number[], trained: 0 | 1, logprobs?: readonly (number | null)[]): void {
  ids.forEach((id, t) => {
    sequence.tokens.push(id);
    sequence.mask.push(trained);
    sequence.logprobs.push(logprobs?.[t] ?? null);
  });
}

/**
 * Only sampled choices train, as in ART 0.5.23's trainer: those with logprobs, or every one when the job allows
 * training without them. Plain assistant messages are always context (ART 0.5.18 trained them too when allowed).
 */
function isTrainable(item: Record<string, unknown>, allowTrainingWithoutLogprobs: boolean): boolean {
  return isChoice(item) && (allowTrainingWithoutLogprobs || (item.logprobs !== null && item.logprobs !== undefined));
}

/** Token sequences of one conversation; empty when nothing in it is trainable. */
export function tokenizeTrajectory(renderer: TrainingRenderer, trajectory: TrajectoryInput, options: { allowTrainingWithoutLogprobs: boolean }): TrainingSequence[] {
  const items = trajectory.messages_and_choices;
  const vocabSize = renderer.tokenizer.vocabSize;
  const [outside] = tokenIdsOutsideVocabulary(items, vocabSize);
  if (outside) throw new TrajectoryTokenizeError(`messages_and_choices.${outside.path.join('.')}: token id ${outside.id} is outside the vocabulary (${vocabSize} tokens)`);
  const messages = items.map(asMessage);
  const sequences: TrainingSequence[] = [];
  let current: TrainingSequence | null = null;
  items.forEach((item, index) => {
    if (!isTrainable(item, options.allowTrainingWithoutLogprobs)) return;
    const contextText = renderer.text(messages.slice(0, index), true);
    const context = renderer.ids(contextText);
    if (current === null || !startsWith(context, current.tokens)) {
      current = { tokens: [], mask: [], logprobs: [] };
      sequences.push(current);
    }
    append(current, context.slice(current.tokens.length), 0);
    const sampled = (isChoice(item) ? sampledTokens(renderer.tokenizer, item) : null) ?? retokenizedTurn(renderer, messages, index, contextText);
    append(current, sampled.ids, 1, sampled.logprobs);
  });
  return sequences;
}
