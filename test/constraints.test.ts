/**
 * The constraint compiler on its own, without server or engine: known accepted and rejected strings for
 * every regex and JSON Schema construct, multi-byte characters, the tiny model's tokens walked through
 * the automaton (tokens that span literal boundaries or split a UTF-8 character), random texts drawn
 * from each schema's automaton that must parse and pass Ajv, refusals with their reasons, the request
 * rules (one kind at a time, the field named), the wire form and the cache.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import zlib from 'node:zlib';
import { describe, test } from 'node:test';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { compileConstraint, compileConstraintUncached, type ConstraintSpec } from '../src/chat/constraints/compile.ts';
import { MAX_DIGITS } from '../src/chat/constraints/numbers.ts';
import { accepts, DEAD, type Dfa, walk } from '../src/chat/constraints/dfa.ts';
import { ConstraintError } from '../src/chat/constraints/constraint-error.ts';
import { CONSTRAINT_LIMITS, WorkBudget } from '../src/chat/constraints/limits.ts';
import { ConstraintCompiler } from '../src/chat/constraints/constraint-compiler.ts';
import { ConstraintRequestError, requestedConstraint } from '../src/chat/constraints/request.ts';
import { constraintTokenBytes } from '../src/chat/constraints/vocabulary.ts';
import { loadTokenizer } from '../src/chat/tokenizer.ts';
import type { ChatCompletionBody } from '../src/api/chat.ts';

const ajv = new Ajv2020({ strict: false });
addFormatsModule.default(ajv);

const regex = (source: string) => compileConstraintUncached({ kind: 'regex', regex: source }).dfa;
const schema = (value: unknown, whitespace: 'compact' | 'flexible' = 'compact') =>
  compileConstraintUncached({ kind: 'json_schema', schema: value, whitespace: { kind: whitespace }, noAdditionalProperties: false }).dfa;

function expectLanguage(dfa: Dfa, yes: string[], no: string[]): void {
  for (const text of yes) assert.ok(accepts(dfa, text), `should accept ${JSON.stringify(text)}`);
  for (const text of no) assert.ok(!accepts(dfa, text), `should reject ${JSON.stringify(text)}`);
}

function refusal(compile: () => unknown, reason: 'invalid' | 'unsupported', message: RegExp): void {
  assert.throws(compile, (error: unknown) => error instanceof ConstraintError && error.reason === reason && message.test(error.message));
}

/** A small deterministic PRNG, so that a failing sample can be reproduced. */
function rng(seed: number): () => number {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 32;
  };
}

/** Random texts of the automaton's language: random bytes while short, then the shortest way to acceptance. */
function sampleTexts(dfa: Dfa, count: number, seed: number): string[] {
  const distance = new Array<number>(dfa.states).fill(Infinity);
  for (let changed = true; changed; ) {
    changed = false;
    for (let state = 0; state < dfa.states; state += 1) {
      let best = dfa.accepting[state] ? 0 : Infinity;
      for (let c = 0; c < dfa.classCount; c += 1) {
        const to = dfa.next[state * dfa.classCount + c];
        if (to !== DEAD) best = Math.min(best, distance[to] + 1);
      }
      if (best < distance[state]) {
        distance[state] = best;
        changed = true;
      }
    }
  }
  const random = rng(seed);
  return Array.from({ length: count }, () => {
    const bytes: number[] = [];
    let state = dfa.start;
    for (;;) {
      const steering = bytes.length > 60;
      if (dfa.accepting[state] && (steering || random() < 0.15)) break;
      const choices: number[] = [];
      for (let byte = 0; byte < 256; byte += 1) {
        const to = dfa.next[state * dfa.classCount + dfa.classOf[byte]];
        if (to !== DEAD && (!steering || distance[to] < distance[state])) choices.push(byte);
      }
      if (choices.length === 0) break;
      const byte = choices[Math.floor(random() * choices.length)];
      bytes.push(byte);
      state = dfa.next[state * dfa.classCount + dfa.classOf[byte]];
    }
    assert.ok(dfa.accepting[state]);
    return new TextDecoder('utf-8', { fatal: true }).decode(Uint8Array.from(bytes));
  });
}

