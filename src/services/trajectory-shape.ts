/**
 * Shape checks the JSON schema cannot express: every `messages_and_choices` item is either a chat
 * message (a string `role`) or an OpenAI `Choice` (an object `message` with role assistant), and, where
 * the base model's vocabulary is known, every sampled token id a choice carries is inside it.
 */
import type { FieldProblem } from '../errors.ts';
import type { TrajectoryGroup } from '../api/models.ts';
import { tokenIdsOutsideVocabulary } from '../chat/trajectory-tokens.ts';

type Loc = (string | number)[];

export function isChoice(item: Record<string, unknown>): boolean {
  return typeof item.message === 'object' && item.message !== null;
}

function checkItems(items: Record<string, unknown>[], loc: Loc, problems: FieldProblem[], vocabSize: number | null): void {
  if (vocabSize !== null) {
    for (const { path, id } of tokenIdsOutsideVocabulary(items, vocabSize)) {
      problems.push({ loc: [...loc, ...path], msg: `token id ${id} is outside the base model's vocabulary (${vocabSize} tokens)`, type: 'value_error' });
    }
  }
  items.forEach((item, index) => {
    if (isChoice(item)) {
      const role = (item.message as Record<string, unknown>).role;
      if (role !== undefined && role !== 'assistant') {
        problems.push({ loc: [...loc, index, 'message', 'role'], msg: "A Choice's message must have role 'assistant'", type: 'literal_error' });
      }
    } else if (typeof item.role !== 'string') {
      problems.push({ loc: [...loc, index, 'role'], msg: 'Field required: a chat message needs a string role (or pass an OpenAI Choice with a message)', type: 'missing' });
    }
  });
}

/** `vocabSize`: the base model's, when known; null skips the token id check. */
export function checkTrajectoryGroups(groups: TrajectoryGroup[], loc: Loc, vocabSize: number | null = null): FieldProblem[] {
  const problems: FieldProblem[] = [];
  groups.forEach((group, groupIndex) => {
    group.trajectories.forEach((trajectory, trajectoryIndex) => {
      const trajectoryLoc = [...loc, groupIndex, 'trajectories', trajectoryIndex];
      if (!Number.isFinite(trajectory.reward)) {
        problems.push({ loc: [...trajectoryLoc, 'reward'], msg: 'Input should be a finite number', type: 'finite_number' });
      }
      checkItems(trajectory.messages_and_choices, [...trajectoryLoc, 'messages_and_choices'], problems, vocabSize);
      (trajectory.additional_histories ?? []).forEach((history, historyIndex) => {
        checkItems(history.messages_and_choices, [...trajectoryLoc, 'additional_histories', historyIndex, 'messages_and_choices'], problems, vocabSize);
      });
    });
  });
  return problems;
}
