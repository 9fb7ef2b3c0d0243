/**
 * The text the BPE merges are learned from: hand-written English, JSON and code, plus seeded
 * synthetic documents in the shapes the tiny model will see (chat answers, arithmetic, tool
 * definitions and calls). It never contains the added tokens; those are matched before BPE.
 */
import { Prng } from './prng.ts';

const PROSE = `
You are a helpful assistant. Answer the question as well as you can, and say so when you do not know.
The user asked a question about the weather in the city. The assistant looked up the forecast and answered that it would be sunny in the morning and rainy in the afternoon.
A good answer is short, clear and correct. When a task needs a tool, call the tool with the right arguments, read the result, and then answer the user in plain language.
Think step by step. First read the problem, then write down what you know, then work out the answer, and finally check it again.
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.
Once upon a time there was a small robot who wanted to learn how to write. Every day it read a new book, and every night it wrote a short story about what it had learned.
Water boils at one hundred degrees at sea level. The sun rises in the east and sets in the west. There are seven days in a week and twelve months in a year.
The model reads a list of messages and writes the next message. Each message has a role and some content. The roles are system, user, assistant and tool.
To train a model, we collect examples, compute the loss, and update the weights with a small learning rate. Reinforcement learning uses a reward to say which answers were better.
Please summarize the following text in one sentence. Translate this sentence into French. Write a function that returns the sum of two numbers.
Here is the result of the search. I found three matching files. The request failed because the server was not available. Let me try again.
Thank you for your help! You are welcome. Is there anything else I can do for you today?
The time is now three o'clock. The meeting starts at nine in the morning and ends at noon. Please send the report before Friday.
I don't know the answer, but I can look it up. It's a good question. They're going to the store, and we'll meet them there. You've done well.
Numbers can be added, subtracted, multiplied and divided. The sum of two and three is five. The product of four and six is twenty-four.
`;

const CODE = `
function add(a: number, b: number): number {
  return a + b;
}

export async function fetchUser(id: string): Promise<User | undefined> {
  const response = await fetch(\`/api/users/\${id}\`);
  if (!response.ok) {
    throw new Error(\`request failed with status \${response.status}\`);
  }
  return (await response.json()) as User;
}

const items = [1, 2, 3].map((x) => x * 2).filter((x) => x > 2);
for (let i = 0; i < items.length; i++) {
  console.log(items[i]);
}

interface Message {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null;
}

def add(a, b):
    """Return the sum of a and b."""
    return a + b


class Counter:
    def __init__(self, start=0):
        self.value = start

    def increment(self, step=1):
        self.value += step
        return self.value


if __name__ == "__main__":
    import json
    import sys

    data = json.loads(sys.stdin.read())
    for key, value in data.items():
        print(f"{key}: {value}")

import torch
import numpy as np

x = torch.zeros(4, 8, dtype=torch.float32)
y = np.array([1.0, 2.0, 3.0])
with open("model.safetensors", "rb") as f:
    header = f.read(8)

$ npm install
$ python3 -m engine --tcp 127.0.0.1:8765
$ git commit -m "fix the test"

SELECT id, name, created_at FROM models WHERE project = ? ORDER BY created_at DESC LIMIT 10;
`;

const JSON_DOCS = `
{"id": "chatcmpl-123", "object": "chat.completion", "created": 1700000000, "model": "tiny-chat", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello! How can I help you today?"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}}
{"role": "user", "content": "What is the capital of France?"}
{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{\\"query\\": \\"capital of France\\"}"}}]}
{"role": "tool", "tool_call_id": "call_1", "content": "Paris is the capital of France."}
{"error": {"message": "The model does not exist", "type": "invalid_request_error", "param": "model", "code": null}}
{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["name"]}
{"learning_rate": 0.0001, "batch_size": 8, "epochs": 3, "lora": {"rank": 8, "alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}}
[true, false, null, 0, 1.5, -2, "text", {}, []]
`;

/** The fixed sentences of the chat template, so the rendered tool preamble is cheap in tokens. */
const TEMPLATE_TEXT = `
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within XML tags:
For each function call, return a json object with function name and arguments within XML tags:
{"name": <function-name>, "arguments": <args-json-object>}
`;