describe('regex → automaton', () => {
  test('literals, classes, escapes, dot, alternation, groups and every quantifier', () => {
    expectLanguage(regex('abc'), ['abc'], ['ab', 'abcd', 'ABC', '']);
    expectLanguage(regex('[a-c]x[^0-9]'), ['axz', 'cx-'], ['dxz', 'ax5', 'ax']);
    expectLanguage(regex('\\d\\w\\s\\D\\W\\S'), ['1a x!y'], ['aa x!y', '1a xay']);
    expectLanguage(regex('a.c'), ['abc', 'a c', 'aéc'], ['a\nc', 'ac']);
    expectLanguage(regex('cat|dog|(?:bird|fish)s'), ['cat', 'dog', 'birds', 'fishs'], ['bird', 'cats']);
    expectLanguage(regex('(?P<word>ab)+(?<x>c)?'), ['ab', 'ababc'], ['', 'abcc', 'aba']);
    expectLanguage(regex('a*b+c?'), ['b', 'aabbb', 'bc'], ['a', 'abcc']);
    expectLanguage(regex('x{3}y{2,}z{1,2}w{,1}'), ['xxxyyz', 'xxxyyyyzzw'], ['xxyyz', 'xxxyz', 'xxxyyzzz', 'xxxyyzww']);
    expectLanguage(regex('a+?b*?c??'), ['a', 'aabbc'], ['b']);
    expectLanguage(regex('^\\$\\.\\*\\{1\\}$'), ['$.*{1}'], ['$x*{1}']);
    expectLanguage(regex('a{x}'), ['a{x}'], ['a']); // not a quantifier: literal braces
    expectLanguage(regex('\\x41\\u00e9\\u{1F600}\\t'), ['Aé😀\t'], ['Ae😀\t']);
  });

  test('multi-byte characters: literals, ranges across UTF-8 lengths, negated classes', () => {
    expectLanguage(regex('né中😀'), ['né中😀'], ['ne中😀', 'né中']);
    expectLanguage(regex('[α-ω]{2}'), ['αω', 'λμ'], ['αa', 'α', 'ΑΒ']);
    expectLanguage(regex('[\\u00e0-\\u4e2d]'), ['à', 'ÿ', 'Ā', '中'], ['a', '丮', '😀']);
    expectLanguage(regex('[^a]+'), ['é', '中😀', 'bc'], ['a', 'ba', '']);
    // A partial character is never accepted: the bytes of "é" one at a time.
    const dfa = regex('é');
    const partial = walk(dfa, Uint8Array.of(0xc3));
    assert.notEqual(partial, DEAD);
    assert.equal(dfa.accepting[partial], 0);
    assert.ok(dfa.accepting[walk(dfa, Uint8Array.of(0xa9), partial)]);
    assert.equal(walk(dfa, Uint8Array.of(0xc3, 0x28)), DEAD);
  });

  test('anchors at the edges only; refused and invalid features are named', () => {
    expectLanguage(regex('^ab$|^c$'), ['ab', 'c'], ['abc']);
    refusal(() => regex('a(?=b)'), 'unsupported', /lookaround/);
    refusal(() => regex('(?<!a)b'), 'unsupported', /lookaround/);
    refusal(() => regex('(a)\\1'), 'unsupported', /backreference/);
    refusal(() => regex('\\bword'), 'unsupported', /word boundary/);
    refusal(() => regex('(?i)abc'), 'unsupported', /inline flag/);
    refusal(() => regex('a*+'), 'unsupported', /possessive/);
    refusal(() => regex('\\p{L}'), 'unsupported', /Unicode property/);
    refusal(() => regex('a^b'), 'unsupported', /\^/);
    refusal(() => regex('(ab'), 'invalid', /missing \)/);
    refusal(() => regex('ab)'), 'invalid', /unbalanced/);
    refusal(() => regex('[z-a]'), 'invalid', /bad character range/);
    refusal(() => regex('*a'), 'invalid', /nothing to repeat/);
    refusal(() => regex('a{3,1}'), 'invalid', /min repeat greater/);
    refusal(() => regex('\\q'), 'invalid', /bad escape/);
  });
});

