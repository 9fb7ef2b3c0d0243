/**
 * Reading ART's captured trajectories (`exchanges`, ART 0.5.20+'s `with art.Trajectory()`): each exchange's request and
 * response → the generations it holds, one per choice: the conversation or prompt it was sampled from, what came back,
 * and the token evidence the response carries (the prompt's ids, the sampled ids, the sampler's logprobs). Shape checks
 * (trajectory-shape.ts), the dashboard (its conversations, below) and training (training/rl/captured.ts) read
 * exchanges through this and nothing else. A malformed exchange is a problem naming its field.
 */
import { parseServedModelName } from '../api/model-name.ts';
import type { CapturedExchange, TrajectoryExchanges } from '../api/models.ts';
import type { ChatTokenizer } from '../conversation/tokenizer.ts';
import type { FieldProblem } from '../errors.ts';
import { type SampledTurn, sampledTokens } from './trajectory-items.ts';

export const EXCHANGE_KINDS = ['chat_completions', 'completions', 'responses', 'messages'] as const;
export type ExchangeKind = (typeof EXCHANGE_KINDS)[number];

type Loc = (string | number)[];
type Json = Record<string, unknown>;

/** One sampled output of a captured exchange, with what it was sampled from. */
export interface CapturedGeneration {
  kind: ExchangeKind;
  /** The exchange inside its trajectory (`exchanges.<kind>.<i>`) and the choice inside its response. */
  loc: Loc;
  choiceLoc: Loc;
  /** The model the exchange names (ART's `model`: the request's, else the response's). */
  model: string | null;
  /** ART orders a trajectory's exchanges by start then end time; the position in the request breaks ties. */
  order: [string, string, number];
  /** The conversation it was sampled in (chat kinds), with its tools and template settings; null for a raw prompt. */
  messages: Json[] | null;
  tools: unknown[] | null;
  templateKwargs: Json | null;
  chatTemplate: string | null;
  /** A completions prompt's text (null for chat kinds and token-id prompts) and whether it was tokenized with specials. */
  promptText: string | null;
  addSpecialTokens: boolean;
  /** The prompt's exact ids: the response's `prompt_token_ids`, or a token-id completions prompt as sent. */
  promptIds: number[] | null;
  /** What came back: the assistant message (chat kinds), or completions text. */
  message: Json | null;
  text: string | null;
  /** The output as the legacy form's item for it (an OpenAI `Choice`), for readers that show conversations. */
  item: Json;
  /** The sampled ids with the sampler's logprobs, when the response identifies them (a tokenizer maps logprob bytes). */
  sampled(tokenizer: ChatTokenizer | null): SampledTurn | null;
  /** Whether the response carries the sampler's logprobs: ART trains only such outputs unless told otherwise. */
  hasLogprobs: boolean;
  finishReason: string | null;
  /** A stop string the request gave may have ended it (so no end-of-sequence token follows the text). */
  stopStrings: boolean;
}

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const isTokenId = (value: unknown): value is number => Number.isInteger(value) && (value as number) >= 0;
const TOKEN_ID = /^token_id:(\d+)$/;

/** Reads one exchange's generations, pushing a problem for each field that is not what its kind needs. */
type ExchangeReader = (exchange: CapturedExchange, loc: Loc, problems: FieldProblem[]) => Omit<Generation, 'order'>[];
type Generation = CapturedGeneration;

function problem(problems: FieldProblem[], loc: Loc, msg: string, type = 'value_error'): void {
  problems.push({ loc, msg, type });
}

/** A list of token ids, or null when absent; anything else is a problem at `loc`. */
function tokenIds(value: unknown, loc: Loc, problems: FieldProblem[]): number[] | null {
  if (value === undefined || value === null) return null;
  if (Array.isArray(value) && value.every(isTokenId)) return value;
  problem(problems, loc, 'Input should be a list of non-negative integer token ids', 'list_type');
  return null;
}

const exchangeModel = (exchange: CapturedExchange): string | null => {
  const requested = exchange.request.model;
  if (typeof requested === 'string') return requested;
  if (typeof exchange.model === 'string') return exchange.model;
  return typeof exchange.response.model === 'string' ? exchange.response.model : null;
};

/** The response's choices (at least one object each), or a problem. */
function choicesOf(exchange: CapturedExchange, loc: Loc, problems: FieldProblem[]): Json[] {
  const choices = exchange.response.choices;
  if (!Array.isArray(choices) || choices.length === 0) {
    problem(problems, [...loc, 'response', 'choices'], 'Input should be a non-empty list of choices', 'list_type');
    return [];
  }
  const bad = choices.findIndex((choice) => !isObject(choice));
  if (bad !== -1) {
    problem(problems, [...loc, 'response', 'choices', bad], 'Input should be a valid dictionary', 'dict_type');
    return [];
  }
  return choices as Json[];
}

