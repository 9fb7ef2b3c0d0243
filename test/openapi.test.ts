/**
 * /openapi.json is a valid OpenAPI 3.1 document generated from the route schemas, and every answer of a scripted session
 * against the real server and engine matches the response schema the document gives for its path, method and status.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { uploadArtifact } from './helpers/artifacts.ts';
import { sampleGroup, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

type OpenApi = {
  paths: Record<
    string,
    Record<string, { responses: Record<string, { content?: Record<string, { schema: object }> }> }>
  >;
};

/** The documented response schema for a concrete request, or undefined where the document gives none. */
function documentedSchema(doc: OpenApi, method: string, url: string, status: number): object | undefined {
  const path = url.split('?')[0];
  for (const [template, operations] of Object.entries(doc.paths)) {
    const pattern = new RegExp(`^${template.replace(/\{\*\}/g, '.+').replace(/\{[^}]+\}/g, '[^/]+')}$`);
    if (!pattern.test(path)) continue;
    const response = operations[method.toLowerCase()]?.responses[String(status)];
    if (response) return response.content?.['application/json']?.schema;
  }
  return undefined;
}

describe('OpenAPI document', () => {
  let e2e: E2eServer;
  let doc: OpenApi;
  before(async () => {
    e2e = await startE2eServer();
    doc = (await (await fetch(`${e2e.url}/openapi.json`)).json()) as OpenApi;
  });
  after(async () => {
    await e2e?.close();
  });

  test('validates as OpenAPI 3.1 and documents every API route, without the dashboard page', async () => {
    const result = await new Validator().validate(doc as unknown as Record<string, unknown>);
    assert.equal(result.valid, true, JSON.stringify(result.errors));
    assert.equal((doc as unknown as { openapi: string }).openapi, '3.1.0');
    for (const path of [
      '/v1/chat/completions',
      '/v1/completions',
      '/v1/responses',
      '/v1/responses/{id}',
      '/v1/messages',
      '/v1/messages/count_tokens',
      '/v1/models',
      '/metrics',
      '/v1/preview/models/{model_id}/checkpoints/{step}/adapter',
      '/v1/preview/models',
      '/v1/preview/training-jobs/{id}/events',
      '/v1/dashboard/jobs',
      '/api/v1/forward_backward',
      '/api/v1/asample',
      '/api/v1/retrieve_future',
      '/api/v1/training_runs/{run_id}/checkpoints',
    ])
      assert.ok(doc.paths[path], path);
    assert.equal(doc.paths['/'], undefined);
    assert.deepEqual((doc.paths['/v1/health'].get as unknown as { security: unknown[] }).security, []);
    const docs = await fetch(`${e2e.url}/docs`);
    assert.equal(docs.status, 200);
    assert.match(await docs.text(), /swagger/i);
    // Found by the fuzzer: the viewer's static files refused a path leaving their folder with a 500.
    const outside = await fetch(`${e2e.url}/docs/static/..%5C..%5Cwindows`);
    assert.equal(outside.status, 404, await outside.text());
  });

  test('a scripted session: every answer matches its documented response schema', async () => {
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormatsModule.default(ajv);
    const checked: string[] = [];
    const unchecked: string[] = [];
    const call = async (method: string, url: string, body?: unknown) => {
      const response = await e2e.api(method, url, body);
      const schema = documentedSchema(doc, method, url, response.status);
      if (schema) {
        const validate = ajv.compile(schema);
        assert.ok(validate(response.body), `${method} ${url} → ${response.status}: ${ajv.errorsText(validate.errors)}`);
        checked.push(`${method} ${url.split('?')[0]} ${response.status}`);
      } else {
        unchecked.push(`${method} ${url.split('?')[0]} ${response.status}`);
      }
      return response;
    };
    await call('GET', '/v1/health');
    await call('GET', '/v1/system-check');
    await call('GET', '/v1/preview/me');
    const model = (
      await call('POST', '/v1/preview/models', { project: 'oa', name: 'agent', base_model: 'builtin/tiny-chat' })
    ).body;
    await call('GET', `/v1/preview/models/${model.id}`);
    const name = `${model.entity}/oa/agent`;
    await call('POST', '/v1/chat/completions', {
      model: name,
      messages: [{ role: 'user', content: 'What is 2+3?' }],
      max_tokens: 4,
      seed: 1,
    });
    const stored = (await call('POST', '/v1/responses', { model: name, input: 'What is 2+3?', max_output_tokens: 4 }))
      .body;
    await call('GET', `/v1/responses/${stored.id}`);
    await call('DELETE', `/v1/responses/${stored.id}`);
    await call('POST', '/v1/messages/count_tokens', {
      model: name,
      messages: [{ role: 'user', content: 'What is 2+3?' }],
    });
    const group = await sampleGroup(e2e, name, 'What is 2+3?', 2, (_choice, index) => index);
    await call('POST', `/v1/preview/models/${model.id}/log`, { split: 'val', trajectory_groups: [group] });
    const job = (
      await call('POST', '/v1/preview/training-jobs', {
        model_id: model.id,
        trajectory_groups: [group],
        experimental_config: { learning_rate: 1e-3 },
      })
    ).body;
    await waitForJob(e2e, job.id);
    await call('GET', `/v1/preview/training-jobs/${job.id}`);
    await call('GET', `/v1/preview/training-jobs/${job.id}/events?limit=100`);
    await call('POST', `/v1/preview/training-jobs/${job.id}/cancel`);
    await call('GET', `/v1/preview/models/${model.id}/checkpoints`);
    await call('GET', `/v1/preview/models/by-name/${model.entity}/oa/agent`);
    await call('GET', `/v1/preview/models/${model.id}/retention`);
    await call('PUT', `/v1/preview/models/${model.id}/retention`, { keep_last: 5 });
    await call('POST', `/v1/preview/models/${model.id}/fork`, { name: 'agent-fork' });
    await call('GET', '/v1/models');
    await call('GET', `/v1/models/${name}:step1`);
    const upload = await uploadArtifact(e2e, `${model.entity}/oa/data`, {
      'train.jsonl': '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n',
    });
    assert.ok(
      ajv.validate(documentedSchema(doc, 'POST', `/v1/preview/artifacts/${model.entity}/oa/data`, 200)!, upload),
      ajv.errorsText(),
    );
    await call('GET', `/v1/preview/artifacts/${model.entity}/oa/data`);
    await call('GET', '/v1/dashboard/overview');
    await call('GET', '/v1/dashboard/models');
    await call('GET', `/v1/dashboard/models/${model.id}`);
    await call('GET', `/v1/dashboard/models/${model.id}/metrics`);
    await call('GET', `/v1/dashboard/models/${model.id}/trajectory-steps`);
    const trajectories = (await call('GET', `/v1/dashboard/models/${model.id}/trajectories?split=val`)).body;
    await call('GET', `/v1/dashboard/models/${model.id}/trajectories/${trajectories.data[0].id}`);
    await call('GET', '/v1/dashboard/jobs');
    await call('DELETE', `/v1/preview/models/${model.id}/checkpoints`, { steps: [0] });
    await call('DELETE', `/v1/preview/models/${model.id}`);
    await call('GET', `/v1/preview/models/${model.id}`);
    // Every answer of the session has a documented schema but the generating doors' (JSON or SSE) and the final 404's.
    assert.deepEqual(
      unchecked.map((line) => line.replace(/[0-9a-f-]{36}/g, '{id}')),
      ['POST /v1/chat/completions 200', 'POST /v1/responses 200', 'GET /v1/preview/models/{id} 404'],
    );
    assert.equal(checked.length, 31);
  });
});
