/**
 * A captured trajectory (ART 0.5.20+'s `exchanges`, read by trajectories/exchanges.ts) → token sequences for
 * RL, as ART 0.5.23 tokenizes exchanges (art/trajectories/_history.py, _tokenize.py). Each generation is its prompt's
 * ids followed by its output's ids:
 * - the prompt's ids are the ones the response reports (`prompt_token_ids`, or a token-id completions prompt), else
 *   the base model's own rendering of the request (its messages, tools, chat template and kwargs) exactly as chat
 *   completions render a prompt, or a completions text prompt tokenized as the completions endpoint does;
 * - the output's ids are the sampled ids the response carries (`token_ids`, `token_id:<id>` logprob tokens, logprob
 *   bytes) with the sampler's logprobs, else the rendering of what came back, without sampler logprobs.
 * A generation whose prompt ids start with an earlier sequence continues it (a multi-turn rollout on one conversation
 * is one sequence); any other starts a branch. Across a trajectory's sequences each sampled token trains once, at its
 * first occurrence after the same prefix (ART's `first_occurrence_masks`): two branches from one turn do not train
 * their shared start twice. Only outputs that carry sampler logprobs train, unless the job allows training without.
 */
import type { ChatTokenizer } from '../../conversation/tokenizer.ts';
import type { CapturedGeneration } from '../../trajectories/exchanges.ts';
import type { SampledTurn } from '../../trajectories/items.ts';
import { type RenderTarget, type TrainingSequence, trainingRenderer } from '../render.ts';
import type { RlConfig } from './config.ts';
import { retokenizedTurn, startsWith, TrajectoryTokenizeError } from './tokens.ts';

type Options = Pick<RlConfig, 'allow_training_without_logprobs' | 'chat_template_kwargs'>;

/** A generation's prompt as ids, and (chat kinds) how to render its answer when the response has no sampled ids. */
interface Prompt {
  ids: number[];
  answer: (() => SampledTurn) | null;
}

function chatPrompt(base: RenderTarget, generation: CapturedGeneration, options: Options): Prompt {
  const renderer = trainingRenderer(
    { tokenizer: base.tokenizer, template: generation.chatTemplate ?? base.template },
    generation.tools,
    { ...options.chat_template_kwargs, ...generation.templateKwargs },
  );
  const messages = generation.messages!;
  const text = () => renderer.text(messages, true);
  return {
    ids: generation.promptIds ?? renderer.ids(text()),
    answer: () => retokenizedTurn(renderer, [...messages, generation.message!], messages.length, text()),
  };
}

/** A completions prompt: its exact ids, else its text tokenized as the endpoint does (special tokens unless turned off). */
function completionPrompt(tokenizer: ChatTokenizer, generation: CapturedGeneration): Prompt {
  const ids =
    generation.promptIds ??
    tokenizer.encode(generation.promptText ?? '', { addSpecialTokens: generation.addSpecialTokens });
  const text = generation.text;
  return {
    ids,
    answer:
      text === null
        ? null
        : () => {
            // The text leaves out the end-of-sequence token that ended it; a stop string may have ended it instead.
            const eos =
              generation.finishReason === 'stop' && !generation.stopStrings && tokenizer.eosTokenId !== undefined
                ? [tokenizer.eosTokenId]
                : [];
            const answer = [...tokenizer.encode(text), ...eos];
            return { ids: answer, logprobs: answer.map(() => null) };
          },
  };
}

/** The ids (with logprobs) a generation's output is trained as; null when neither ids nor text came back. */
function outputOf(tokenizer: ChatTokenizer, generation: CapturedGeneration, prompt: Prompt): SampledTurn | null {
  return generation.sampled(tokenizer) ?? prompt.answer?.() ?? null;
}

/** Refuses ids the vocabulary lacks, naming where in the exchange they came from. */
function checkVocabulary(
  tokenizer: ChatTokenizer,
  generation: CapturedGeneration,
  prompt: number[],
  output: SampledTurn,
) {
  const { vocabSize } = tokenizer;
  const outside = (id: number) => id < 0 || id >= vocabSize;
  const where = generation.choiceLoc.join('.');
  const inPrompt = prompt.find(outside);
  if (inPrompt !== undefined)
    throw new TrajectoryTokenizeError(
      `${where}: prompt token id ${inPrompt} is outside the vocabulary (${vocabSize} tokens)`,
    );
  const position = output.ids.findIndex(outside);
  if (position !== -1)
    throw new TrajectoryTokenizeError(
      `${[where, ...(output.pathOf?.(position) ?? [])].join('.')}: token id ${output.ids[position]} is outside the vocabulary (${vocabSize} tokens)`,
    );
}

interface Branch extends TrainingSequence {
  continued: boolean;
}

/** The branch a prompt continues: the longest sequence so far that its ids start with. */
function parentOf(branches: Branch[], prompt: number[]): Branch | undefined {
  let parent: Branch | undefined;
  for (const branch of branches)
    if (branch.tokens.length > (parent?.tokens.length ?? 0) && startsWith(prompt, branch.tokens)) parent = branch;
  return parent;
}

/** Clears the trained flag of every token whose prefix, itself included, a sequence before it already trained. */
function firstOccurrences(sequences: TrainingSequence[]): void {
  interface Node {
    children: Map<number, Node>;
    claimed: boolean;
  }
  const root: Node = { children: new Map(), claimed: false };
  for (const sequence of sequences) {
    let node = root;
    sequence.tokens.forEach((token, t) => {
      let child = node.children.get(token);
      if (!child) {
        child = { children: new Map(), claimed: false };
        node.children.set(token, child);
      }
      node = child;
      if (!sequence.mask[t]) return;
      if (node.claimed) sequence.mask[t] = 0;
      else node.claimed = true;
    });
  }
}

/** Token sequences of a captured trajectory's generations (those its job trains); empty when nothing in them trains. */
export function capturedSequences(
  base: RenderTarget,
  generations: CapturedGeneration[],
  options: Options,
): TrainingSequence[] {
  const { tokenizer } = base;
  const branches: Branch[] = [];
  for (const generation of generations) {
    const prompt = generation.messages
      ? chatPrompt(base, generation, options)
      : completionPrompt(tokenizer, generation);
    const output = outputOf(tokenizer, generation, prompt);
    if (!output) continue;
    checkVocabulary(tokenizer, generation, prompt.ids, output);
    const parent = parentOf(branches, prompt.ids);
    if (parent) parent.continued = true;
    const trained = generation.hasLogprobs || options.allow_training_without_logprobs ? 1 : 0;
    const inherited = parent?.tokens.length ?? 0;
    branches.push({
      tokens: [...prompt.ids, ...output.ids],
      mask: [...(parent?.mask ?? []), ...prompt.ids.slice(inherited).map(() => 0), ...output.ids.map(() => trained)],
      logprobs: [...(parent?.logprobs ?? []), ...prompt.ids.slice(inherited).map(() => null), ...output.logprobs],
      continued: false,
    });
  }
  const sequences = branches
    .filter((branch) => !branch.continued)
    .map(({ tokens, mask, logprobs }) => ({ tokens, mask, logprobs }));
  firstOccurrences(sequences);
  return sequences.filter((sequence) => sequence.mask.some(Boolean));
}
