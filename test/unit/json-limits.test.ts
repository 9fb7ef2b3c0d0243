/** src/json-limits.ts: the non-recursive depth scan that refuses JSON nested too deep before anything parses it. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MAX_JSON_DEPTH, nestsDeeperThan, tooDeepUnder } from '../../src/json-limits.ts';

const nested = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);

test('depth counts objects and arrays alike; exactly the limit passes, one more does not', () => {
  assert.equal(nestsDeeperThan(nested(MAX_JSON_DEPTH)), false);
  assert.equal(nestsDeeperThan(nested(MAX_JSON_DEPTH + 1)), true);
  assert.equal(nestsDeeperThan('{"a": [{"b": [1]}]}', 4), false);
  assert.equal(nestsDeeperThan('{"a": [{"b": [1]}]}', 3), true);
  assert.equal(nestsDeeperThan('"just a string"', 0), false);
});

test('brackets inside strings, escaped quotes included, do not count', () => {
  assert.equal(nestsDeeperThan(JSON.stringify({ text: '[[[[{{{{' }), 1), false);
  assert.equal(nestsDeeperThan(JSON.stringify({ text: 'say \\"[[[[" twice' }), 1), false);
  // Two nested levels once a string's escaped quote is skipped correctly.
  assert.equal(nestsDeeperThan(JSON.stringify({ a: '\\"', b: [] }), 1), true);
});

test('names the top-level key the nesting happens under; null when the top level is no object', () => {
  assert.equal(tooDeepUnder(JSON.stringify({ model: 'm', messages: [[[['deep']]]] }), 3), 'messages');
  assert.equal(tooDeepUnder(JSON.stringify({ 'a:b': { c: [[1]] } }), 3), 'a:b');
  assert.equal(tooDeepUnder(nested(5), 3), null);
  assert.equal(tooDeepUnder(JSON.stringify({ model: 'm' }), 3), undefined);
});