const stopStringsOf = (request: Json) =>
  (typeof request.stop === 'string' && request.stop !== '') || (Array.isArray(request.stop) && request.stop.length > 0);

/** A chat completions exchange: `request.messages` → one generation per choice (its `message`). */
function chatGenerations(exchange: CapturedExchange, loc: Loc, problems: FieldProblem[]): Omit<Generation, 'order'>[] {
  const { request, response } = exchange;
  const messages = request.messages;
  if (!Array.isArray(messages) || !messages.every(isObject)) {
    problem(problems, [...loc, 'request', 'messages'], 'Input should be a list of chat messages', 'list_type');
    return [];
  }
  const tools = Array.isArray(request.tools) ? request.tools : null;
  const responsePrompt = tokenIds(response.prompt_token_ids, [...loc, 'response', 'prompt_token_ids'], problems);
  return choicesOf(exchange, loc, problems).flatMap((choice, index) => {
    const choiceLoc = [...loc, 'response', 'choices', index];
    if (!isObject(choice.message)) {
      problem(problems, [...choiceLoc, 'message'], 'Field required: a choice carries the assistant message', 'missing');
      return [];
    }
    const promptIds = tokenIds(choice.prompt_token_ids, [...choiceLoc, 'prompt_token_ids'], problems) ?? responsePrompt;
    tokenIds(choice.token_ids, [...choiceLoc, 'token_ids'], problems);
    return [
      {
        kind: 'chat_completions' as const,
        loc,
        choiceLoc,
        model: exchangeModel(exchange),
        messages: messages as Json[],
        tools,
        templateKwargs: isObject(request.chat_template_kwargs) ? request.chat_template_kwargs : null,
        chatTemplate: typeof request.chat_template === 'string' ? request.chat_template : null,
        promptText: null,
        addSpecialTokens: false,
        promptIds: promptIds && promptIds.length > 0 ? promptIds : null,
        message: { ...choice.message, role: 'assistant' },
        text: null,
        item: choice,
        sampled: (tokenizer: ChatTokenizer | null) => sampledTokens(tokenizer, choice),
        hasLogprobs: choice.logprobs !== null && choice.logprobs !== undefined,
        finishReason: typeof choice.finish_reason === 'string' ? choice.finish_reason : null,
        stopStrings: stopStringsOf(request),
      },
    ];
  });
}

/** A completions `prompt`: one text or token-id prompt, or a batch of them; null (and a problem) for anything else. */
function completionPrompts(prompt: unknown, loc: Loc, problems: FieldProblem[]): (string | number[])[] | null {
  if (typeof prompt === 'string') return [prompt];
  if (Array.isArray(prompt) && prompt.length > 0) {
    if (prompt.every(isTokenId)) return [prompt];
    if (prompt.every((item) => typeof item === 'string' || (Array.isArray(item) && item.every(isTokenId))))
      return prompt as (string | number[])[];
  }
  problem(
    problems,
    [...loc, 'request', 'prompt'],
    'Input should be a text prompt, a list of token ids, or a batch of either',
    'union_error',
  );
  return null;
}

/**
 * The sampled ids of a completions choice and their logprobs: `token_ids` (vLLM's `return_token_ids`), else
 * `logprobs.tokens` written as `token_id:<id>`; an echoed prompt's part of the logprobs is cut off.
 */
function completionSampled(choice: Json, promptIds: number[] | null, echo: boolean): SampledTurn | null {
  const logprobs = isObject(choice.logprobs) ? choice.logprobs : {};
  const values = Array.isArray(logprobs.token_logprobs)
    ? logprobs.token_logprobs.map((value) => (typeof value === 'number' && Number.isFinite(value) ? value : null))
    : [];
  const tokens = Array.isArray(logprobs.tokens) ? logprobs.tokens : [];
  const fromTokens = tokens.map((token) => TOKEN_ID.exec(String(token))?.[1]).map((id) => (id ? Number(id) : null));
  let ids: number[] | null = Array.isArray(choice.token_ids) && choice.token_ids.length > 0 ? choice.token_ids : null;
  let path: Loc = ['token_ids'];
  if (!ids && fromTokens.length > 0 && fromTokens.every((id) => id !== null)) {
    ids = fromTokens as number[];
    path = ['logprobs', 'tokens'];
  }
  if (!ids) return null;
  const echoed = echo && promptIds !== null ? promptIds.length : 0;
  if (path[0] === 'logprobs' && echoed > 0) ids = ids.slice(echoed);
  const own = values.length === ids.length + echoed ? values.slice(echoed) : values;
  return {
    ids,
    logprobs: own.length === ids.length ? own : ids.map(() => null),
    pathOf: (position) => [...path, position + (path[0] === 'logprobs' ? echoed : 0)],
  };
}