export const NOUNS = (
  'time person year way day thing man woman child world life hand part eye place week case point number group ' +
  'problem fact question answer idea story book word name line page letter list table file folder model token ' +
  'message request response server client engine user system tool function value result error test step loss ' +
  'weight city country river mountain sea sky tree flower garden house room door window car road train plane ' +
  'school teacher student friend family team company market price money bank office computer phone screen ' +
  'water food bread apple coffee tea music song game movie picture color morning night evening summer winter ' +
  'language code data image sound voice rule plan task goal reason method example lesson chapter history science ' +
  'animal bird dog cat horse fish island forest field farm village street bridge station airport hotel kitchen ' +
  'table chair bed box bottle glass cup plate knife key bag shirt shoe hat coat ticket card map clock watch ' +
  'doctor nurse driver writer player artist worker manager engineer scientist author reader viewer member ' +
  'health energy power light heat fire earth air wind rain snow storm cloud star moon planet space ocean ' +
  'number sum difference product total average percent fraction digit equation formula variable constant ' +
  'array object string integer boolean null field property schema parameter argument query database index ' +
  'service process thread queue job event log metric batch epoch gradient adapter checkpoint dataset reward ' +
  'policy sample prompt completion template role content choice reason stream socket frame header buffer ' +
  'story article report note summary title subject body address email calendar meeting schedule project ' +
  'government business industry economy society culture education research program community nation ' +
  'memory disk network version update package library framework module interface class method instance'
).split(' ');

const VERBS = (
  'is was has had does did says said makes made goes went knows knew takes took sees saw comes came thinks ' +
  'looks wants gives uses finds tells asks works seems feels tries leaves calls needs keeps starts shows hears ' +
  'plays runs moves lives believes brings writes reads learns changes opens closes builds sends returns ' +
  'computes counts adds checks answers explains helps loads saves trains generates sorts prints follows ' +
  'become provide include continue set learn change lead understand watch follow stop create speak allow ' +
  'spend grow offer remember love consider appear buy wait serve die send expect build stay fall cut reach ' +
  'kill remain suggest raise pass sell require report decide pull describe parse validate compare measure ' +
  'receives contains remembers improves reduces increases prepares carries drives cooks paints listens walks ' +
  'travels visits teaches solves creates deletes updates returned handled stored fetched rendered updated'
).split(' ');

const ADJECTIVES = (
  'good new first last long great little own other old right big high different small large next early young ' +
  'important few public bad same able simple short clear correct wrong quick slow happy warm cold bright dark ' +
  'empty full easy hard true false free open final main local remote random tiny strong useful careful ' +
  'beautiful quiet loud heavy light soft sharp clean dirty rich poor safe dangerous famous modern ancient ' +
  'common rare special general specific certain possible available popular similar various recent current ' +
  'green blue red yellow black white orange purple brown gray golden silver fresh sweet bitter fast deep'
).split(' ');

const ADVERBS = (
  'quickly slowly carefully always never often again together already soon today now here there ' +
  'usually rarely sometimes finally suddenly clearly probably easily exactly almost nearly tomorrow yesterday'
).split(' ');

const FIRST_NAMES = 'Alice Bob Carol David Emma Frank Grace Henry Ivy Jack Kate Leo Mia Noah Olivia Paul'.split(' ');
export const CITIES =
  'Paris London Berlin Tokyo Madrid Rome Lisbon Dublin Vienna Prague Oslo Boston Seattle Sydney'.split(' ');

interface ToolSpec {
  name: string;
  description: string;
  parameters: Record<string, { type: string; description: string }>;
  sample: (rng: Prng) => Record<string, string | number | boolean>;
}

const TOOLS: ToolSpec[] = [
  {
    name: 'get_weather',
    description: 'Get the current weather for a city',
    parameters: {
      city: { type: 'string', description: 'The name of the city' },
      unit: { type: 'string', description: 'The temperature unit, celsius or fahrenheit' },
    },
    sample: (rng) => ({ city: rng.pick(CITIES), unit: rng.pick(['celsius', 'fahrenheit']) }),
  },
  {
    name: 'calculator',
    description: 'Evaluate an arithmetic expression',
    parameters: { expression: { type: 'string', description: 'The expression to evaluate' } },
    sample: (rng) => ({ expression: `${rng.int(1, 99)} ${rng.pick(['+', '-', '*'])} ${rng.int(1, 99)}` }),
  },
  {
    name: 'search',
    description: 'Search the web and return the top results',
    parameters: {
      query: { type: 'string', description: 'The search query' },
      limit: { type: 'integer', description: 'The maximum number of results' },
    },
    sample: (rng) => ({ query: `${rng.pick(ADJECTIVES)} ${rng.pick(NOUNS)}`, limit: rng.int(1, 10) }),
  },
  {
    name: 'send_email',
    description: 'Send an email to a person',
    parameters: {
      to: { type: 'string', description: 'The address of the recipient' },
      subject: { type: 'string', description: 'The subject line' },
      body: { type: 'string', description: 'The text of the email' },
    },
    sample: (rng) => ({
      to: `${rng.pick(FIRST_NAMES).toLowerCase()}@example.com`,
      subject: `The ${rng.pick(NOUNS)} ${rng.pick(NOUNS)}`,
      body: sentence(rng),
    }),
  },
  {
    name: 'read_file',
    description: 'Read a file from the workspace',
    parameters: { path: { type: 'string', description: 'The path of the file' } },
    sample: (rng) => ({ path: `src/${rng.pick(NOUNS)}/${rng.pick(NOUNS)}.ts` }),
  },
  {
    name: 'create_event',
    description: 'Create a calendar event',
    parameters: {
      title: { type: 'string', description: 'The title of the event' },
      day: { type: 'string', description: 'The day of the week' },
      all_day: { type: 'boolean', description: 'Whether the event lasts all day' },
    },
    sample: (rng) => ({
      title: `${rng.pick(ADJECTIVES)} ${rng.pick(NOUNS)}`,
      day: rng.pick(['Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday', 'Sunday']),
      all_day: rng.uniform() < 0.5,
    }),
  },
];

