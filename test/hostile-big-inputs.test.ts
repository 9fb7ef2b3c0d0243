/**
 * Requests of many megabytes, as a hostile or merely generous client sends them, against the real server in its own
 * process (the tiny model, SQLite): each is answered (200, or a 4xx naming what is wrong), and /v1/health keeps
 * answering while it is parsed, checked and stored, because the body is parsed on a worker thread
 * (src/http/large-body.ts) and rows are written in chunks with turns of the event loop between them. Health is
 * sampled from a thread of the test's own; the same parsing and checking is timed here on this process's loop, so
 * that each figure is judged against what the request would have held the loop for, on this machine at its load.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BUILTIN_BASE_MODEL } from '../src/config.ts';
import { LOG_BODY, RL_JOB_BODY } from '../src/http/body-tasks.ts';
import { parseJsonText } from '../src/http/json-body.ts';
import type { BodyTask } from '../src/http/large-body.ts';
import { boundedValidatorCompiler } from '../src/http/validation.ts';
import { SAMPLE_BODY } from '../src/tinker/body-tasks.ts';
import { bearerKey, tinkerKey } from './helpers/api.ts';
import { type HealthFigures, machineLoad, sampleHealth } from './helpers/health-sampler.ts';
import { TINY_MODEL_ENV } from './helpers/server.ts';
import { type ServerProcess, spawnServerProcess } from './helpers/server-process.ts';

const KEY = `sk-${'big'.repeat(14)}x`;

/** A protobuf length-delimited field (the Tinker SDK's forward_backward wire), its lengths as varints. */
function field(number: number, payload: Buffer): Buffer {
  const varint = (value: number) => {
    const bytes: number[] = [];
    let rest = value;
    for (; rest >= 128; rest = Math.floor(rest / 128)) bytes.push((rest % 128) | 0x80);
    bytes.push(rest);
    return Buffer.from(bytes);
  };
  return Buffer.concat([varint((number << 3) | 2), varint(payload.length), payload]);
}

/** What the server did on its loop for a body before it moved to the worker thread: parse, check, prepare. */
function onLoopMs<P, O>(task: BodyTask<P, O>, text: string, options: O): number {
  const validate = boundedValidatorCompiler()({ schema: task.schema, method: 'POST', url: '', httpPart: 'body' });
  const started = performance.now();
  const body = parseJsonText(text);
  assert.equal(validate(body), true);
  task.prepare(body as never, options);
  return performance.now() - started;
}

const message = (i: number) => ({ role: i % 2 ? 'assistant' : 'user', content: `message ${i}: ${'word '.repeat(3)}` });
const trajectory = (i: number, messages = 2) => ({
  messages_and_choices: Array.from({ length: messages }, (_, m) => message(i + m)),
  reward: i % 3,
  metrics: { turns: messages, correct: i % 2 === 0 },
});
const groups = (count: number) =>
  Array.from({ length: count }, (_, g) => ({ trajectories: [trajectory(g), trajectory(g + 1)], exceptions: [] }));

