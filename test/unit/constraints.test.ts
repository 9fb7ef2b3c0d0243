/**
 * Constraints as the server states them, without server or engine: the request rules (one kind at a time,
 * vLLM's messages, the field named), the specification each request becomes (vLLM's structured_outputs shape,
 * layout as llguidance's `x-guidance` inside each schema), structural tags, the caps checked before anything
 * compiles, and the Lark grammars forced tool calls become in each family's format (markers that are added
 * tokens written as the token itself). What the engine makes of a specification is tested in
 * engine/tests/test_constraints.py and, end to end, in structured-outputs.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { ChatCompletionBody } from '../../src/api/chat.ts';
import { ConstraintRequestError } from '../../src/constraints/constraint-error.ts';
import { larkJson, markerSyntax } from '../../src/constraints/lark.ts';
import { CONSTRAINT_LIMITS } from '../../src/constraints/limits.ts';
import { constraintSpec, requestedConstraint } from '../../src/constraints/request.ts';
import { TOOL_CALL_FORMATS } from '../../src/conversation/tool-calls/index.ts';

const body = (fields: Record<string, unknown>) => ({ messages: [], ...fields }) as unknown as ChatCompletionBody;
const fails = (
  fields: Record<string, unknown>,
  param: string,
  message: RegExp,
  toolChoice: 'none' | 'required' | { name: string } = 'none',
) =>
  assert.throws(
    () => requestedConstraint(body(fields), toolChoice, true),
    (error: unknown) => error instanceof ConstraintRequestError && error.param === param && message.test(error.message),
  );
const specOf = (fields: Record<string, unknown>) => {
  const requested = requestedConstraint(body(fields), 'none', true);
  assert.ok(requested && 'spec' in requested);
  return requested.spec;
};
const BOUNDED = { whitespace_flexible: true, whitespace_pattern: '[\\x20\\x0A\\x0D\\x09]{1,16}' };
const COMPACT = { whitespace_flexible: false, item_separator: ', ', key_separator: ': ' };

describe('constraints as a request states them', () => {
  test("one kind at a time, with vLLM's messages and the field named", () => {
    fails(
      { structured_outputs: { regex: 'a', choice: ['a'] } },
      'structured_outputs',
      /only use one kind of constraints for structured outputs \('json', 'regex' or 'choice'\)/,
    );
    fails(
      { structured_outputs: { regex: 'a' }, response_format: { type: 'json_object' } },
      'structured_outputs',
      /only use one kind of structured outputs constraint but multiple are specified/,
    );
    fails(
      { structured_outputs: { disable_any_whitespace: true } },
      'structured_outputs',
      /must use one kind of structured outputs constraint but none/,
    );
    fails({ structured_outputs: { choice: [] } }, 'structured_outputs', /non-empty list/);
    fails({ structured_outputs: { grammar: '' } }, 'structured_outputs', /non-empty grammar/);
    fails({ structured_outputs: { grammar: '  ' } }, 'structured_outputs', /non-empty grammar/);
    fails({ response_format: { type: 'json_schema' } }, 'response_format', /'json_schema' field must be provided/);
    fails({ response_format: { type: 'xml' } }, 'response_format', /must be one of/);
    fails({ structured_outputs: { json: '{not json' } }, 'structured_outputs', /not valid JSON/);
    fails(
      { response_format: { type: 'json_object' } },
      'response_format',
      /either use constraints for structured outputs or tools, not both/,
      { name: 'f' },
    );
    assert.equal(requestedConstraint(body({ response_format: { type: 'text' } }), 'none', true), null);
    assert.equal(requestedConstraint(body({ structured_outputs: {} }), 'none', true), null);
  });

  test('every kind becomes its vLLM structured_outputs specification; JSON layout travels inside the schema', () => {
    assert.deepEqual(specOf({ structured_outputs: { regex: 'a+' } }), { regex: 'a+' });
    assert.deepEqual(specOf({ structured_outputs: { choice: ['x', 'y'] } }), { choice: ['x', 'y'] });
    assert.deepEqual(specOf({ structured_outputs: { grammar: 'start: "a"' } }), { grammar: 'start: "a"' });
    assert.deepEqual(
      specOf({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'integer' } } } }),
      { json: { type: 'integer', 'x-guidance': BOUNDED } },
    );
    assert.deepEqual(
      specOf({
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'integer' } } },
        structured_outputs: { disable_any_whitespace: true },
      }),
      {
        json: { type: 'integer', 'x-guidance': COMPACT },
        disable_any_whitespace: true,
      },
    );
    assert.deepEqual(
      specOf({
        structured_outputs: {
          json: '{"type": "object", "x-guidance": {"whitespace_flexible": false}}',
          whitespace_pattern: ' ?',
          disable_additional_properties: true,
        },
      }),
      {
        json: { type: 'object', 'x-guidance': { whitespace_flexible: false, whitespace_pattern: ' ?' } },
        disable_additional_properties: true,
      },
    );
    assert.deepEqual(specOf({ response_format: { type: 'json_object' } }), {
      json: { type: 'object', 'x-guidance': BOUNDED },
    }); // as vLLM's guidance backend reads it
    assert.deepEqual(specOf({ structured_outputs: { json: true } }), { json: { 'x-guidance': BOUNDED } });
  });

  test("structural tags: vLLM's triggers and structures, from response_format or as JSON text; other shapes refused", () => {
    const tag = { triggers: ['<f='], structures: [{ begin: '<f=a>', schema: { type: 'object' }, end: '</f>' }] };
    const expected = {
      structural_tag: {
        triggers: ['<f='],
        structures: [{ begin: '<f=a>', schema: { type: 'object', 'x-guidance': BOUNDED }, end: '</f>' }],
      },
    };
    assert.deepEqual(specOf({ response_format: { type: 'structural_tag', ...tag } }), expected);
    assert.deepEqual(specOf({ structured_outputs: { structural_tag: JSON.stringify(tag) } }), expected);
    fails(
      { response_format: { type: 'structural_tag', format: { type: 'const_string', value: 'a' } } },
      'response_format',
      /`format`/,
    );
    fails(
      {
        response_format: {
          type: 'structural_tag',
          triggers: ['<f='],
          structures: [{ begin: '<g>', schema: {}, end: '' }],
        },
      },
      'response_format',
      /starts with none of the triggers/,
    );
    fails(
      { response_format: { type: 'structural_tag', triggers: [], structures: [] } },
      'response_format',
      /triggers must be/,
    );
    fails({ structured_outputs: { structural_tag: '{' } }, 'structured_outputs', /not valid JSON/);
  });

  test('a required tool call replaces the others; a forced call stays its tools until a format writes it', () => {
    const tools = [
      { type: 'function', function: { name: 'f', parameters: { type: 'object' } } },
      { type: 'function', function: { name: 'g' } },
    ];
    const required = requestedConstraint(body({ tools, response_format: { type: 'json_object' } }), 'required', false);
    assert.deepEqual(required, {
      calls: {
        tools: [
          { name: 'f', arguments: larkJson({ type: 'object', 'x-guidance': BOUNDED }) },
          { name: 'g', arguments: larkJson({ type: 'object', 'x-guidance': BOUNDED }) },
        ],
        multiple: false,
      },
      param: 'tools',
    });
    const named = requestedConstraint(
      body({ tools, structured_outputs: { disable_any_whitespace: true } }),
      'required',
      true,
    );
    assert.ok(
      named &&
        'calls' in named &&
        named.calls.multiple &&
        named.calls.tools[0].arguments.includes('"item_separator":", "'),
    );
    assert.deepEqual(
      constraintSpec(named, () => 'start: "x"'),
      { grammar: 'start: "x"' },
    );
  });
});

describe('limits: caps checked before anything compiles, naming the field', () => {
  const { regexLength, grammarLength, schemaDepth, schemaNodes, choices, choiceCharacters, tools } = CONSTRAINT_LIMITS;
  const nested = (depth: number): unknown => {
    let value: unknown = { type: 'string' };
    for (let level = 1; level < depth; level += 1) value = { type: 'array', items: value };
    return value;
  };

  test('regexes and grammars: length at and past the cap', () => {
    assert.ok(specOf({ structured_outputs: { regex: 'a'.repeat(regexLength) } }));
    fails(
      { structured_outputs: { regex: 'a'.repeat(regexLength + 1) } },
      'structured_outputs',
      new RegExp(`more than ${regexLength} characters \\(this one has ${regexLength + 1}\\)`),
    );
    fails(
      { structured_outputs: { grammar: `start: "${'a'.repeat(grammarLength)}"` } },
      'structured_outputs',
      new RegExp(`grammar of more than ${grammarLength} characters`),
    );
  });

  test('schemas: depth and size, counted without recursion', () => {
    assert.ok(specOf({ structured_outputs: { json: nested(schemaDepth - 1) } }));
    fails({ structured_outputs: { json: nested(schemaDepth + 1) } }, 'structured_outputs', /nested more than/);
    fails(
      { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: nested(100_000) } } },
      'response_format',
      /nested more than/,
    );
    const wide = {
      type: 'object',
      properties: Object.fromEntries(Array.from({ length: schemaNodes }, (_, i) => [`p${i}`, { type: 'string' }])),
    };
    fails({ structured_outputs: { json: wide } }, 'structured_outputs', new RegExp(`more than ${schemaNodes} nodes`));
    fails(
      { tools: [{ type: 'function', function: { name: 'f', parameters: nested(100_000) } }] },
      'tools',
      /nested more than/,
      'required',
    );
  });

  test('choices and tools: counts and total size', () => {
    fails(
      { structured_outputs: { choice: Array.from({ length: choices + 1 }, (_, i) => String(i)) } },
      'structured_outputs',
      new RegExp(`more than ${choices} choices`),
    );
    fails(
      { structured_outputs: { choice: ['x'.repeat(choiceCharacters + 1)] } },
      'structured_outputs',
      new RegExp(`more than ${choiceCharacters} characters`),
    );
    const many = Array.from({ length: tools + 1 }, (_, i) => ({ type: 'function', function: { name: `f${i}` } }));
    fails({ tools: many }, 'tools', new RegExp(`more than ${tools} tools`), 'required');
  });
});

describe('forced calls as Lark grammars in each family format', () => {
  const calls = {
    tools: [
      { name: 'get_weather', arguments: larkJson({ type: 'object' }) },
      { name: 'get_time', arguments: larkJson(undefined) },
    ],
    multiple: true,
  };
  const added = new Map([
    ['<tool_call>', 151657],
    ['</tool_call>', 151658],
  ]);
  const marker = markerSyntax((text) => added.get(text));

  test('Hermes: the call between its marker tokens (added tokens by id), one or more joined by newlines', () => {
    const grammar = TOOL_CALL_FORMATS.hermes.forcedGrammar(calls, marker);
    assert.match(grammar, /^start: calls\ncalls: call \("\\n" call\)\*\ncall: call_0 \| call_1\n/);
    assert.match(
      grammar,
      /call_0: <\[151657\]> "\\n\{\\"name\\": \\"get_weather\\", \\"arguments\\": " arguments_0 "\}\\n" <\[151658\]>\n/,
    );
    assert.match(grammar, /arguments_1: %json \{"type":"object"\}\n$/);
    assert.match(
      TOOL_CALL_FORMATS.hermes.forcedGrammar(
        { ...calls, multiple: false },
        markerSyntax(() => undefined),
      ),
      /calls: call\n[\s\S]*call_0: "<tool_call>" /,
    );
  });

  test('Llama 3 JSON and Mistral: their separators, argument keys and wrapper', () => {
    const llama = TOOL_CALL_FORMATS.llama3_json.forcedGrammar(calls, marker);
    assert.match(llama, /calls: call \("; " call\)\*/);
    assert.match(llama, /call_0: "\{\\"name\\": \\"get_weather\\", \\"parameters\\": " arguments_0 "\}"/);
    const mistral = TOOL_CALL_FORMATS.mistral.forcedGrammar(
      calls,
      markerSyntax((text) => (text === '[TOOL_CALLS]' ? 5 : undefined)),
    );
    assert.match(mistral, /^start: <\[5\]> "\[" calls "\]"\ncalls: call \(", " call\)\*/);
    assert.match(mistral, /\\"arguments\\": " arguments_0 "\}"/);
  });
});