describe('JSON schema → automaton', () => {
  test('objects: declared order, required and optional members, nesting, additionalProperties false', () => {
    const dfa = schema({
      type: 'object',
      properties: { id: { type: 'integer' }, name: { type: 'string' }, meta: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false } },
      required: ['name'],
      additionalProperties: false,
    });
    expectLanguage(
      dfa,
      ['{"name": "x"}', '{"id": 3, "name": ""}', '{"name": "a", "meta": {"ok": true}}', '{"id": -1, "name": "b", "meta": {"ok": false}}'],
      ['{}', '{"id": 3}', '{"name": "x", "id": 3}', '{"name": "x", "extra": 1}', '{"name": "x", "meta": {}}', '{"name": "x",}', '{, "name": "x"}'],
    );
  });

  test('whitespace: compact is json.dumps, flexible allows bounded runs, a pattern replaces them', () => {
    const value = { type: 'object', properties: { a: { type: 'array', items: { type: 'integer' } } }, required: ['a'] };
    expectLanguage(schema(value), ['{"a": [1, 2]}'], ['{"a":[1,2]}', '{ "a": [1, 2] }']);
    expectLanguage(schema(value, 'flexible'), ['{"a":[1,2]}', '{ "a" :\n\t[ 1 ,2 ]\r\n}', `{"a": [1,${' '.repeat(16)}2]}`], [`{"a": [1,${' '.repeat(17)}2]}`, '{"a":[1,\u000b2]}']);
    const custom = compileConstraintUncached({ kind: 'json_schema', schema: value, whitespace: { kind: 'pattern', regex: '[ ]?' }, noAdditionalProperties: false }).dfa;
    expectLanguage(custom, ['{"a":[1,2]}', '{ "a" : [ 1 , 2 ] }'], ['{"a":\n[1]}', '{  "a": []}']);
  });

  test('arrays: items, minItems/maxItems, prefixItems, items false', () => {
    expectLanguage(schema({ type: 'array', items: { type: 'boolean' }, minItems: 1, maxItems: 2 }), ['[true]', '[true, false]'], ['[]', '[true, true, true]', '[1]']);
    expectLanguage(schema({ type: 'array', prefixItems: [{ const: 'a' }, { type: 'integer' }], items: false }), ['["a", 1]'], ['["a"]', '["a", 1, 2]', '[1, "a"]']);
    expectLanguage(schema({ type: 'array', prefixItems: [{ type: 'null' }], items: { type: 'integer' }, minItems: 2 }), ['[null, 1]', '[null, 1, 2]'], ['[null]']);
  });

  test('enum, const, anyOf, type lists, oneOf with disjoint branches; overlapping oneOf is refused', () => {
    expectLanguage(schema({ enum: ['red', 3, null, { a: [1] }] }), ['"red"', '3', 'null', '{"a": [1]}'], ['"blue"', '{"a":[1]}']);
    expectLanguage(schema({ const: 'x"y' }), ['"x\\"y"'], ['"x"y"']);
    expectLanguage(schema({ anyOf: [{ type: 'integer', maximum: 3 }, { type: 'string', maxLength: 1 }] }), ['3', '"a"', '-7'], ['4', '"ab"']);
    expectLanguage(schema({ type: ['string', 'null'], maxLength: 2 }), ['null', '"ab"'], ['"abc"', '1']);
    expectLanguage(schema({ oneOf: [{ type: 'integer' }, { type: 'string' }] }), ['1', '"1"'], ['true']);
    refusal(() => schema({ oneOf: [{ type: 'integer' }, { type: 'number' }] }), 'unsupported', /oneOf.*branches 0 and 1/);
  });

  test('integers: exact ranges, exclusive bounds, huge bounds', () => {
    const dfa = schema({ type: 'integer', minimum: -37, exclusiveMaximum: 141 });
    for (let n = -300; n <= 300; n += 1) assert.equal(accepts(dfa, String(n)), n >= -37 && n < 141, String(n));
    expectLanguage(dfa, [], ['-0', '007', '1.0', '1e2']);
    const big = schema({ type: 'integer', minimum: 1e20, maximum: 3e20 });
    expectLanguage(big, ['100000000000000000000', '299999999999999999999', '300000000000000000000'], ['99999999999999999999', '300000000000000000001']);
    expectLanguage(schema({ type: 'integer', maximum: -5 }), ['-5', '-100000'], ['-4', '0', '5']);
  });

  test('numbers: integer bounds with fractions, exclusivity at both ends, unbounded forms', () => {
    expectLanguage(schema({ type: 'number', minimum: -2, exclusiveMaximum: 3 }), ['-2', '-2.0', '-1.5', '0', '-0', '2.999', '2'], ['-2.01', '3', '3.0', '1e2']);
    expectLanguage(schema({ type: 'number', exclusiveMinimum: 0, maximum: 1 }), ['0.5', '1', '1.00', '0.001'], ['0', '0.0', '-0.5', '1.5']);
    expectLanguage(schema({ type: 'number' }), ['0', '-1.5e+10', '3E2', '12.25'], ['01', '.5', '1.', '+1', 'NaN']);
    refusal(() => schema({ type: 'number', minimum: 0.5 }), 'unsupported', /non-integer `minimum`/);
  });

  test('numbers: every run of free digits ends, at MAX_DIGITS', () => {
    const run = (length: number) => '1'.repeat(length);
    const number = schema({ type: 'number' });
    expectLanguage(number, [run(MAX_DIGITS), `0.${run(MAX_DIGITS)}`, `1e${run(MAX_DIGITS)}`], [run(MAX_DIGITS + 1), `0.${run(MAX_DIGITS + 1)}`, `1e${run(MAX_DIGITS + 1)}`]);
    expectLanguage(schema({ type: 'integer', minimum: 5 }), [run(MAX_DIGITS)], [run(MAX_DIGITS + 1)]);
    // At the bounds of a range too: the zeros after an inclusive maximum, the fraction after an exclusive minimum.
    expectLanguage(schema({ type: 'number', exclusiveMinimum: 0, maximum: 1 }), [`1.${'0'.repeat(MAX_DIGITS)}`, `0.${run(MAX_DIGITS)}`, `0.${'0'.repeat(MAX_DIGITS - 1)}1`], [`1.${'0'.repeat(MAX_DIGITS + 1)}`, `0.${run(MAX_DIGITS + 1)}`, `0.${'0'.repeat(MAX_DIGITS)}1`]);
  });

  test('strings: escapes, lengths in characters, patterns (anchored or not), formats, and their intersection', () => {
    expectLanguage(schema({ type: 'string', minLength: 2, maxLength: 3 }), ['"ab"', '"中😀"', '"a\\nb"', '"\\u00e9ab"'], ['"a"', '"abcd"', '"a\nb"', '"\\ud83d\\ude00"']);
    expectLanguage(schema({ type: 'string', pattern: '^[a-z]+-\\d{2}$' }), ['"ab-12"'], ['"ab-1"', '"AB-12"', '"xab-123"']);
    expectLanguage(schema({ type: 'string', pattern: 'o"k' }), ['"o\\"k"', '"xo\\"ky"'], ['"ok"']);
    expectLanguage(schema({ type: 'string', pattern: '^[a-z]+$', maxLength: 3 }), ['"abc"', '"a"'], ['"abcd"', '""']);
    expectLanguage(schema({ type: 'string', format: 'date' }), ['"2024-01-31"', '"1999-02-28"'], ['"2024-02-30"', '"2024-13-01"', '"24-01-01"']);
    expectLanguage(schema({ type: 'string', format: 'uuid' }), ['"123e4567-e89b-12d3-a456-426614174000"'], ['"123e4567"']);
    refusal(() => schema({ type: 'string', format: 'ipv6' }), 'unsupported', /format "ipv6"/);
    refusal(() => schema({ type: 'string', pattern: '^a$', minLength: 2 }), 'invalid', /no string satisfies/);
  });

  test('$ref, recursion unrolled to a bound, refused keywords named', () => {
    const tree = { $defs: { node: { type: 'object', properties: { v: { type: 'integer' }, kids: { type: 'array', items: { $ref: '#/$defs/node' } } }, required: ['v'] } }, $ref: '#/$defs/node' };
    expectLanguage(schema(tree), ['{"v": 1}', '{"v": 1, "kids": [{"v": 2, "kids": []}]}', '{"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]}'], ['{"v": 1, "kids": [{"v": 2, "kids": [{"v": 3, "kids": [{"v": 4}]}]}]}']);
    refusal(() => schema({ $defs: { a: { type: 'object', properties: { a: { $ref: '#/$defs/a' } }, required: ['a'] } }, $ref: '#/$defs/a' }), 'unsupported', /recursive schema/);
    refusal(() => schema({ type: 'string', not: { const: 'x' } }), 'unsupported', /`not`/);
    refusal(() => schema({ type: 'array', uniqueItems: true }), 'unsupported', /uniqueItems/);
    refusal(() => schema({ type: 'object', patternProperties: { x: {} } }), 'unsupported', /patternProperties/);
    refusal(() => schema({ $ref: 'https://example.com/s.json' }), 'unsupported', /outside the schema/);
    refusal(() => schema({ $ref: '#/$defs/missing' }), 'invalid', /points nowhere/);
    refusal(() => schema({ type: 'integer', minimum: 5, maximum: 1 }), 'invalid', /matches no JSON value/);
  });

  test('random texts of each schema parse and validate with Ajv', () => {
    const schemas = [
      { type: 'object', properties: { id: { type: 'integer', minimum: 1, maximum: 99 }, tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 3 }, note: { type: 'string', pattern: '^[a-z ]+$' } }, required: ['id'], additionalProperties: false },
      { type: 'object', properties: { when: { type: 'string', format: 'date-time' }, mail: { type: 'string', format: 'email' }, score: { type: 'number', minimum: -1, maximum: 1 } }, required: ['when', 'mail', 'score'] },
      { anyOf: [{ type: 'null' }, { type: 'array', prefixItems: [{ type: 'boolean' }, { type: 'string', minLength: 1, maxLength: 4 }], items: false }] },
      { type: 'object', additionalProperties: { type: 'integer' }, maxProperties: 3 },
      {},
    ];
    for (const [index, value] of schemas.entries()) {
      for (const whitespace of ['compact', 'flexible'] as const) {
        for (const text of sampleTexts(schema(value, whitespace), 40, index + 1)) {
          const parsed = JSON.parse(text);
          assert.ok(ajv.validate(value, parsed), `${text} against schema ${index}: ${ajv.errorsText()}`);
        }
      }
    }
  });
});