function capitalize(word: string): string {
  return word[0].toUpperCase() + word.slice(1);
}

function sentence(rng: Prng): string {
  const subject = rng.uniform() < 0.3 ? rng.pick(FIRST_NAMES) : `the ${rng.pick(ADJECTIVES)} ${rng.pick(NOUNS)}`;
  const object = `${rng.pick(['the', 'a', 'this', 'that', 'every', 'my', 'your', 'our'])} ${rng.pick(NOUNS)}`;
  const tail = rng.uniform() < 0.4 ? ` ${rng.pick(ADVERBS)}` : '';
  return `${capitalize(subject)} ${rng.pick(VERBS)} ${object}${tail}${rng.pick(['.', '.', '.', '?', '!'])}`;
}

type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

/** JSON with Python's default separators, the way the chat template's `tojson` writes it. */
function pythonJson(value: Json): string {
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(', ')}]`;
  if (value !== null && typeof value === 'object') {
    return `{${Object.entries(value)
      .map(([key, item]) => `${JSON.stringify(key)}: ${pythonJson(item)}`)
      .join(', ')}}`;
  }
  return JSON.stringify(value);
}

function toolDefinition(tool: ToolSpec): string {
  return pythonJson({
    type: 'function',
    function: {
      name: tool.name,
      description: tool.description,
      parameters: { type: 'object', properties: tool.parameters, required: Object.keys(tool.parameters) },
    },
  });
}

/** A question and its answer. */
type Exchange = [string, string];

function arithmetic(rng: Prng): Exchange {
  const a = rng.int(0, 999);
  const b = rng.int(0, 999);
  const [symbol, value] = rng.pick([
    ['+', a + b],
    ['-', a - b],
    ['*', a * b],
  ] as const);
  return rng.pick<Exchange>([
    [`What is ${a} ${symbol} ${b}?`, `${a} ${symbol} ${b} = ${value}.`],
    [`Compute ${a} ${symbol} ${b}.`, `The answer is ${value}.`],
  ]);
}

function copyOrReverse(rng: Prng): Exchange {
  const words = Array.from({ length: rng.int(3, 7) }, () => rng.pick(NOUNS));
  return rng.uniform() < 0.5
    ? [`Repeat after me: ${words.join(' ')}`, words.join(' ')]
    : [`Reverse the words: ${words.join(' ')}`, [...words].reverse().join(' ')];
}

function toolExchange(rng: Prng): string {
  const tool = rng.pick(TOOLS);
  const call = pythonJson({ name: tool.name, arguments: tool.sample(rng) });
  return `${toolDefinition(tool)}\n${call}\nThe ${tool.name.replaceAll('_', ' ')} tool returned a result. ${sentence(rng)}`;
}

function reasoning(rng: Prng): string {
  const a = rng.int(2, 20);
  const b = rng.int(2, 20);
  return `Let me think. The user wants ${a} times ${b}. ${a} * ${b} = ${a * b}. So the answer is ${a * b}.`;
}

/** A ChatML conversation with its control tokens left out (they are added tokens, not BPE). */
function conversation(rng: Prng): string {
  const [question, answer] = rng.pick([arithmetic, copyOrReverse])(rng);
  const system = rng.uniform() < 0.5 ? 'system\nYou are a helpful assistant.\n' : '';
  return `${system}user\n${question}\nassistant\n${answer}\n`;
}

/**
 * The whole corpus, deterministic for a given seed and document count. `chatDocuments` are rendered
 * pretraining conversations (added tokens cut out), so the text the model trains on is cheap in tokens.
 */
export function buildCorpus(seed: number, syntheticDocuments: number, chatDocuments: readonly string[] = []): string[] {
  const rng = new Prng(seed);
  const exchange = (rng: Prng) => rng.pick([arithmetic, copyOrReverse])(rng).join('\n');
  const generators = [sentence, sentence, exchange, exchange, toolExchange, reasoning, conversation];
  const synthetic = Array.from({ length: syntheticDocuments }, () => rng.pick(generators)(rng));
  return [PROSE, CODE, JSON_DOCS, TEMPLATE_TEXT, ...TOOLS.map(toolDefinition), ...synthetic, ...chatDocuments];
}
