/**
 * Validation of huge invalid bodies stays bounded: a large one is answered with its first problem, a small one
 * with every problem up to a cap, and neither holds the event loop or the heap.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { MAX_LISTED_PROBLEMS } from '../src/http/errors.ts';
import { FULL_REPORT_MAX_VALUES } from '../src/http/validation.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { backends } from './helpers/database.ts';

describe('validation of huge invalid bodies', () => {
  let t: TestApp;
  let route = '';
  before(async () => {
    t = await startTestApp(backends()[0]);
    const model = await t.call('POST', '/v1/preview/models', { project: 'p', name: 'm', base_model: 'test/base' });
    route = `/v1/preview/models/${model.body.id}/checkpoints`;
  });
  after(async () => {
    await t.close();
  });

  const deleteSteps = (items: string, count: number) =>
    t.app.inject({
      method: 'DELETE',
      url: route,
      headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' },
      payload: `{"steps":[${Array(count).fill(items).join(',')}]}`,
    });

  test('ten million wrong-typed items: 422 naming the first problem, promptly', async () => {
    const started = performance.now();
    const response = await deleteSteps('[]', 10_000_000);
    const ms = performance.now() - started;
    assert.equal(response.statusCode, 422);
    const detail = JSON.parse(response.body).detail;
    assert.equal(detail.length, 1);
    assert.deepEqual(detail[0].loc, ['body', 'steps']);
    console.log(`10,000,000 invalid items (30 MB): 422 in ${ms.toFixed(0)} ms`);
  });

  test('a body under the full-report size lists every problem up to the cap, then counts the rest', async () => {
    assert.ok(FULL_REPORT_MAX_VALUES > 5000);
    const response = await deleteSteps('"x"', 5000);
    assert.equal(response.statusCode, 422);
    const detail = JSON.parse(response.body).detail;
    assert.equal(detail.length, MAX_LISTED_PROBLEMS + 1);
    assert.deepEqual(detail[0], {
      loc: ['body', 'steps', 0],
      msg: 'Input should be of type integer',
      type: 'int_type',
    });
    assert.deepEqual(detail.at(-1), {
      loc: ['body'],
      msg: '4900 more problems are not listed',
      type: 'too_many_errors',
    });
  });

  test('a small bad body still reports every problem at once', async () => {
    const response = await t.call('POST', '/v1/preview/models', { project: 'a/b', name: '' });
    assert.equal(response.status, 422);
    assert.deepEqual(response.body.detail.map((d: { loc: string[] }) => d.loc.join('.')).sort(), [
      'body.base_model',
      'body.name',
      'body.project',
    ]);
  });
});
