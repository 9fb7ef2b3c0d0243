/**
 * kill -9 of the whole server in the middle of a training job, then a restart on the same data:
 * the job ends FAILED with one training_failed event, no half-written checkpoint is listed or left
 * on disk, and the queue keeps working.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { findEnginePython } from '../src/engine/python.ts';
import type { E2eServer } from './helpers/server.ts';
import { allEvents, sampleGroup, waitForJob } from './helpers/rollouts.ts';

const KEY = `sk-${'crash'.repeat(9)}`;

/** The server as its own process (so it can be killed), with a client shaped like the in-process harness. */
async function spawnServer(dataDir: string): Promise<{ child: ChildProcess; e2e: E2eServer }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts', 'serve'], {
    env: { ...process.env, DATA_DIR: dataDir, PORT: '0', BOOTSTRAP_API_KEY: KEY, LOG_LEVEL: 'warn', JOB_LEASE_MS: '2000', ENGINE_PYTHON: process.env.ENGINE_PYTHON ?? (await findEnginePython()) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let output = '';
    child.stdout!.on('data', (chunk) => {
      output += chunk;
      const match = /listening on (http:\/\/\S+)/.exec(output);
      if (match) resolve(match[1]);
    });
    child.on('exit', (code) => reject(new Error(`server exited with ${code}`)));
  });
  const api = async (method: string, route: string, body?: unknown) => {
    const response = await fetch(`${url}${route}`, {
      method,
      headers: { authorization: `Bearer ${KEY}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : null };
  };
  const e2e = { url, key: KEY, dataDir, api, server: undefined as never, close: async () => {} } satisfies E2eServer;
  return { child, e2e };
}

describe('crash recovery', () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'crash-'));
  let current: ChildProcess | undefined;
  after(() => {
    current?.kill('SIGKILL');
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  test('kill -9 during a job: FAILED with training_failed after restart, nothing half-written, queue still works', async () => {
    const first = await spawnServer(dataDir);
    current = first.child;
    const modelId = (await first.e2e.api('POST', '/v1/preview/models', { project: 'crash', name: 'm', base_model: 'builtin/tiny-chat' })).body.id;
    const group = await sampleGroup(first.e2e, 'local/crash/m', 'Say a word.', 2, (_, i) => i);
    const big = Array.from({ length: 40 }, () => group);
    const job = (await first.e2e.api('POST', '/v1/preview/training-jobs', { model_id: modelId, trajectory_groups: big, experimental_config: { packed_sequence_length: 32 } })).body;
    for (let tries = 0; tries < 400; tries += 1) {
      if ((await allEvents(first.e2e, job.id)).some((event) => event.type === 'gradient_step')) break;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    first.child.kill('SIGKILL');
    await new Promise((resolve) => first.child.once('exit', resolve));

    const second = await spawnServer(dataDir);
    current = second.child;
    const ended = await waitForJob(second.e2e, job.id, 30_000);
    assert.equal(ended.status, 'FAILED');
    assert.equal(ended.error.code, 'worker_lost');
    const events = await allEvents(second.e2e, job.id);
    assert.equal(events.filter((event) => event.type === 'training_failed' || event.type === 'training_ended').length, 1);
    assert.equal(events.at(-1)?.type, 'training_failed');
    assert.match(String(events.at(-1)?.data.error_message), /stopped before it finished/);

    const checkpoints = (await second.e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints`)).body.data;
    assert.deepEqual(checkpoints.map((c: { step: number }) => c.step), [0]);
    const folder = path.join(dataDir, 'models', modelId, 'checkpoints');
    const leftovers = fs.existsSync(folder) ? fs.readdirSync(folder) : [];
    assert.deepEqual(leftovers, [], 'no half-written checkpoint folder is left');

    const next = (await second.e2e.api('POST', '/v1/preview/training-jobs', { model_id: modelId, trajectory_groups: [group], experimental_config: {} })).body;
    const done = await waitForJob(second.e2e, next.id);
    assert.equal(done.status, 'COMPLETED');
    assert.equal(done.checkpoint_step, 1);
    second.child.kill('SIGTERM');
  });
});