describe('the tiny model\'s tokens through the automaton', async () => {
  const tokenizer = await loadTokenizer(path.join(import.meta.dirname, '..', 'models', 'tiny-chat'));
  const walkTokens = (dfa: Dfa, ids: number[]) => {
    const states = [dfa.start];
    for (const id of ids) states.push(walk(dfa, tokenizer.tokenBytes(id)!, states.at(-1)!));
    return states;
  };

  test('tokens that span literal boundaries (`":`, `",`) and split a character still walk to acceptance', () => {
    const dfa = schema({ type: 'object', properties: { name: { type: 'string' }, n: { type: 'integer' } }, required: ['name', 'n'] });
    const ids = tokenizer.encode('{"name": "né 中", "n": 5}');
    const pieces = ids.map((id) => Buffer.from(tokenizer.tokenBytes(id)!).toString('latin1'));
    assert.ok(pieces.includes('":') && pieces.includes('",'), 'the tokenizer merges quotes with separators');
    assert.ok(ids.some((id) => tokenizer.tokenBytes(id)!.length === 1 && tokenizer.tokenBytes(id)![0] >= 0xc0), 'some token is half a character');
    const states = walkTokens(dfa, ids);
    assert.ok(states.every((state) => state !== DEAD), 'every prefix stays inside the constraint');
    assert.equal(dfa.accepting[states.at(-1)!], 1);
    // The same text with a stray comma leaves the automaton at the token that carries it.
    assert.ok(walkTokens(dfa, tokenizer.encode('{"name": "x",, "n": 5}')).includes(DEAD));
  });

  test('the vocabulary sent to the engine: bytes for text tokens, null for special ones', () => {
    const bytes = constraintTokenBytes(tokenizer);
    assert.equal(bytes.length, tokenizer.vocabSize);
    assert.equal(bytes[tokenizer.eosTokenId!], null);
    assert.equal(Buffer.from(bytes[tokenizer.tokenId('<tool_call>')!]!, 'base64').toString(), '<tool_call>');
    const dfa = compileConstraintUncached({ kind: 'tool_call', tools: [{ name: 'f', parameters: { type: 'object', properties: {}, additionalProperties: false } }], multiple: false, whitespace: { kind: 'compact' }, format: 'hermes' }).dfa;
    const ids = tokenizer.encode('<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>');
    assert.equal(ids[0], tokenizer.tokenId('<tool_call>'), 'the marker is one added token');
    assert.equal(dfa.accepting[walkTokens(dfa, ids).at(-1)!], 1);
  });
});