/** Which prompt of a batch each choice answers: `n` choices per prompt, in order (vLLM's and OpenAI's layout). */
function promptOfChoice(count: number, choices: number, loc: Loc, problems: FieldProblem[]): number {
  if (choices % count === 0) return choices / count;
  problem(
    problems,
    [...loc, 'response', 'choices'],
    `${choices} choices cannot answer ${count} batched prompts (n choices each)`,
  );
  return 0;
}

/** A completions exchange: `request.prompt` → one generation per choice (its `text`). */
function completionGenerations(
  exchange: CapturedExchange,
  loc: Loc,
  problems: FieldProblem[],
): Omit<Generation, 'order'>[] {
  const { request, response } = exchange;
  if (request.suffix !== undefined && request.suffix !== null) {
    problem(problems, [...loc, 'request', 'suffix'], 'A completions suffix cannot be trained (ART refuses it too)');
    return [];
  }
  const prompts = completionPrompts(request.prompt, loc, problems);
  const choices = choicesOf(exchange, loc, problems);
  if (!prompts || choices.length === 0) return [];
  const perPrompt = promptOfChoice(prompts.length, choices.length, loc, problems);
  if (perPrompt === 0) return [];
  const echo = request.echo === true;
  const responsePrompt = tokenIds(response.prompt_token_ids, [...loc, 'response', 'prompt_token_ids'], problems);
  return choices.flatMap((choice, index) => {
    const choiceLoc = [...loc, 'response', 'choices', index];
    if (typeof choice.text !== 'string') {
      problem(problems, [...choiceLoc, 'text'], 'Input should be a valid string', 'string_type');
      return [];
    }
    const prompt = prompts[Math.floor(index / perPrompt)];
    const sent = typeof prompt === 'string' ? null : prompt;
    const promptIds =
      tokenIds(choice.prompt_token_ids, [...choiceLoc, 'prompt_token_ids'], problems) ??
      (prompts.length === 1 ? responsePrompt : null) ??
      sent;
    tokenIds(choice.token_ids, [...choiceLoc, 'token_ids'], problems);
    let text = choice.text;
    if (echo && typeof prompt === 'string') {
      if (!text.startsWith(prompt))
        problem(problems, [...choiceLoc, 'text'], 'An echoed completion should start with its prompt');
      text = text.slice(prompt.length);
    }
    return [
      {
        kind: 'completions' as const,
        loc,
        choiceLoc,
        model: exchangeModel(exchange),
        messages: null,
        tools: null,
        templateKwargs: null,
        chatTemplate: null,
        promptText: typeof prompt === 'string' ? prompt : null,
        addSpecialTokens: request.add_special_tokens !== false,
        promptIds: promptIds && promptIds.length > 0 ? promptIds : null,
        message: null,
        text: echo && sent ? null : text,
        item: {
          index: choice.index ?? index,
          message: { role: 'assistant', content: text },
          logprobs: choice.logprobs ?? null,
          finish_reason: choice.finish_reason ?? null,
        },
        sampled: () => completionSampled(choice, promptIds, echo),
        hasLogprobs: choice.logprobs !== null && choice.logprobs !== undefined,
        finishReason: typeof choice.finish_reason === 'string' ? choice.finish_reason : null,
        stopStrings: stopStringsOf(request),
      },
    ];
  });
}

/** Kinds this server reads, so far; the others are refused by name. */
const READERS: Partial<Record<ExchangeKind, ExchangeReader>> = {
  chat_completions: chatGenerations,
  completions: completionGenerations,
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
  for (const kind of EXCHANGE_KINDS) {
    const list = exchanges[kind] ?? [];
    const read = READERS[kind];
    if (list.length > 0 && !read) {
      problem(problems, [...loc, kind], `${kind} exchanges cannot be read by this server yet`, 'not_supported');
      continue;
    }
    list.forEach((exchange, index) => {
      const at = [...loc, kind, index];
      const times: [string, string] = [String(exchange.start_time ?? ''), String(exchange.end_time ?? '')];
      for (const generation of read!(exchange, at, problems))
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
