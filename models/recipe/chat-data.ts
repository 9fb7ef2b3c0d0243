/**
 * The synthetic chat conversations the tiny model is pretrained on, and the held-out questions it is
 * evaluated on. Pure data: messages in the OpenAI shape, rendered later by the model's own chat
 * template. Seeded, so the same seed gives the same conversations on every machine.
 *
 * Kinds: arithmetic ("What is 17 + 25?" → "42"), copying and reversing short word lists, greetings and
 * small talk, and tool use (the user asks for the weather or the time in a city; the assistant writes a
 * Hermes `<tool_call>`, reads the `<tool_response>` and answers in a sentence).
 */
import { CITIES, NOUNS } from './corpus.ts';
import { Prng } from './prng.ts';

export type Message = Record<string, unknown>;

export interface Conversation {
  kind: 'arithmetic' | 'copy' | 'reverse' | 'chat' | 'tool';
  messages: Message[];
  tools?: Tool[];
  /** Rendered with `enable_thinking=false`: the last assistant turn opens with an empty think block. */
  thinkingOff?: boolean;
}

export interface EvalItem {
  /** `arithmetic`: held-out problems; `arithmetic_seen`: problems the training set asks too. */
  kind: 'arithmetic' | 'arithmetic_seen' | 'copy' | 'reverse' | 'tool';
  messages: Message[];
  tools?: Tool[];
  /** The assistant text a correct answer has (for `tool`: the JSON of the expected call). */
  expected: string;
}

export interface ArithmeticSpec {
  /** Operands of + and − are drawn from 0..maxOperand; − never goes below zero. */
  maxOperand: number;
  /** Operands of × are drawn from 0..maxFactor. */
  maxFactor: number;
}

