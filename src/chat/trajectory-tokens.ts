/**
 * A trajectory (chat messages and OpenAI `Choice` items) → one token sequence for training: token ids,
 * a trainable mask and the sampler's logprobs. Trainable turns use the exact sampled ids when the choice
 * carries them (`token_id:<id>` logprob tokens or `token_ids`); context is rendered with the chat template
 * and tokenized piece by piece, so each piece is exactly what the template appended.
 */
import type { ChatTokenizer } from './tokenizer.ts';
import { renderChat } from './template.ts';

export interface TrainingSequence {
  tokens: number[];
  /** 1 where the token is trained on (sampled by the policy), else 0. */
  mask: number[];
  /** The sampler's logprob per token, null where unknown. */
  logprobs: (number | null)[];
}

export interface TrajectoryInput {
  messages_and_choices: Record<string, unknown>[];
  tools?: unknown[] | null;
}

export class TrajectoryTokenizeError extends Error {}

const TOKEN_ID = /^token_id:(\d+)$/;

function isChoice(item: Record<string, unknown>): boolean {
  return typeof item.message === 'object' && item.message !== null;
}

interface Sampled {
  ids: number[];
  logprobs: (number | null)[];
  /** Where each id came from in the choice, for error messages. */
  pathOf(position: number): (string | number)[];
}

/** The exact sampled ids and their logprobs, when the choice lets us recover them. */
function sampledTokens(choice: Record<string, unknown>): Sampled | null {
  const content = (choice.logprobs as { content?: { token?: unknown; logprob?: unknown }[] } | null | undefined)?.content;
  const entries = Array.isArray(content) ? content : [];
  const fromLogprobs = entries.map((entry) => TOKEN_ID.exec(String(entry?.token ?? ''))?.[1]);
  const logprobs = entries.map((entry) => (typeof entry?.logprob === 'number' && Number.isFinite(entry.logprob) ? entry.logprob : null));
  if (entries.length > 0 && fromLogprobs.every((id) => id !== undefined)) {
    return { ids: fromLogprobs.map(Number), logprobs, pathOf: (position) => ['logprobs', 'content', position, 'token'] };
  }
  const tokenIds = choice.token_ids;
  if (Array.isArray(tokenIds) && tokenIds.every((id) => Number.isInteger(id))) {
    return { ids: tokenIds as number[], logprobs: logprobs.length === tokenIds.length ? logprobs : tokenIds.map(() => null), pathOf: (position) => ['token_ids', position] };
  }
  return null;
}

/**
 * The sampled token ids of a trajectory's choices that a vocabulary of `vocabSize` does not have, with
 * their path inside `messages_and_choices`: such a trajectory cannot train, so it is refused up front.
 */
export function tokenIdsOutsideVocabulary(items: Record<string, unknown>[], vocabSize: number): { path: (string | number)[]; id: number }[] {
  return items.flatMap((item, index) => {
    const sampled = isChoice(item) ? sampledTokens(item) : null;
    if (!sampled) return [];
    return sampled.ids.flatMap((id, position) => (id < 0 || id >= vocabSize ? [{ path: [index, ...sampled.pathOf(position)], id }] : []));
  });
}

function hasLogprobs(choice: Record<string, unknown>): boolean {
  return choice.logprobs !== null && choice.logprobs !== undefined;
}

export function tokenizeTrajectory(
  tokenizer: ChatTokenizer,
  template: string,
  trajectory: TrajectoryInput,
  options: { allowTrainingWithoutLogprobs: boolean },
): TrainingSequence | null {
  const items = trajectory.messages_and_choices;
  const [outside] = tokenIdsOutsideVocabulary(items, tokenizer.vocabSize);
  if (outside) {
    throw new TrajectoryTokenizeError(`messages_and_choices.${outside.path.join('.')}: token id ${outside.id} is outside the vocabulary (${tokenizer.vocabSize} tokens)`);
  }
  const trainable = items.map((item) =>
    isChoice(item) ? hasLogprobs(item) || options.allowTrainingWithoutLogprobs : options.allowTrainingWithoutLogprobs && item.role === 'assistant',
  );
  const last = trainable.lastIndexOf(true);
  if (last === -1) return null;
  // Chat messages for the template: a Choice contributes its assistant message.
  const messages = items.slice(0, last + 1).map((item) => (isChoice(item) ? { ...(item.message as Record<string, unknown>), role: 'assistant' } : item));
  const render = (count: number, addGenerationPrompt: boolean) =>
    renderChat({ template, messages: messages.slice(0, count), tools: trajectory.tools, addGenerationPrompt });

  const sequence: TrainingSequence = { tokens: [], mask: [], logprobs: [] };
  const appendContext = (text: string) => {
    for (const id of tokenizer.encode(text)) {
      sequence.tokens.push(id);
      sequence.mask.push(0);
      sequence.logprobs.push(null);
    }
  };
  let rendered = '';
  const advanceTo = (text: string) => {
    if (!text.startsWith(rendered)) {
      throw new TrajectoryTokenizeError('the chat template rewrites earlier turns, so this trajectory cannot be tokenized turn by turn; send later turns as additional_histories');
    }
    appendContext(text.slice(rendered.length));
    rendered = text;
  };

  for (let index = 0; index <= last; index += 1) {
    if (!trainable[index]) {
      advanceTo(render(index + 1, false));
      continue;
    }
    advanceTo(render(index, true));
    const full = render(index + 1, false);
    const turn = full.slice(rendered.length);
    const eos = tokenizer.eosToken;
    const eosAt = eos ? turn.indexOf(eos) : -1;
    // What the policy produced: the turn up to and including its end-of-turn token; the rest is template.
    const producedText = eosAt === -1 ? turn : turn.slice(0, eosAt + eos!.length);
    const sampled = isChoice(items[index]) ? sampledTokens(items[index]) : null;
    const ids = sampled?.ids ?? tokenizer.encode(producedText);
    const logprobs = sampled?.logprobs ?? ids.map(() => null);
    ids.forEach((id, position) => {
      sequence.tokens.push(id);
      sequence.mask.push(1);
      sequence.logprobs.push(logprobs[position] ?? null);
    });
    // A sampled turn that stopped without its end-of-turn token (length, stop string) gets it as context.
    const endsWithEos = eos !== undefined && tokenizer.eosTokenId !== undefined && ids.at(-1) === tokenizer.eosTokenId;
    appendContext(eosAt === -1 || endsWithEos ? turn.slice(producedText.length) : turn.slice(eosAt));
    rendered = full;
  }
  return sequence;
}
