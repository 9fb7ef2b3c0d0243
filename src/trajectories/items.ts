/**
 * Reading a trajectory's `messages_and_choices` items: which are OpenAI `Choice`s and which chat messages, a choice
 * as the assistant message it stands for, and the ids (with logprobs) a choice says were sampled. Trajectory
 * uploads check with these, the dashboard shows with them, and training (training/rl/tokens.ts) builds rows on them.
 */
import type { ChatTokenizer } from '../conversation/tokenizer.ts';

const TOKEN_ID = /^token_id:(\d+)$/;

interface LogprobEntry {
  token?: unknown;
  logprob?: unknown;
  bytes?: unknown;
}

export interface SampledTurn {
  ids: number[];
  logprobs: (number | null)[];
  /** Where each id came from in the choice, for error messages. */
  pathOf?(position: number): (string | number)[];
}

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
export function sampledTokens(tokenizer: ChatTokenizer | null, choice: Record<string, unknown>): SampledTurn | null {
  const entries = logprobEntries(choice);
  const logprobs = entries.map((entry) =>
    typeof entry?.logprob === 'number' && Number.isFinite(entry.logprob) ? entry.logprob : null,
  );
  const complete = (ids: (number | undefined)[]): ids is number[] =>
    entries.length > 0 && ids.every((id) => id !== undefined);
  const fromTokens = entries
    .map((entry) => TOKEN_ID.exec(String(entry?.token ?? ''))?.[1])
    .map((id) => (id === undefined ? undefined : Number(id)));
  if (complete(fromTokens))
    return { ids: fromTokens, logprobs, pathOf: (position) => ['logprobs', 'content', position, 'token'] };
  const tokenIds = choice.token_ids;
  if (Array.isArray(tokenIds) && tokenIds.length > 0 && tokenIds.every((id) => Number.isInteger(id))) {
    return {
      ids: tokenIds as number[],
      logprobs: logprobs.length === tokenIds.length ? logprobs : tokenIds.map(() => null),
      pathOf: (position) => ['token_ids', position],
    };
  }
  // Ids from bytes are the vocabulary's own, so they need no path.
  const fromBytes = entries.map((entry) =>
    tokenizer && Array.isArray(entry?.bytes) ? tokenizer.tokenIdOfBytes(entry.bytes as number[]) : undefined,
  );
  if (complete(fromBytes)) return { ids: fromBytes, logprobs };
  return null;
}

/**
 * The sampled token ids of a trajectory's choices that a vocabulary of `vocabSize` does not have, with
 * their path inside `messages_and_choices`: such a trajectory cannot train, so it is refused up front.
 */
export function tokenIdsOutsideVocabulary(
  items: Record<string, unknown>[],
  vocabSize: number,
): { path: (string | number)[]; id: number }[] {
  return items.flatMap((item, index) => {
    const sampled = isChoice(item) ? sampledTokens(null, item) : null;
    if (!sampled?.pathOf) return [];
    return sampled.ids.flatMap((id, position) =>
      id < 0 || id >= vocabSize ? [{ path: [index, ...sampled.pathOf!(position)], id }] : [],
    );
  });
}
