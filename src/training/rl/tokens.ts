/**
 * A trajectory (chat messages and OpenAI `Choice` items) → token sequences for RL, per training-rows.md §3:
 * every trainable choice is trained in exactly the context it was sampled in (the rendering of everything
 * before it with a generation prompt), followed by its sampled ids. Consecutive choices whose contexts
 * extend one another share a sequence; where the template rewrites earlier turns (Qwen3 drops earlier
 * `<think>` blocks) the later choice starts a sequence of its own.
 */
import {
  asMessage,
  isChoice,
  type SampledTurn,
  sampledTokens,
  tokenIdsOutsideVocabulary,
} from '../../trajectories/items.ts';
import type { TrainingRenderer, TrainingSequence } from '../render.ts';
import type { RlConfig } from './config.ts';

export interface TrajectoryInput {
  messages_and_choices: Record<string, unknown>[];
}

/** A trajectory no row can be made of (a sampled id the vocabulary lacks); the message says where. */
export class TrajectoryTokenizeError extends Error {}

/** What the policy produced for a turn it was not sampled with: the template's rendering of it, up to its end-of-turn token. */
export function retokenizedTurn(
  renderer: TrainingRenderer,
  messages: Record<string, unknown>[],
  index: number,
  context: string,
): SampledTurn {
  const { tokenizer } = renderer;
  const full = renderer.text(messages.slice(0, index + 1), false);
  const content = messages[index].content;
  const eos = tokenizer.eosToken ?? '';
  let turn = full.startsWith(context)
    ? full.slice(context.length)
    : `${typeof content === 'string' ? content : ''}${eos}`;
  const eosAt = eos ? turn.indexOf(eos) : -1;
  if (eosAt !== -1) turn = turn.slice(0, eosAt + eos.length);
  const ids = tokenizer.encode(turn);
  return { ids, logprobs: ids.map(() => null) };
}

export function startsWith(ids: readonly number[], prefix: readonly number[]): boolean {
  return prefix.length <= ids.length && prefix.every((id, t) => ids[t] === id);
}

function append(
  sequence: TrainingSequence,
  ids: readonly number[],
  trained: 0 | 1,
  logprobs?: readonly (number | null)[],
): void {
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
export function tokenizeTrajectory(
  renderer: TrainingRenderer,
  trajectory: TrajectoryInput,
  options: Pick<RlConfig, 'allow_training_without_logprobs'>,
): TrainingSequence[] {
  const items = trajectory.messages_and_choices;
  const vocabSize = renderer.tokenizer.vocabSize;
  const [outside] = tokenIdsOutsideVocabulary(items, vocabSize);
  if (outside)
    throw new TrajectoryTokenizeError(
      `messages_and_choices.${outside.path.join('.')}: token id ${outside.id} is outside the vocabulary (${vocabSize} tokens)`,
    );
  const messages = items.map(asMessage);
  const sequences: TrainingSequence[] = [];
  let current: TrainingSequence | null = null;
  items.forEach((item, index) => {
    if (!isTrainable(item, options.allow_training_without_logprobs)) return;
    const contextText = renderer.text(messages.slice(0, index), true);
    const context = renderer.ids(contextText);
    if (current === null || !startsWith(context, current.tokens)) {
      current = { tokens: [], mask: [], logprobs: [] };
      sequences.push(current);
    }
    append(current, context.slice(current.tokens.length), 0);
    const sampled =
      (isChoice(item) ? sampledTokens(renderer.tokenizer, item) : null) ??
      retokenizedTurn(renderer, messages, index, contextText);
    append(current, sampled.ids, 1, sampled.logprobs);
  });
  return sequences;
}
