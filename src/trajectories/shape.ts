/**
 * Shape checks the JSON schema cannot express, on groups read with ART's defaults (api/models.ts). A legacy trajectory:
 * every `messages_and_choices` item is either a chat message (a string `role`) or an OpenAI `Choice` (an object
 * `message` with role assistant). A captured one (`exchanges`): it carries no legacy field beside them (ART refuses
 * the mix too), holds at least one exchange, and each exchange is what its kind needs (exchanges.ts). Where
 * the base model's vocabulary is known, every sampled or prompt token id either form carries is inside it; and, for
 * training, every message is one a chat template can be given (text content, JSON arguments).
 */

import type { FullTrajectory, FullTrajectoryGroup } from '../api/models.ts';
import { normaliseMessages } from '../conversation/messages.ts';
import { TemplateError } from '../conversation/template.ts';
import type { FieldProblem } from '../errors.ts';
import {
  type CapturedGeneration,
  generationsFor,
  hasExchanges,
  type ModelIdentity,
  readExchanges,
} from './exchanges.ts';
import { asMessage, isChoice, tokenIdsOutsideVocabulary } from './items.ts';

type Loc = (string | number)[];

function checkItems(
  items: Record<string, unknown>[],
  loc: Loc,
  problems: FieldProblem[],
  vocabSize: number | null,
): void {
  if (vocabSize !== null) {
    for (const { path, id } of tokenIdsOutsideVocabulary(items, vocabSize)) {
      problems.push({
        loc: [...loc, ...path],
        msg: `token id ${id} is outside the base model's vocabulary (${vocabSize} tokens)`,
        type: 'value_error',
      });
    }
  }
  items.forEach((item, index) => {
    if (isChoice(item)) {
      const role = (item.message as Record<string, unknown>).role;
      if (role !== undefined && role !== 'assistant') {
        problems.push({
          loc: [...loc, index, 'message', 'role'],
          msg: "A Choice's message must have role 'assistant'",
          type: 'literal_error',
        });
      }
    } else if (typeof item.role !== 'string') {
      problems.push({
        loc: [...loc, index, 'role'],
        msg: 'Field required: a chat message needs a string role (or pass an OpenAI Choice with a message)',
        type: 'missing',
      });
    }
  });
}

/** ART's rule: a trajectory with exchanges carries nothing of the legacy form. */
function mixesForms(trajectory: FullTrajectory): boolean {
  return (
    hasExchanges(trajectory.exchanges) &&
    ((trajectory.messages_and_choices?.length ?? 0) > 0 ||
      trajectory.tools !== null ||
      trajectory.additional_histories.length > 0)
  );
}

/** The token ids of a captured generation that a vocabulary of `vocabSize` does not have, with their path. */
function generationIdsOutside(generation: CapturedGeneration, vocabSize: number): FieldProblem[] {
  const outside = (id: number) => id < 0 || id >= vocabSize;
  const msg = (id: number) => `token id ${id} is outside the base model's vocabulary (${vocabSize} tokens)`;
  const problems: FieldProblem[] = [];
  const prompt = generation.promptIds?.findIndex(outside) ?? -1;
  if (prompt !== -1)
    problems.push({
      loc: generation.choiceLoc,
      msg: `prompt ${msg(generation.promptIds![prompt])}`,
      type: 'value_error',
    });
  const sampled = generation.sampled(null);
  sampled?.ids.forEach((id, position) => {
    if (outside(id) && sampled.pathOf)
      problems.push({ loc: [...generation.choiceLoc, ...sampled.pathOf(position)], msg: msg(id), type: 'value_error' });
  });
  return problems;
}

/** A captured trajectory's checks: one form only, something captured, each exchange well formed, ids in the vocabulary. */
function checkCaptured(trajectory: FullTrajectory, loc: Loc, problems: FieldProblem[], vocabSize: number | null) {
  if (mixesForms(trajectory)) {
    problems.push({
      loc: [...loc, 'exchanges'],
      msg: 'A trajectory cannot contain both exchanges and legacy histories (messages_and_choices, tools, additional_histories): send one form',
      type: 'value_error',
    });
    return;
  }
  if (!hasExchanges(trajectory.exchanges)) {
    problems.push({
      loc: [...loc, 'exchanges'],
      msg: 'No exchange was captured: every list is empty (a trajectory needs exchanges or messages_and_choices)',
      type: 'too_short',
    });
    return;
  }
  const read = readExchanges(trajectory.exchanges!, [...loc, 'exchanges']);
  for (const problem of read.problems) problems.push(problem);
  if (vocabSize !== null)
    for (const generation of read.generations)
      for (const problem of generationIdsOutside(generation, vocabSize)) problems.push(problem);
}

/** `vocabSize`: the base model's, when known; null skips the token id check. */
export function checkTrajectoryGroups(
  groups: FullTrajectoryGroup[],
  loc: Loc,
  vocabSize: number | null = null,
): FieldProblem[] {
  const problems: FieldProblem[] = [];
  groups.forEach((group, groupIndex) => {
    group.trajectories.forEach((trajectory, trajectoryIndex) => {
      const trajectoryLoc = [...loc, groupIndex, 'trajectories', trajectoryIndex];
      if (!Number.isFinite(trajectory.reward)) {
        problems.push({
          loc: [...trajectoryLoc, 'reward'],
          msg: 'Input should be a finite number',
          type: 'finite_number',
        });
      }
      if (trajectory.exchanges) {
        checkCaptured(trajectory, trajectoryLoc, problems, vocabSize);
        return;
      }
      checkItems(
        trajectory.messages_and_choices ?? [],
        [...trajectoryLoc, 'messages_and_choices'],
        problems,
        vocabSize,
      );
      trajectory.additional_histories.forEach((history, historyIndex) => {
        checkItems(
          history.messages_and_choices,
          [...trajectoryLoc, 'additional_histories', historyIndex, 'messages_and_choices'],
          problems,
          vocabSize,
        );
      });
    });
  });
  return problems;
}

/**
 * Trajectories a training job renders for `model`: a message no template can take is refused now, not when the job
 * runs, and so is a captured trajectory whose exchanges name no model, or several, none of them this one.
 */
export function checkRenderable(groups: FullTrajectoryGroup[], loc: Loc, model: ModelIdentity): FieldProblem[] {
  const problems: FieldProblem[] = [];
  const check = (items: Record<string, unknown>[], itemsLoc: Loc) => {
    try {
      normaliseMessages(items.map(asMessage));
    } catch (error) {
      if (!(error instanceof TemplateError)) throw error;
      problems.push({ loc: itemsLoc, msg: error.message, type: 'value_error' });
    }
  };
  groups.forEach((group, groupIndex) => {
    group.trajectories.forEach((trajectory, trajectoryIndex) => {
      const trajectoryLoc = [...loc, groupIndex, 'trajectories', trajectoryIndex];
      if (trajectory.exchanges) {
        const chosen = generationsFor(
          readExchanges(trajectory.exchanges, [...trajectoryLoc, 'exchanges']).generations,
          model,
          [...trajectoryLoc, 'exchanges'],
        );
        if (chosen.problem) problems.push(chosen.problem);
        for (const generation of chosen.generations)
          if (generation.messages) check([...generation.messages, generation.message!], generation.choiceLoc);
        return;
      }
      check(trajectory.messages_and_choices ?? [], [...trajectoryLoc, 'messages_and_choices']);
      trajectory.additional_histories.forEach((history, historyIndex) => {
        check(history.messages_and_choices, [
          ...trajectoryLoc,
          'additional_histories',
          historyIndex,
          'messages_and_choices',
        ]);
      });
    });
  });
  return problems;
}