describe('big inputs against the real server (its own process)', () => {
  let server: ServerProcess;
  let dataDir: string;
  let idle: HealthFigures;
  const figures: string[] = [];
  const post = (route: string, body: string, headers = bearerKey(KEY)) =>
    fetch(`${server.url}${route}`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body,
    });
  const createModel = async (name: string) => {
    const response = await post(
      '/v1/preview/models',
      JSON.stringify({ project: 'big', name, base_model: BUILTIN_BASE_MODEL.id }),
    );
    assert.equal(response.status, 200);
    return ((await response.json()) as { id: string }).id;
  };

  /** Sends the request while health is sampled; the figures are recorded against idle and the on-loop time. */
  async function measured(label: string, send: () => Promise<Response>, loopMs: number) {
    const sampler = sampleHealth(server.url);
    const started = performance.now();
    const response = await send();
    const text = await response.text();
    const took = performance.now() - started;
    const busy = await sampler.stop();
    figures.push(
      `${label}: ${response.status} in ${took.toFixed(0)} ms; health p99 ${busy.p99.toFixed(0)} ms (max ${busy.max.toFixed(0)}, ${busy.polls} polls) = ${(busy.p99 / idle.p99).toFixed(1)}× idle; the same parsing on a loop ${loopMs.toFixed(0)} ms; ${machineLoad()}`,
    );
    console.log(figures.at(-1));
    // Health answers within ten times its idle p99 (100 ms at least): before the body left the loop, 30 to 75 times.
    assert.ok(busy.p99 < Math.max(10 * idle.p99, 100), figures.at(-1));
    return { status: response.status, text };
  }

  before(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'big-inputs-'));
    server = await spawnServerProcess({ dataDir, key: KEY, env: TINY_MODEL_ENV });
    const sampler = sampleHealth(server.url);
    await new Promise((resolve) => setTimeout(resolve, 2000));
    idle = await sampler.stop();
    console.log(
      `idle health: p50 ${idle.p50.toFixed(1)} ms, p99 ${idle.p99.toFixed(1)} ms (${idle.polls} polls); ${machineLoad()}`,
    );
  });
  after(async () => {
    await server?.stop();
    fs.rmSync(dataDir, { recursive: true, force: true });
    console.log(figures.join('\n'));
  });

  test('/log with 10,000 groups (20,000 trajectories) is stored; health keeps answering', async () => {
    const modelId = await createModel('log-groups');
    const text = JSON.stringify({ split: 'train', trajectory_groups: groups(10_000) });
    const answer = await measured(
      '/log, 10,000 groups',
      () => post(`/v1/preview/models/${modelId}/log`, text),
      onLoopMs(LOG_BODY, text, undefined),
    );
    assert.equal(answer.status, 200, answer.text);
    assert.equal(JSON.parse(answer.text).metrics['train/num_trajectories'], 20_000);
  });

  test('/log with one trajectory of 100,000 messages is stored; health keeps answering', async () => {
    const modelId = await createModel('log-long');
    const text = JSON.stringify({ split: 'val', trajectory_groups: [{ trajectories: [trajectory(0, 100_000)] }] });
    const answer = await measured(
      '/log, one 100,000-message trajectory',
      () => post(`/v1/preview/models/${modelId}/log`, text),
      onLoopMs(LOG_BODY, text, undefined),
    );
    assert.equal(answer.status, 200, answer.text);
    assert.equal(JSON.parse(answer.text).metrics['val/num_trajectories'], 1);
  });

  test('an RL job of 10,000 groups is queued; health keeps answering', async () => {
    const modelId = await createModel('rl');
    const text = JSON.stringify({ model_id: modelId, trajectory_groups: groups(10_000) });
    const answer = await measured(
      'RL job, 10,000 groups',
      () => post('/v1/preview/training-jobs', text),
      onLoopMs(RL_JOB_BODY, text, { vocabSize: null, model: { entity: 'local', project: 'big', name: 'rl' } }),
    );
    assert.equal(answer.status, 200, answer.text);
    // Deleting the model cancels the job before it trains on 20,000 trajectories.
    const deleted = await fetch(`${server.url}/v1/preview/models/${modelId}`, {
      method: 'DELETE',
      headers: bearerKey(KEY),
    });
    assert.equal(deleted.status, 200);
  });

  test('Tinker forward of 130,000 token ids (JSON) and forward_backward of 200,000 (protobuf): futures that fail naming the context, never a 500', async () => {
    const session = await post('/api/v1/create_session', JSON.stringify({ sdk_version: '0.38.0' }), tinkerKey(KEY));
    const { session_id } = (await session.json()) as { session_id: string };
    const created = await post(
      '/api/v1/create_model',
      JSON.stringify({ session_id, model_seq_id: 0, base_model: BUILTIN_BASE_MODEL.id, lora_config: { rank: 8 } }),
      tinkerKey(KEY),
    );
    assert.equal(created.status, 200);
    const { model_id } = (await created.json()) as { model_id: string };
    const outcome = async (response: Response) => {
      const body = (await response.json()) as { request_id?: string };
      assert.equal(response.status, 200, JSON.stringify(body));
      for (;;) {
        const polled = await post(
          '/api/v1/retrieve_future',
          JSON.stringify({ request_id: body.request_id }),
          tinkerKey(KEY),
        );
        const answer = (await polled.json()) as Record<string, unknown>;
        if (answer.type !== 'try_again') return JSON.stringify(answer);
      }
    };
    const ids = Array.from({ length: 130_000 }, (_, i) => i % 90);
    const json = JSON.stringify({
      model_id,
      seq_id: 1,
      forward_input: {
        data: [
          {
            model_input: { chunks: [{ type: 'encoded_text', tokens: ids }] },
            loss_fn_inputs: { target_tokens: { data: ids, dtype: 'int64' } },
          },
        ],
        loss_fn: 'cross_entropy',
      },
    });
    assert.match(
      await outcome(await post('/api/v1/forward', json, tinkerKey(KEY))),
      /130000 tokens, more than the context length/,
    );
    const count = 200_000;
    const tokens = Buffer.from(Int32Array.from({ length: count }, (_, i) => i % 90).buffer);
    const targets = Buffer.from(BigInt64Array.from({ length: count }, (_, i) => BigInt(i % 90)).buffer);
    const tensor = Buffer.concat([field(1, targets), Buffer.from([3 << 3, 2])]);
    const datum = Buffer.concat([
      field(1, field(1, field(1, tokens))),
      field(2, Buffer.concat([field(1, Buffer.from('target_tokens')), field(2, tensor)])),
    ]);
    const protobuf = await fetch(`${server.url}/api/v1/forward_backward`, {
      method: 'POST',
      headers: { ...tinkerKey(KEY), 'content-type': 'application/x-protobuf' },
      body: Buffer.concat([
        field(1, Buffer.from(model_id)),
        Buffer.from([2 << 3, 2]),
        field(3, datum),
        field(4, Buffer.from('cross_entropy')),
      ]),
    });
    assert.match(await outcome(protobuf), /200000 tokens, more than the context length/);
  });

  test('Tinker asample with 900,000 prompt ids is a 400 naming the context length; health keeps answering', async () => {
    const text = JSON.stringify({
      base_model: BUILTIN_BASE_MODEL.id,
      prompt: { chunks: [{ type: 'encoded_text', tokens: Array.from({ length: 900_000 }, (_, i) => i % 100) }] },
      sampling_params: { max_tokens: 4 },
    });
    // Three in a row: one is over too soon for the health figures to mean much.
    const threeTimes = async () => {
      for (let i = 0; i < 2; i += 1) assert.equal((await post('/api/v1/asample', text, tinkerKey(KEY))).status, 400);
      return post('/api/v1/asample', text, tinkerKey(KEY));
    };
    const answer = await measured(
      'Tinker asample, 900,000 prompt ids (3 in a row)',
      threeTimes,
      onLoopMs(SAMPLE_BODY, text, undefined),
    );
    assert.equal(answer.status, 400, answer.text);
    assert.match(answer.text, /The prompt \(900000 tokens\) and max_tokens \(4\) exceed the context length/);
  });
});
