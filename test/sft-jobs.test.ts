/** SFT jobs through the real HTTP API and engine: ART's upload shape, bad data, schedules, and learning. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { uploadArtifact } from './helpers/artifacts.ts';
import { allEvents, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

/**
 * How long a job may take to end. A bound on waiting, not on speed (no test here measures speed): on a machine shared
 * with other work the engine's first job, which also loads the base model, took over a minute.
 */
const JOB_WAIT_MS = 600_000;

const line = (question: string, answer: string) =>
  JSON.stringify({
    messages: [
      { role: 'system', content: 'You are a helpful assistant.' },
      { role: 'user', content: question },
      { role: 'assistant', content: answer },
    ],
    tools: [
      {
        type: 'function',
        function: {
          name: 'lookup',
          description: 'Look something up',
          parameters: { type: 'object', properties: { q: { type: 'string' } } },
        },
      },
    ],
  });

describe('SFT jobs', () => {
  let e2e: E2eServer;
  let modelId: string;
  before(async () => {
    e2e = await startE2eServer();
    modelId = (
      await e2e.api('POST', '/v1/preview/models', { project: 'sft', name: 'student', base_model: 'builtin/tiny-chat' })
    ).body.id;
  });
  after(async () => {
    await e2e.close();
  });

  test("ART's upload shape (train.jsonl of {messages, tools}, URL :v0) trains and writes the next step", async () => {
    const data = `${Array.from({ length: 6 }, (_, i) => line(`Question ${i}?`, `Answer ${i}.`)).join('\n')}\n`;
    const artifact = await uploadArtifact(e2e, 'local/sft/art-shape', { 'train.jsonl': data });
    assert.equal(artifact.url, 'wandb-artifact:///local/sft/art-shape:v0');
    const submitted = await e2e.api('POST', '/v1/preview/sft-training-jobs', {
      model_id: modelId,
      training_data_url: artifact.url,
      config: { batch_size: 2, learning_rate: 1e-3 },
    });
    assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
    const job = await waitForJob(e2e, submitted.body.id, JOB_WAIT_MS);
    assert.equal(job.status, 'COMPLETED', JSON.stringify(job.error));
    assert.equal(job.type, 'sft');
    assert.equal(job.checkpoint_step, 1);
    const events = await allEvents(e2e, submitted.body.id);
    assert.deepEqual(
      events.map((event) => event.type),
      ['training_started', 'gradient_step', 'gradient_step', 'gradient_step', 'training_ended'],
    );
    assert.equal(events[0].data.num_sequences, 3);
    for (const event of events.filter((e) => e.type === 'gradient_step')) {
      for (const key of ['loss', 'sft_loss', 'grad_norm', 'learning_rate', 'num_trainable_tokens', 'tokens_per_second'])
        assert.equal(typeof event.data[key], 'number', key);
    }
  });

  test('a malformed line fails the job with the file and line number', async () => {
    const artifact = await uploadArtifact(e2e, 'local/sft/broken', {
      'train.jsonl': `${line('a', 'b')}\n${line('c', 'd')}\n{"messages": [oops\n`,
    });
    const submitted = await e2e.api('POST', '/v1/preview/sft-training-jobs', {
      model_id: modelId,
      training_data_url: artifact.url,
      config: { batch_size: 1 },
    });
    const job = await waitForJob(e2e, submitted.body.id, JOB_WAIT_MS);
    assert.equal(job.status, 'FAILED');
    assert.match(job.error.message, /train\.jsonl line 3/);
    const events = await allEvents(e2e, submitted.body.id);
    assert.equal(events.at(-1)?.type, 'training_failed');
    assert.match(String(events.at(-1)?.data.error_message), /line 3/);
  });

  test('a line nested thousands deep fails the job naming the line and the depth limit', async () => {
    const deep = `{"messages":[{"role":"user","content":"hi","extra":${'['.repeat(5000)}${']'.repeat(5000)}}]}`;
    const artifact = await uploadArtifact(e2e, 'local/sft/deep', { 'train.jsonl': `${line('a', 'b')}\n${deep}\n` });
    const submitted = await e2e.api('POST', '/v1/preview/sft-training-jobs', {
      model_id: modelId,
      training_data_url: artifact.url,
      config: { batch_size: 1 },
    });
    const job = await waitForJob(e2e, submitted.body.id, JOB_WAIT_MS);
    assert.equal(job.status, 'FAILED');
    assert.match(job.error.message, /train\.jsonl line 2: nests objects and arrays deeper than 64 levels/);
  });

  test("config.metric_logging (ART 0.5.20+): the job's metrics go to the run history at target_training_step, or nowhere when disabled", async () => {
    const artifact = await uploadArtifact(e2e, 'local/sft/logged', {
      'train.jsonl': [line('a', 'b'), line('c', 'd')].join('\n'),
    });
    const latest = async () =>
      (await e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints?limit=1&order=desc`)).body.data[0];
    const history = async () =>
      (await e2e.api('GET', `/v1/dashboard/models/${modelId}/metrics?limit=200`)).body.data as {
        step: number;
        source: string;
        metrics: Record<string, number>;
      }[];
    const run = async (metricLogging: unknown) => {
      const submitted = await e2e.api('POST', '/v1/preview/sft-training-jobs', {
        model_id: modelId,
        training_data_url: artifact.url,
        config: { batch_size: 2, metric_logging: metricLogging },
      });
      assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
      const job = await waitForJob(e2e, submitted.body.id, JOB_WAIT_MS);
      assert.equal(job.status, 'COMPLETED', JSON.stringify(job.error));
      return job.checkpoint_step as number;
    };
    const sftMetrics = (metrics: Record<string, unknown>) => {
      for (const key of ['loss', 'learning_rate', 'grad_norm', 'num_trainable_tokens'])
        assert.ok(Number.isFinite(metrics[key]), `${key} in ${JSON.stringify(metrics)}`);
    };

    // As ART sends it: its latest step + 1, the checkpoint this job writes.
    const target = (await latest()).step + 1;
    assert.equal(await run({ enabled: true, target_training_step: target }), target);
    sftMetrics((await latest()).metrics);
    const atTarget = (await history()).filter((row) => row.step === target);
    assert.deepEqual(
      atTarget.map((row) => row.source),
      ['train'],
    );
    sftMetrics(atTarget[0].metrics);

    // Another step named: the run history gets the row there; the checkpoint still carries its job's metrics.
    const elsewhere = await run({ enabled: true, target_training_step: 500 });
    sftMetrics((await latest()).metrics);
    const rows = await history();
    assert.equal(rows.filter((row) => row.step === elsewhere).length, 0);
    sftMetrics(rows.find((row) => row.step === 500)!.metrics);

    const silent = await run({ enabled: false });
    assert.equal((await history()).filter((row) => row.step === silent).length, 0);

    for (const bad of [
      { enabled: 'yes' },
      { target_training_step: 3 },
      { enabled: true, target_training_step: 0 },
      { enabled: true, target_training_step: 1.5 },
      { enabled: true, every: 2 },
      7,
    ]) {
      const response = await e2e.api('POST', '/v1/preview/sft-training-jobs', {
        model_id: modelId,
        training_data_url: artifact.url,
        config: { metric_logging: bad },
      });
      assert.equal(response.status, 422, JSON.stringify(bad));
      assert.deepEqual(
        response.body.detail[0].loc.slice(0, 3),
        ['body', 'config', 'metric_logging'],
        JSON.stringify(response.body.detail),
      );
    }
  });

  test('refused at submit: a schedule of the wrong length, a missing artifact, another scheme, unknown config keys', async () => {
    const artifact = await uploadArtifact(e2e, 'local/sft/sched', {
      'train.jsonl': [line('a', 'b'), line('c', 'd'), line('e', 'f')].join('\n'),
    });
    const wrong = await e2e.api('POST', '/v1/preview/sft-training-jobs', {
      model_id: modelId,
      training_data_url: artifact.url,
      config: { batch_size: 2, learning_rate: [1e-3, 1e-3, 1e-3] },
    });
    assert.equal(wrong.status, 422);
    assert.deepEqual(wrong.body.detail[0].loc, ['body', 'config', 'learning_rate']);
    const negative = await e2e.api('POST', '/v1/preview/sft-training-jobs', {
      model_id: modelId,
      training_data_url: artifact.url,
      config: { batch_size: 2, learning_rate: [1e-3, -1e-3] },
    });
    assert.equal(negative.status, 422);
    // ART's linear schedule (train_sft_from_file) ends on a learning rate of 0.
    const right = await e2e.api('POST', '/v1/preview/sft-training-jobs', {
      model_id: modelId,
      training_data_url: artifact.url,
      config: { batch_size: 2, learning_rate: [1e-3, 0] },
    });
    assert.equal(right.status, 200);
    assert.equal((await waitForJob(e2e, right.body.id, JOB_WAIT_MS)).status, 'COMPLETED');

    for (const url of [
      'wandb-artifact:///local/sft/nothing:v0',
      'wandb-artifact:///local/sft/sched:v9',
      'https://example.com/data.jsonl',
      'wandb-artifact:///other-team/sft/sched:latest',
    ]) {
      const response = await e2e.api('POST', '/v1/preview/sft-training-jobs', {
        model_id: modelId,
        training_data_url: url,
      });
      assert.equal(response.status, 422, url);
      assert.deepEqual(response.body.detail[0].loc, ['body', 'training_data_url']);
    }
    const keys = await e2e.api('POST', '/v1/preview/sft-training-jobs', {
      model_id: modelId,
      training_data_url: artifact.url,
      experimental_config: { future_knob: 1, other: null },
    });
    assert.equal(keys.status, 422);
    assert.deepEqual(keys.body.detail[0].loc, ['body', 'experimental_config', 'future_knob']);
  });
});
