/**
 * Hostile constraints at the caps, through the API with the real engine: for each (the longest regexes, regexes
 * whose automata explode, the widest and deepest schemas, a $ref fan-out, the largest choice list, a big Lark
 * grammar) how long the server takes to answer (a 400 naming the field, or a 200 when llguidance compiles it
 * within its limits), while one free request streams beside them. The engine compiles on its own pool, so the
 * stream should not stall: the last lines compare its longest gap between tokens with the same stream alone.
 * Prints figures; asserts nothing.
 * Usage: npx tsx bench/constraint-limits.ts [qwen3]
 */
import { CONSTRAINT_LIMITS } from '../src/constraints/limits.ts';
import { writeFamilyModel } from '../test/helpers/families.ts';
import { refFanOut } from '../test/helpers/hostile-schemas.ts';
import { startE2eServer } from '../test/helpers/server.ts';

const { regexLength, choices, choiceCharacters, schemaDepth } = CONSTRAINT_LIMITS;
const qwen3 = process.argv[2] === 'qwen3';
const model = qwen3 ? 'test/qwen3' : 'builtin/tiny-chat';

function nested(depth: number): unknown {
  let value: unknown = { type: 'string' };
  for (let level = 1; level < depth; level += 1) value = { type: 'array', items: value };
  return value;
}

const json = (schema: unknown) => ({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } });
const regex = (source: string) => ({ structured_outputs: { regex: source } });
const cases: [string, Record<string, unknown>][] = [
  [`regex "a" × ${regexLength}`, regex('a'.repeat(regexLength))],
  [`regex "(a|b)" × ${regexLength / 5}`, regex('(a|b)'.repeat(regexLength / 5))],
  ['regex (a{1000}){1000}', regex('(a{1000}){1000}')],
  ['regex ((((a{100}){100}){100}){100})', regex('((((a{100}){100}){100}){100})')],
  ['regex (.{0,30}x){20}', regex('(.{0,30}x){20}')],
  ['regex (a|b)*a(a|b){24}', regex('(a|b)*a(a|b){24}')],
  [
    `choice ${choices} × ${choiceCharacters / choices} chars`,
    {
      structured_outputs: {
        choice: Array.from({ length: choices }, (_, i) => i.toString(36).padStart(choiceCharacters / choices, 'x')),
      },
    },
  ],
  [`schema arrays nested ${schemaDepth} deep`, json(nested(schemaDepth))],
  [
    'schema 400 optional properties',
    json({
      type: 'object',
      properties: Object.fromEntries(Array.from({ length: 400 }, (_, i) => [`p${i}`, { type: 'string' }])),
    }),
  ],
  ['schema $ref fan-out 10^10', json(refFanOut())],
  ['schema string maxLength 100000', json({ type: 'string', maxLength: 100000 })],
  ['schema array minItems 1000000', json({ type: 'array', items: { type: 'integer' }, minItems: 1000000 })],
  [
    'grammar 2000 alternatives',
    { structured_outputs: { grammar: `start: ${Array.from({ length: 2000 }, (_, i) => `"w${i}"`).join(' | ')}` } },
  ],
];

const folder = qwen3 ? writeFamilyModel('qwen3', { seed: 1 }) : null;
const e2e = await startE2eServer(folder ? { env: { BASE_MODELS: `${model}=${folder}` } } : {});
const post = (body: Record<string, unknown>) =>
  fetch(`${e2e.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], ...body }),
  });

/** Streams one free request of `tokens` tokens (until `stop()`); answers the longest gap between chunks after the first, in ms. */
async function streamGaps(tokens: number, stop: () => boolean = () => false): Promise<number> {
  const response = await post({ max_tokens: tokens, ignore_eos: true, stream: true, seed: 1 });
  const reader = response.body!.getReader();
  let last = 0;
  let worst = 0;
  for (;;) {
    if (stop()) {
      await reader.cancel(); // the server cancels the generation
      return worst;
    }
    const { done } = await reader.read();
    const now = performance.now();
    if (done) return worst;
    if (last > 0) worst = Math.max(worst, now - last);
    last = now;
  }
}

try {
  await post({ max_tokens: 2 }); // loads the base and warms the batch shapes
  await post({ max_tokens: 1, structured_outputs: { regex: 'warm' } }); // the base's llguidance tokenizer is built
  const aloneWorst = await streamGaps(200);
  let hostileDone = false;
  const stream = streamGaps(1500, () => hostileDone);
  const started = performance.now();
  for (const [label, body] of cases) {
    const caseStarted = performance.now();
    const response = await post({ max_tokens: 1, ...body });
    const answer = (await response.json()) as { error?: { message: string; param: string } };
    const outcome = answer.error
      ? `${response.status} ${answer.error.param}: ${answer.error.message.replace(/\s+/g, ' ').slice(0, 80)}`
      : `${response.status} compiled`;
    console.log(`${label.padEnd(40)} ${(performance.now() - caseStarted).toFixed(0).padStart(7)} ms  ${outcome}`);
  }
  const total = performance.now() - started;
  hostileDone = true;
  const worstDuring = await stream;
  console.log(
    `all ${cases.length} in ${total.toFixed(0)} ms; a free stream beside them: longest gap ${worstDuring.toFixed(0)} ms (alone: ${aloneWorst.toFixed(0)} ms)`,
  );
} finally {
  await e2e.close();
}