describe('constraints as a request states them', () => {
  const body = (fields: Record<string, unknown>) => ({ messages: [], ...fields }) as unknown as ChatCompletionBody;
  const fails = (fields: Record<string, unknown>, param: string, message: RegExp, toolChoice: 'none' | 'required' | { name: string } = 'none') =>
    assert.throws(() => requestedConstraint(body(fields), toolChoice, true), (error: unknown) => error instanceof ConstraintRequestError && error.param === param && message.test(error.message));

  test('one kind at a time, with vLLM\'s messages and the field named', () => {
    fails({ structured_outputs: { regex: 'a', choice: ['a'] } }, 'structured_outputs', /only use one kind of constraints for structured outputs \('json', 'regex' or 'choice'\)/);
    fails({ structured_outputs: { regex: 'a' }, response_format: { type: 'json_object' } }, 'structured_outputs', /only use one kind of structured outputs constraint but multiple are specified/);
    fails({ structured_outputs: { disable_any_whitespace: true } }, 'structured_outputs', /must use one kind of structured outputs constraint but none/);
    fails({ structured_outputs: { choice: [] } }, 'structured_outputs', /non-empty list/);
    fails({ structured_outputs: { grammar: 'root ::= "a"' } }, 'structured_outputs', /grammar.*not supported/);
    fails({ response_format: { type: 'json_schema' } }, 'response_format', /'json_schema' field must be provided/);
    fails({ response_format: { type: 'xml' } }, 'response_format', /must be one of/);
    fails({ structured_outputs: { json: '{not json' } }, 'structured_outputs', /not valid JSON/);
    fails({ response_format: { type: 'json_object' } }, 'response_format', /either use constraints for structured outputs or tools, not both/, { name: 'f' });
    assert.equal(requestedConstraint(body({ response_format: { type: 'text' } }), 'none', true), null);
    assert.equal(requestedConstraint(body({ structured_outputs: {} }), 'none', true), null);
  });

  test('response_format and structured_outputs options combine; a required tool call replaces them', () => {
    const merged = requestedConstraint(body({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'integer' } } }, structured_outputs: { disable_any_whitespace: true } }), 'none', true);
    assert.deepEqual(merged, { spec: { kind: 'json_schema', schema: { type: 'integer' }, whitespace: { kind: 'compact' }, noAdditionalProperties: false }, param: 'response_format' });
    const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }, { type: 'function', function: { name: 'g' } }];
    const required = requestedConstraint(body({ tools, response_format: { type: 'json_object' } }), 'required', false);
    assert.deepEqual(required?.spec, { kind: 'tool_call', tools: [{ name: 'f', parameters: { type: 'object' } }, { name: 'g', parameters: undefined }], multiple: false, whitespace: { kind: 'flexible' }, format: 'hermes' });
    const named = requestedConstraint(body({ tools }), { name: 'g' }, true);
    assert.deepEqual(named?.spec, { kind: 'tool_call', tools: [{ name: 'g', parameters: undefined }], multiple: false, whitespace: { kind: 'flexible' }, format: 'hermes' });
  });
});

