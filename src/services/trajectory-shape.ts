/**
 * Shape checks the JSON schema cannot express, on groups read with ART's defaults (api/models.ts): every
 * `messages_and_choices` item is either a chat message (a string `role`) or an OpenAI `Choice` (an object
 * `message` with role assistant); where the base model's vocabulary is known, that every sampled token id a
 * choice carries is inside it; and, for training, that every message is one a chat template can be given (text
 * content, JSON arguments).
 */

import type { FullTrajectoryGroup } from '../api/models.ts';
import { normaliseMessages } from '../conversation/messages.ts';
import { TemplateError } from '../conversation/template.ts';
import type { FieldProblem } from '../errors.ts';
import { asMessage, isChoice, tokenIdsOutsideVocabulary } from './trajectory-items.ts';

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
      checkItems(trajectory.messages_and_choices, [...trajectoryLoc, 'messages_and_choices'], problems, vocabSize);
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

/** Trajectories a training job renders: a message no template can take is refused now, not when the job runs. */
export function checkRenderable(groups: FullTrajectoryGroup[], loc: Loc): FieldProblem[] {
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
      check(trajectory.messages_and_choices, [...trajectoryLoc, 'messages_and_choices']);
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
