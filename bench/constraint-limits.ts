/**
 * The constraint compiler at its caps: for each hostile constraint (the longest regexes, state blow-ups,
 * the widest and deepest schemas, the largest choice lists), how long it works (best of 5) and how many
 * budget steps it spent before compiling or being refused. The server runs this work on its compiler
 * thread, so these are the delays a constrained request can add to other first-time constraints, not
 * to the event loop; the last line measures that: the longest event-loop stall while the server's compiler
 * works through all of them. Prints figures; asserts nothing.
 * Usage: npx tsx bench/constraint-limits.ts
 */
import { compileConstraintUncached, type ConstraintSpec } from '../src/chat/constraints/compile.ts';
import { CONSTRAINT_LIMITS, WorkBudget } from '../src/chat/constraints/limits.ts';
import { ConstraintCompiler } from '../src/chat/constraints/constraint-compiler.ts';

const { regexLength, choices, choiceCharacters, schemaDepth } = CONSTRAINT_LIMITS;
const compact = { kind: 'compact' } as const;
const flexible = { kind: 'flexible' } as const;
const schema = (value: unknown, whitespace: typeof compact | typeof flexible = compact): ConstraintSpec => ({ kind: 'json_schema', schema: value, whitespace, noAdditionalProperties: false });

function nested(depth: number): unknown {
  let value: unknown = { type: 'string' };
  for (let level = 1; level < depth; level += 1) value = { type: 'array', items: value };
  return value;
}

/** `$defs` d0 … d9 where each refers to the next one ten times: a small schema whose expansion is 10^10. */
function refFanOut(): unknown {
  const defs: Record<string, unknown> = {};
  for (let i = 0; i < 10; i += 1) {
    defs[`d${i}`] = i === 9 ? { type: 'string' } : { type: 'object', properties: Object.fromEntries(Array.from({ length: 10 }, (_, k) => [`k${k}`, { $ref: `#/$defs/d${i + 1}` }])) };
  }
  return { $defs: defs, $ref: '#/$defs/d0' };
}

const cases: [string, ConstraintSpec][] = [
  [`regex "a" × ${regexLength}`, { kind: 'regex', regex: 'a'.repeat(regexLength) }],
  [`regex "[a-z]" × ${regexLength / 5}`, { kind: 'regex', regex: '[a-z]'.repeat(regexLength / 5) }],
  [`regex "(a|b)" × ${regexLength / 5}`, { kind: 'regex', regex: '(a|b)'.repeat(regexLength / 5) }],
  ['regex (a{1000}){1000}', { kind: 'regex', regex: '(a{1000}){1000}' }],
  ['regex (.{0,30}x){20} (DFA blow-up)', { kind: 'regex', regex: '(.{0,30}x){20}' }],
  ['regex (a|b)*a(a|b){20} (2^20 DFA states)', { kind: 'regex', regex: '(a|b)*a(a|b){20}' }],
  ['regex [\\s\\S]{0,1000}x[\\s\\S]{0,1000}', { kind: 'regex', regex: '[\\s\\S]{0,1000}x[\\s\\S]{0,1000}' }],
  [`choice ${choices} × ${choiceCharacters / choices} chars`, { kind: 'choice', choices: Array.from({ length: choices }, (_, i) => i.toString(36).padStart(choiceCharacters / choices, 'x')) }],
  [`schema arrays nested ${schemaDepth} deep`, schema(nested(schemaDepth))],
  ['schema 60 optional properties, flexible', schema({ type: 'object', properties: Object.fromEntries(Array.from({ length: 60 }, (_, i) => [`p${i}`, { type: 'string' }])) }, flexible)],
  ['schema 400 optional properties, flexible', schema({ type: 'object', properties: Object.fromEntries(Array.from({ length: 400 }, (_, i) => [`p${i}`, { type: 'string' }])) }, flexible)],
  ['schema $ref fan-out 10^10', schema(refFanOut())],
  ['schema oneOf of 60 string patterns', schema({ oneOf: Array.from({ length: 60 }, (_, i) => ({ type: 'string', pattern: `^p${i}[a-z]{0,40}$` })) })],
  ['schema string maxLength 100000', schema({ type: 'string', maxLength: 100000 })],
  ['schema array minItems 1000000', schema({ type: 'array', items: { type: 'integer' }, minItems: 1000000 })],
];

for (const [label, spec] of cases) {
  let best = Infinity;
  let outcome = '';
  let steps = 0;
  for (let run = 0; run < 5; run += 1) {
    const budget = new WorkBudget();
    const started = performance.now();
    try {
      outcome = `compiled, ${compileConstraintUncached(spec, budget).dfa.states} states`;
    } catch (error) {
      outcome = `refused: ${(error as Error).message.slice(0, 70)}`;
    }
    best = Math.min(best, performance.now() - started);
    steps = budget.used;
  }
  console.log(`${label.padEnd(44)} ${best.toFixed(1).padStart(7)} ms  ${String(steps).padStart(8)} steps  ${(steps / best / 1000).toFixed(1).padStart(5)} Msteps/s  ${outcome}`);
}

// The same constraints through the server's compiler thread, with a 5 ms timer watching the event loop.
const compiler = new ConstraintCompiler();
let worstLag = 0;
let last = performance.now();
const watch = setInterval(() => {
  const now = performance.now();
  worstLag = Math.max(worstLag, now - last - 5);
  last = now;
}, 5);
const started = performance.now();
for (const [, spec] of cases) await compiler.compile(spec).catch(() => undefined);
clearInterval(watch);
await compiler.close();
console.log(`all ${cases.length} through the compiler thread: ${(performance.now() - started).toFixed(0)} ms; longest event-loop stall meanwhile ${worstLag.toFixed(1)} ms`);