describe('compilation: cache and wire form', () => {
  const fiftyProperties = (): ConstraintSpec => {
    const properties: Record<string, unknown> = {};
    for (let i = 0; i < 50; i += 1) properties[`field_${i}`] = [{ type: 'string', maxLength: 12 }, { type: 'integer', minimum: 0 }, { type: 'boolean' }, { enum: ['x', 'y'] }][i % 4];
    return { kind: 'json_schema', schema: { type: 'object', properties, required: Object.keys(properties) }, whitespace: { kind: 'flexible' }, noAdditionalProperties: false };
  };

  test('a constraint compiles once; refusals are cached too', () => {
    const first = compileConstraint(fiftyProperties());
    assert.equal(compileConstraint(fiftyProperties()), first);
    const bad: ConstraintSpec = { kind: 'regex', regex: '(?=x)' };
    assert.throws(() => compileConstraint(bad), ConstraintError);
    assert.throws(() => compileConstraint(bad), ConstraintError);
  });

  test('the wire form decodes back to the same table, and its id names its content', () => {
    const { dfa, wire } = compileConstraintUncached(fiftyProperties());
    const table = zlib.inflateSync(Buffer.from(wire.table, 'base64'));
    assert.deepEqual(new Int32Array(table.buffer, table.byteOffset, table.byteLength / 4), dfa.next);
    assert.deepEqual([...Buffer.from(wire.class_of, 'base64')], [...dfa.classOf]);
    assert.deepEqual(wire.accepting, [...dfa.accepting.keys()].filter((state) => dfa.accepting[state]));
    assert.equal(compileConstraintUncached(fiftyProperties()).wire.id, wire.id);
    assert.notEqual(compileConstraintUncached({ kind: 'regex', regex: 'a' }).wire.id, wire.id);
    assert.ok(Buffer.byteLength(JSON.stringify(wire)) < 200_000, 'a 50-property schema travels in under 200 kB');
  });
});

