/**
 * Reading ART's captured trajectories (`exchanges`, ART 0.5.20+'s `with art.Trajectory()`): a trajectory's exchanges
 * → its generations in ART's order (read-chat.ts, read-responses.ts and read-messages.ts read each kind), the ones
 * a job trains for a model, and the conversations they make. Shape checks (shape.ts), the dashboard (its
 * conversations, below) and training (training/rl/captured.ts) read exchanges through this and nothing else. A
 * malformed exchange is a problem naming its field.
 */
import { parseServedModelName } from '../api/model-name.ts';
import type { TrajectoryExchanges } from '../api/models.ts';
import type { FieldProblem } from '../errors.ts';
import {
  type CapturedGeneration,
  EXCHANGE_KINDS,
  type ExchangeKind,
  type ExchangeReader,
  isObject,
  type Json,
  type Loc,
  type ReadingContext,
} from './generation.ts';
import { chatGenerations, completionGenerations } from './read-chat.ts';
import { messagesGenerations } from './read-messages.ts';
import { responsesGenerations } from './read-responses.ts';

export { type CapturedGeneration, EXCHANGE_KINDS, type ExchangeKind } from './generation.ts';

/** Each API's reader. */
const READERS: Record<ExchangeKind, ExchangeReader> = {
  chat_completions: chatGenerations,
  completions: completionGenerations,
  responses: responsesGenerations,
  messages: messagesGenerations,
};

/** Whether a trajectory holds any captured exchange (ART's `bool(trajectory.exchanges)`). */
export function hasExchanges(exchanges: TrajectoryExchanges | null | undefined): boolean {
  return EXCHANGE_KINDS.some((kind) => (exchanges?.[kind]?.length ?? 0) > 0);
}

/** Every generation of a trajectory's exchanges in ART's order (start time, end time), and the problems found. */
export function readExchanges(
  exchanges: TrajectoryExchanges,
  loc: Loc,
): { generations: CapturedGeneration[]; problems: FieldProblem[] } {
  const problems: FieldProblem[] = [];
  const generations: CapturedGeneration[] = [];
  const context: ReadingContext = { responses: new Map() };
  for (const kind of EXCHANGE_KINDS) {
    (exchanges[kind] ?? []).forEach((exchange, index) => {
      const at = [...loc, kind, index];
      const times: [string, string] = [String(exchange.start_time ?? ''), String(exchange.end_time ?? '')];
      for (const generation of READERS[kind](exchange, at, problems, context))
        generations.push({ ...generation, order: [...times, generations.length] });
    });
  }
  generations.sort(
    (a, b) => compare(a.order[0], b.order[0]) || compare(a.order[1], b.order[1]) || a.order[2] - b.order[2],
  );
  return { generations, problems };
}

const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** Who a training job is for, as its served name's parts. */
export interface ModelIdentity {
  entity: string;
  project: string;
  name: string;
}

/**
 * The generations a job trains for `model`: those whose exchange names it (any checkpoint, as a served name or ART's
 * W&B artifact URI); when none does but every exchange names one and the same model, all of them (ART's own rule
 * when no model is chosen, e.g. rollouts sampled from the base model). Anything else is ambiguous: a problem at `loc`.
 */
export function generationsFor(
  generations: CapturedGeneration[],
  model: ModelIdentity,
  loc: Loc,
): { generations: CapturedGeneration[]; problem: FieldProblem | null } {
  const names = (generation: CapturedGeneration) => {
    const parsed = generation.model === null ? null : parseServedModelName(generation.model);
    return parsed?.entity === model.entity && parsed.project === model.project && parsed.name === model.name;
  };
  const own = generations.filter(names);
  if (own.length > 0) return { generations: own, problem: null };
  const models = [...new Set(generations.map((generation) => generation.model))];
  if (models.length === 1 && models[0] !== null) return { generations, problem: null };
  const listed = models.map((name) => (name === null ? '(none)' : JSON.stringify(name))).join(', ');
  return {
    generations: [],
    problem: {
      loc,
      msg: `No exchange names the model trained (${model.entity}/${model.project}/${model.name}), and the exchanges name ${models.length === 1 ? 'no model' : `several: ${listed}`}, so which ones to train is ambiguous`,
      type: 'value_error',
    },
  };
}

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((part) => (isObject(part) && typeof part.text === 'string' ? part.text : '')).join('\n');
}

/** What a template renders of a message: equal keys are the same turn, however a client re-serialized it. */
function messageKey(message: Json): string {
  const calls = (Array.isArray(message.tool_calls) ? message.tool_calls : []).map((call) => {
    const fn = isObject(call) && isObject(call.function) ? call.function : {};
    return [fn.name, typeof fn.arguments === 'string' ? fn.arguments : JSON.stringify(fn.arguments ?? null)];
  });
  return JSON.stringify([message.role, textOf(message.content), calls, message.tool_call_id ?? null]);
}

/** A captured trajectory's conversations in the legacy form's shape: what the dashboard shows. */
export interface CapturedConversation {
  kind: ExchangeKind;
  messages_and_choices: Json[];
  tools: unknown[] | null;
}

interface Branch extends CapturedConversation {
  keys: string[];
  /** A completions branch's whole text so far (prompt and outputs), which a later prompt may extend. */
  text: string | null;
  extended: boolean;
}

/** The branch a generation continues: the longest one of its kind whose turns (or text) its prompt starts with. */
function parentBranch(branches: Branch[], generation: CapturedGeneration, keys: string[]): Branch | undefined {
  const fits = (branch: Branch) =>
    branch.kind === generation.kind &&
    (generation.messages
      ? branch.keys.length <= keys.length && branch.keys.every((key, i) => key === keys[i])
      : branch.text !== null && generation.promptText?.startsWith(branch.text) === true);
  return branches
    .filter(fits)
    .sort((a, b) => b.keys.length - a.keys.length || (b.text ?? '').length - (a.text ?? '').length)[0];
}

/**
 * The conversations of a trajectory's exchanges as ART groups them into histories: an exchange whose conversation
 * continues an earlier one (its turns, then the earlier answer, are where it starts) extends it; any other starts a
 * branch. Each is the legacy form's `messages_and_choices` (chat messages, each answer as its `Choice`); a completions
 * prompt is a message of role `prompt`. Malformed exchanges are left out (they were refused when sent).
 */
export function capturedConversations(exchanges: TrajectoryExchanges): CapturedConversation[] {
  const branches: Branch[] = [];
  for (const generation of readExchanges(exchanges, []).generations) {
    const prompt = generation.messages ?? [
      { role: 'prompt', content: generation.promptText ?? `(${generation.promptIds?.length ?? 0} prompt token ids)` },
    ];
    const keys = prompt.map(messageKey);
    const parent = parentBranch(branches, generation, keys);
    if (parent) parent.extended = true;
    const rest =
      parent && !generation.messages
        ? [{ role: 'prompt', content: generation.promptText!.slice(parent.text!.length) }].filter((m) => m.content)
        : prompt.slice(parent?.keys.length ?? 0);
    const answer = generation.message ?? { role: 'assistant', content: generation.text ?? '' };
    branches.push({
      kind: generation.kind,
      messages_and_choices: [...(parent?.messages_and_choices ?? []), ...rest, generation.item],
      tools: generation.tools,
      keys: [...keys, messageKey(answer)],
      text: generation.promptText === null ? null : generation.promptText + (generation.text ?? ''),
      extended: false,
    });
  }
  return branches
    .filter((branch) => !branch.extended)
    .map(({ kind, messages_and_choices, tools }) => ({ kind, messages_and_choices, tools }));
}
