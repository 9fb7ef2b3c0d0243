/**
 * /metrics against the real server and engine: it parses strictly as Prometheus' text format, it is protected
 * by the API key unless METRICS_PUBLIC=on, and its counters and histograms move with the traffic sent.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startTestApp } from './helpers/app.ts';
import { backends } from './helpers/database.ts';
import { parsePrometheusText, type Sample, sampleSum } from './helpers/prometheus.ts';
import { sampleGroup, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

describe('/metrics with the real engine', () => {
  let e2e: E2eServer;
  let name: string;
  let modelId: string;
  const scrape = async (): Promise<Sample[]> => {
    const response = await fetch(`${e2e.url}/metrics`, { headers: { authorization: `Bearer ${e2e.key}` } });
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
    return parsePrometheusText(await response.text());
  };
  before(async () => {
    e2e = await startE2eServer();
    const model = (
      await e2e.api('POST', '/v1/preview/models', {
        project: 'metrics',
        name: 'agent',
        base_model: 'builtin/tiny-chat',
      })
    ).body;
    name = `${model.entity}/metrics/agent`;
    modelId = model.id;
  });
  after(async () => {
    await e2e?.close();
  });

  test('needs the API key by default', async () => {
    assert.equal((await fetch(`${e2e.url}/metrics`)).status, 401);
  });

  test('chat traffic moves the token counter, tokens/s, time to first token and the per-route latency histogram', async () => {
    const before = await scrape();
    const route = { method: 'POST', route: '/v1/chat/completions', status_code: '200' };
    const plain = await e2e.api('POST', '/v1/chat/completions', {
      model: name,
      messages: [{ role: 'user', content: 'Count: 1 2 3' }],
      max_tokens: 5,
      seed: 3,
    });
    assert.equal(plain.status, 200);
    const streamed = await fetch(`${e2e.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: name,
        messages: [{ role: 'user', content: 'Hello' }],
        max_tokens: 4,
        seed: 4,
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    const events = (await streamed.text())
      .split('\n\n')
      .filter((line) => line.startsWith('data: {'))
      .map((line) => JSON.parse(line.slice(6)));
    const streamedTokens = events.find((event) => event.usage)!.usage.completion_tokens as number;
    await e2e.api('GET', `/v1/preview/models/${modelId}`);

    const now = await scrape();
    const delta = (metric: string, labels: Record<string, string> = {}) =>
      sampleSum(now, metric, labels) - sampleSum(before, metric, labels);
    assert.equal(
      delta('agent_trainer_chat_completion_tokens_total', { stream: 'false' }),
      plain.body.usage.completion_tokens,
    );
    assert.equal(delta('agent_trainer_chat_completion_tokens_total', { stream: 'true' }), streamedTokens);
    assert.equal(delta('agent_trainer_chat_tokens_per_second_count'), 2);
    assert.ok(delta('agent_trainer_chat_tokens_per_second_sum') > 0);
    assert.equal(delta('agent_trainer_chat_time_to_first_token_seconds_count'), 1);
    assert.equal(delta('agent_trainer_http_request_duration_seconds_count', route), 2);
    assert.ok(delta('agent_trainer_http_request_duration_seconds_sum', route) > 0);
    // The route template, never the raw URL with the id in it.
    assert.equal(
      delta('agent_trainer_http_request_duration_seconds_count', {
        method: 'GET',
        route: '/v1/preview/models/:model_id',
        status_code: '200',
      }),
      1,
    );
    assert.ok(!now.some((sample) => sample.labels.route?.includes(modelId)));
  });

  test('engine memory and batch occupancy are sampled from the engine; job counts and durations follow a training job', async () => {
    const group = await sampleGroup(e2e, name, 'What is 2+3?', 2, (_choice, index) => index);
    const job = (
      await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: modelId,
        trajectory_groups: [group],
        experimental_config: { learning_rate: 1e-3 },
      })
    ).body;
    assert.equal((await waitForJob(e2e, job.id)).status, 'COMPLETED');
    const samples = await scrape();
    assert.equal(sampleSum(samples, 'agent_trainer_engine_up'), 1);
    assert.ok(sampleSum(samples, 'agent_trainer_engine_rss_bytes') > 10_000_000);
    assert.equal(sampleSum(samples, 'agent_trainer_engine_running_sequences'), 0);
    assert.ok(sampleSum(samples, 'agent_trainer_engine_adapter_slots') >= 1);
    assert.equal(sampleSum(samples, 'agent_trainer_jobs', { status: 'COMPLETED' }), 1);
    assert.equal(sampleSum(samples, 'agent_trainer_jobs', { status: 'QUEUED' }), 0);
    assert.equal(
      sampleSum(samples, 'agent_trainer_job_duration_seconds_count', { type: 'rl', status: 'COMPLETED' }),
      1,
    );
    assert.ok(sampleSum(samples, 'agent_trainer_job_duration_seconds_sum', { type: 'rl', status: 'COMPLETED' }) > 0);
  });
});

for (const backend of backends()) {
  test(`METRICS_PUBLIC=on answers without a key; without an engine it reports engine_up 0 (${backend.name})`, async () => {
    const t = await startTestApp(backend, { env: { METRICS_PUBLIC: 'on', ENGINE: 'off' } });
    try {
      await t.call('POST', '/v1/preview/models', { project: 'p', name: 'm', base_model: 'test/base' });
      const response = await t.app.inject({ method: 'GET', url: '/metrics' });
      assert.equal(response.statusCode, 200);
      const samples = parsePrometheusText(response.body);
      assert.equal(sampleSum(samples, 'agent_trainer_engine_up'), 0);
      assert.equal(
        sampleSum(samples, 'agent_trainer_http_request_duration_seconds_count', {
          method: 'POST',
          route: '/v1/preview/models',
          status_code: '200',
        }),
        1,
      );
    } finally {
      await t.close();
    }
  });
}

test('the strict reader refuses what Prometheus would refuse', () => {
  for (const bad of [
    'x 1',
    '# TYPE x counter\nx{a="b} 1\n',
    '# TYPE x counter\nx 1e\n',
    'y 1\n',
    '# TYPE 1x gauge\n',
    '# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_count 1\n',
  ]) {
    assert.throws(() => parsePrometheusText(bad), bad);
  }
  assert.deepEqual(parsePrometheusText('# HELP x a\n# TYPE x counter\nx{a="q\\"\\n",} 3\n'), [
    { name: 'x', labels: { a: 'q"\n' }, value: 3 },
  ]);
});