export interface Tool {
  type: 'function';
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

const tool = (name: string, description: string, argument: string, argumentDescription: string): Tool => ({
  type: 'function',
  function: {
    name,
    description,
    parameters: {
      type: 'object',
      properties: { [argument]: { type: 'string', description: argumentDescription } },
      required: [argument],
    },
  },
});

export const WEATHER_TOOL = tool('get_weather', 'Get the current weather in a city', 'city', 'The name of the city');
export const TIME_TOOL = tool('get_time', 'Get the local time in a city', 'city', 'The name of the city');

/** Words for copy and reverse: common nouns, most of them one token. */
const WORDS = NOUNS.filter((word) => word.length <= 7);
const CONDITIONS = ['sunny', 'cloudy', 'rainy', 'windy', 'snowy', 'foggy'];
const SYSTEM_PROMPTS = [
  'You are a helpful assistant.',
  'You are a concise assistant.',
  'Answer briefly.',
  'You are a friendly math tutor.',
];

type Op = '+' | '-' | '*';

interface Problem {
  a: number;
  op: Op;
  b: number;
}

const problemKey = (p: Problem) => `${p.a}${p.op}${p.b}`;
const answer = (p: Problem) => String(p.op === '+' ? p.a + p.b : p.op === '-' ? p.a - p.b : p.a * p.b);
/** The canonical question: what the evaluation and the RL tests ask. */
export const arithmeticQuestion = (p: Problem) => `What is ${p.a} ${p.op} ${p.b}?`;

function problem(rng: Prng, spec: ArithmeticSpec): Problem {
  const roll = rng.uniform();
  if (roll < 0.15) return { a: rng.int(0, spec.maxFactor), op: '*', b: rng.int(0, spec.maxFactor) };
  const a = rng.int(0, spec.maxOperand);
  const b = rng.int(0, spec.maxOperand);
  return roll < 0.6 ? { a, op: '+', b } : { a: Math.max(a, b), op: '-', b: Math.min(a, b) };
}

function phrase(rng: Prng, p: Problem): string {
  const roll = rng.uniform();
  if (roll < 0.6) return arithmeticQuestion(p);
  const text = `${p.a} ${p.op} ${p.b}`;
  return rng.pick([`${text} = ?`, `Compute ${text}.`, `What's ${text}?`, `Calculate ${text}`, `${text}`]);
}

const words = (rng: Prng, min: number, max: number) => Array.from({ length: rng.int(min, max) }, () => rng.pick(WORDS));

function copyExchange(rng: Prng): [string, string] {
  const list = words(rng, 1, 5).join(' ');
  return [`${rng.pick(['Repeat', 'Repeat after me', 'Say', 'Copy this'])}: ${list}`, list];
}

function reverseExchange(rng: Prng): [string, string] {
  const list = words(rng, 2, 4);
  return [
    `${rng.pick(['Reverse the words', 'Reverse', 'Say backwards'])}: ${list.join(' ')}`,
    [...list].reverse().join(' '),
  ];
}

const SMALL_TALK: [string[], string[]][] = [
  [
    ['Hi', 'Hello', 'Hello!', 'Hi there', 'Hey', 'Good morning', 'Good evening'],
    [
      'Hello! How can I help you today?',
      'Hi! What can I do for you?',
      'Hello! Ask me a question.',
      'Hi there! How can I help?',
    ],
  ],
  [
    ['Thanks', 'Thank you!', 'Thank you', 'Thanks a lot'],
    ["You're welcome!", 'Glad to help!', 'You are welcome.'],
  ],
  [
    ['Who are you?', 'What are you?', 'What is your name?'],
    [
      'I am a tiny assistant. I can do small sums, repeat words and call tools.',
      'I am a small chat model made for tests.',
    ],
  ],
  [
    ['What can you do?', 'How can you help me?'],
    ['I can add and subtract small numbers, repeat or reverse words, and look up the weather or the time.'],
  ],
  [
    ['Bye', 'Goodbye', 'See you later'],
    ['Goodbye!', 'Bye! Have a nice day.', 'See you!'],
  ],
  [
    ['How are you?', 'How are you today?'],
    ['I am fine, thank you! How can I help?', 'Very well, thanks. What can I do for you?'],
  ],
];

function userTurn(rng: Prng, kind: Conversation['kind'], spec: ArithmeticSpec, heldOut: Set<string>): [string, string] {
  if (kind === 'arithmetic') {
    let p = problem(rng, spec);
    while (heldOut.has(problemKey(p))) p = problem(rng, spec);
    return [phrase(rng, p), answer(p)];
  }
  if (kind === 'copy') return copyExchange(rng);
  if (kind === 'reverse') return reverseExchange(rng);
  const [questions, answers] = rng.pick(SMALL_TALK);
  return [rng.pick(questions), rng.pick(answers)];
}

/** One or two rounds of: user asks, assistant calls a tool, tool answers, assistant says the result. */
function toolConversation(rng: Prng, index: number): Conversation {
  const tools = rng.uniform() < 0.3 ? [WEATHER_TOOL, TIME_TOOL] : [rng.pick([WEATHER_TOOL, TIME_TOOL])];
  const messages: Message[] = [];
  const rounds = rng.uniform() < 0.7 ? 1 : 2;
  for (let round = 0; round < rounds; round++) {
    const chosen = rng.pick(tools);
    const city = rng.pick(CITIES);
    if (chosen === WEATHER_TOOL) {
      messages.push({
        role: 'user',
        content: rng.pick([
          `What is the weather in ${city}?`,
          `How is the weather in ${city}?`,
          `Weather in ${city}?`,
          `Is it sunny in ${city}?`,
        ]),
      });
    } else {
      messages.push({
        role: 'user',
        content: rng.pick([`What time is it in ${city}?`, `Time in ${city}?`, `What is the time in ${city}?`]),
      });
    }
    const id = `call_${index}_${round}`;
    messages.push({
      role: 'assistant',
      content: null,
      tool_calls: [{ id, type: 'function', function: { name: chosen.function.name, arguments: { city } } }],
    });
    if (chosen === WEATHER_TOOL) {
      const temperature = rng.int(-5, 35);
      const condition = rng.pick(CONDITIONS);
      messages.push({
        role: 'tool',
        tool_call_id: id,
        content: `{"temperature": ${temperature}, "condition": "${condition}"}`,
      });
      messages.push({ role: 'assistant', content: `It is ${temperature} degrees and ${condition} in ${city}.` });
    } else {
      const time = `${rng.int(0, 23)}:${String(rng.int(0, 59)).padStart(2, '0')}`;
      messages.push({ role: 'tool', tool_call_id: id, content: `{"time": "${time}"}` });
      messages.push({ role: 'assistant', content: `It is ${time} in ${city}.` });
    }
  }
  // Sometimes a question the tools do not cover: answered directly.
  if (rng.uniform() < 0.2)
    messages.push({ role: 'user', content: 'Thanks' }, { role: 'assistant', content: "You're welcome!" });
  return { kind: 'tool', messages, tools };
}

/** Held-out arithmetic problems: never asked during training, always with the canonical question. */
export function heldOutProblems(seed: number, count: number, spec: ArithmeticSpec): Problem[] {
  const rng = new Prng(seed);
  const seen = new Set<string>();
  const out: Problem[] = [];
  while (out.length < count) {
    const p = problem(rng, spec);
    if (p.op === '*' || seen.has(problemKey(p))) continue; // + and −: what the RL tests ask
    seen.add(problemKey(p));
    out.push(p);
  }
  return out;
}

/**
 * `count` training conversations. Kinds in fixed proportions; a conversation holds one to three
 * exchanges of its kind (more examples per system prompt), with the default or a custom system prompt.
 */
export function trainingConversations(
  seed: number,
  count: number,
  spec: ArithmeticSpec,
  mix: Record<Conversation['kind'], number>,
  heldOut: readonly Problem[],
): Conversation[] {
  const rng = new Prng(seed);
  const held = new Set(heldOut.map(problemKey));
  const kinds = Object.entries(mix) as [Conversation['kind'], number][];
  const total = kinds.reduce((sum, [, share]) => sum + share, 0);
  const out: Conversation[] = [];
  for (let i = 0; i < count; i++) {
    let roll = rng.uniform() * total;
    const kind =
      kinds.find(([, share]) => {
        roll -= share;
        return roll < 0;
      })?.[0] ?? kinds[0][0];
    if (kind === 'tool') {
      out.push(toolConversation(rng, i));
      continue;
    }
    const messages: Message[] = [];
    if (rng.uniform() < 0.2) messages.push({ role: 'system', content: rng.pick(SYSTEM_PROMPTS) });
    // Arithmetic comes in runs of questions: many answers per system prompt, and most of the tokens.
    const exchanges = kind === 'arithmetic' ? rng.int(1, 6) : rng.uniform() < 0.5 ? 1 : rng.int(2, 3);
    for (let e = 0; e < exchanges; e++) {
      const [question, reply] = userTurn(rng, kind, spec, held);
      messages.push({ role: 'user', content: question }, { role: 'assistant', content: reply });
    }
    const thinkingOff = exchanges === 1 && rng.uniform() < 0.1;
    out.push({ kind, messages, ...(thinkingOff ? { thinkingOff } : {}) });
  }
  return out;
}

/** The evaluation set: held-out arithmetic, fresh copy/reverse lists and tool requests. */
export function evaluationItems(seed: number, spec: ArithmeticSpec, arithmetic: number): EvalItem[] {
  const heldOut = heldOutProblems(seed, arithmetic, spec);
  const ask = (kind: EvalItem['kind'], p: Problem): EvalItem => ({
    kind,
    messages: [{ role: 'user', content: arithmeticQuestion(p) }],
    expected: answer(p),
  });
  const items = heldOut.map((p) => ask('arithmetic', p));
  // As many problems the training set does ask (+ and −, in the same range): how well it was learned.
  const held = new Set(heldOut.map(problemKey));
  const rng = new Prng(seed + 1);
  const seen = new Set<string>();
  while (seen.size < arithmetic) {
    const p = problem(rng, spec);
    if (p.op === '*' || held.has(problemKey(p)) || seen.has(problemKey(p))) continue;
    seen.add(problemKey(p));
    items.push(ask('arithmetic_seen', p));
  }
  for (let i = 0; i < 10; i++) {
    const list = words(rng, 2, 4);
    items.push({
      kind: 'copy',
      messages: [{ role: 'user', content: `Repeat: ${list.join(' ')}` }],
      expected: list.join(' '),
    });
  }
  for (let i = 0; i < 10; i++) {
    const list = words(rng, 2, 3);
    items.push({
      kind: 'reverse',
      messages: [{ role: 'user', content: `Reverse the words: ${list.join(' ')}` }],
      expected: [...list].reverse().join(' '),
    });
  }
  for (let i = 0; i < 10; i++) {
    const city = CITIES[i % CITIES.length];
    const weather = i % 2 === 0;
    items.push({
      kind: 'tool',
      messages: [
        { role: 'user', content: weather ? `What is the weather in ${city}?` : `What time is it in ${city}?` },
      ],
      tools: [WEATHER_TOOL, TIME_TOOL],
      expected: JSON.stringify({ name: weather ? 'get_weather' : 'get_time', arguments: { city } }),
    });
  }
  return items;
}
