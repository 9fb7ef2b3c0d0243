/** Validation of huge invalid bodies stays bounded: the answer lists a capped number of problems, promptly. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { MAX_LISTED_PROBLEMS } from '../src/http/errors.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { backends } from './helpers/database.ts';

describe('validation of huge invalid bodies', () => {
  let t: TestApp;
  before(async () => {
    t = await startTestApp(backends()[0]);
  });
  after(async () => {
    await t.close();
  });

  test('a million wrong-typed steps: 422 with the first problems listed and the rest counted', async () => {
    const model = await t.call('POST', '/v1/preview/models', { project: 'p', name: 'm', base_model: 'test/base' });
    const started = performance.now();
    const response = await t.app.inject({
      method: 'DELETE',
      url: `/v1/preview/models/${model.body.id}/checkpoints`,
      headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' },
      payload: `{"steps":[${Array(1_000_000).fill('[]').join(',')}]}`,
    });
    const ms = performance.now() - started;
    assert.equal(response.statusCode, 422);
    const detail = JSON.parse(response.body).detail;
    assert.equal(detail.length, MAX_LISTED_PROBLEMS + 1);
    assert.deepEqual(detail[0].loc, ['body', 'steps']);
    assert.deepEqual(detail.at(-1).loc, ['body']);
    assert.match(detail.at(-1).msg, /^\d+ more problems are not listed$/);
    assert.ok(response.body.length < 100_000, `answer of ${response.body.length} bytes`);
    console.log(`1,000,000 invalid items: 422 in ${ms.toFixed(0)} ms`);
  });
});