describe('limits: caps before compiling, a step budget while compiling', () => {
  const { regexLength, regexNesting, schemaDepth, schemaNodes, choices, choiceCharacters, tools } = CONSTRAINT_LIMITS;
  const nested = (depth: number): unknown => {
    let value: unknown = { type: 'string' };
    for (let level = 1; level < depth; level += 1) value = { type: 'array', items: value };
    return value;
  };
  /** Refused before any automaton work: the budget is untouched. */
  const refusedUpFront = (spec: ConstraintSpec, message: RegExp) => {
    const budget = new WorkBudget();
    refusal(() => compileConstraintUncached(spec, budget), 'unsupported', message);
    assert.equal(budget.used, 0);
  };

  test('regexes: length and group nesting, at and past the cap', () => {
    expectLanguage(regex('a'.repeat(regexLength)), ['a'.repeat(regexLength)], ['a'.repeat(regexLength - 1)]);
    refusedUpFront({ kind: 'regex', regex: 'a'.repeat(regexLength + 1) }, new RegExp(`more than ${regexLength} characters`));
    expectLanguage(regex(`${'('.repeat(regexNesting)}a${')'.repeat(regexNesting)}`), ['a'], ['aa']);
    refusal(() => regex(`${'('.repeat(regexNesting + 1)}a${')'.repeat(regexNesting + 1)}`), 'unsupported', /nested more than/);
    refusal(() => regex(`${'('.repeat(100_000)}a${')'.repeat(100_000)}`), 'unsupported', /more than \d+ characters/);
    // The same caps hold for a schema's pattern and a whitespace pattern.
    refusal(() => schema({ type: 'string', pattern: 'a'.repeat(regexLength + 1) }), 'unsupported', /more than \d+ characters/);
  });

  test('schemas: depth and size, counted without recursion, and depth reached through $ref chains', () => {
    expectLanguage(schema(nested(schemaDepth)), [`${'['.repeat(schemaDepth - 1)}${']'.repeat(schemaDepth - 1)}`], []);
    refusedUpFront({ kind: 'json_schema', schema: nested(schemaDepth + 1), whitespace: { kind: 'compact' }, noAdditionalProperties: false }, /nested more than/);
    refusedUpFront({ kind: 'json_schema', schema: nested(100_000), whitespace: { kind: 'compact' }, noAdditionalProperties: false }, /nested more than/);
    const wide = { type: 'object', properties: Object.fromEntries(Array.from({ length: schemaNodes }, (_, i) => [`p${i}`, { type: 'string' }])) };
    refusedUpFront({ kind: 'json_schema', schema: wide, whitespace: { kind: 'compact' }, noAdditionalProperties: false }, new RegExp(`more than ${schemaNodes} nodes`));
    // Shallow in the text, deep once the references are followed.
    const defs: Record<string, unknown> = Object.fromEntries(Array.from({ length: schemaDepth + 5 }, (_, i) => [`d${i}`, { type: 'array', items: { $ref: `#/$defs/d${i + 1}` } }]));
    defs[`d${schemaDepth + 5}`] = { type: 'string' };
    refusal(() => schema({ $defs: defs, $ref: '#/$defs/d0' }), 'unsupported', /nested more than/);
  });

  test('choices and tools: counts and total size', () => {
    refusedUpFront({ kind: 'choice', choices: Array.from({ length: choices + 1 }, (_, i) => String(i)) }, new RegExp(`more than ${choices} choices`));
    refusedUpFront({ kind: 'choice', choices: ['x'.repeat(choiceCharacters + 1)] }, new RegExp(`more than ${choiceCharacters} characters`));
    const tool = (name: string) => ({ name, parameters: undefined });
    refusedUpFront({ kind: 'tool_call', tools: Array.from({ length: tools + 1 }, (_, i) => tool(`f${i}`)), multiple: false, whitespace: { kind: 'compact' }, format: 'hermes' }, new RegExp(`more than ${tools} tools`));
  });

  test('the step budget stops a small constraint whose automaton explodes, as soon as it is spent', () => {
    for (const regexSource of ['(a|b)*a(a|b){24}', '((a{1000}){1000}){1000}']) {
      const budget = new WorkBudget(200_000);
      refusal(() => compileConstraintUncached({ kind: 'regex', regex: regexSource }, budget), 'unsupported', /more than 200000 steps/);
      assert.ok(budget.used < 200_000 * 1.1, `stopped at ${budget.used} steps`);
    }
    const defs = Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`d${i}`, i === 9 ? { type: 'string' } : { type: 'object', properties: Object.fromEntries(Array.from({ length: 10 }, (_, k) => [`k${k}`, { $ref: `#/$defs/d${i + 1}` }])) }]));
    refusal(() => schema({ $defs: defs, $ref: '#/$defs/d0' }), 'unsupported', /steps to build/);
    // The largest constraint served in ordinary use fits with room to spare.
    const budget = new WorkBudget();
    compileConstraintUncached({ kind: 'json_object', whitespace: { kind: 'flexible' } }, budget);
    assert.ok(budget.used < CONSTRAINT_LIMITS.steps / 2, `json_object took ${budget.used} steps`);
  });

  test('the server compiles on a worker thread: the same automaton, refusals as ConstraintErrors, one compilation per constraint', async () => {
    const compiler = new ConstraintCompiler();
    try {
      const spec: ConstraintSpec = { kind: 'regex', regex: 'thread-(one|two)[0-9]{2}' };
      const [first, second] = await Promise.all([compiler.compile(spec), compiler.compile(spec)]);
      assert.equal(first, second, 'concurrent requests share one compilation');
      assert.deepEqual(first.dfa, compileConstraintUncached(spec).dfa);
      await assert.rejects(compiler.compile({ kind: 'regex', regex: '(a|b)*a(a|b){24}' }), (error: unknown) => error instanceof ConstraintError && /steps to build|automaton states/.test(error.message));
      await assert.rejects(compiler.compile({ kind: 'regex', regex: 'a'.repeat(regexLength + 1) }), ConstraintError);
    } finally {
      await compiler.close();
    }
  });
});
