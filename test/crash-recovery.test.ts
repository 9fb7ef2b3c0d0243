/**
 * kill -9 of the whole server in the middle of work, then a restart on the same data, on SQLite and PostgreSQL:
 * an RL or SFT job ends FAILED with one training_failed event and no half-written checkpoint listed or left on
 * disk; a model killed mid-deletion is gone, and the restart sweeps its half-removed files; an upload cut off
 * mid-body is never listed while acknowledged versions stay whole; the queue keeps working.
 */
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { httpApi } from './helpers/api.ts';
import { uploadArtifact } from './helpers/artifacts.ts';
import { backends } from './helpers/database.ts';
import { waitFor } from './helpers/poll.ts';
import { allEvents, sampleGroup, waitForJob } from './helpers/rollouts.ts';
import type { E2eServer } from './helpers/server.ts';
import { serverEnv, spawnListening } from './helpers/server-process.ts';

const KEY = `sk-${'crash'.repeat(9)}`;

/** The server as its own process (so it can be killed), with a client shaped like the in-process harness. */
async function spawnServer(
  dataDir: string,
  databaseUrl: string | null,
  env: Record<string, string>,
): Promise<{ child: ChildProcess; e2e: E2eServer }> {
  const { child, url } = await spawnListening(
    await serverEnv({ dataDir, key: KEY, databaseUrl, env: { JOB_LEASE_MS: '2000', ...env } }),
  );
  const e2e = {
    url,
    key: KEY,
    dataDir,
    api: httpApi(url, KEY),
    server: undefined as never,
    close: async () => {},
  } satisfies E2eServer;
  return { child, e2e };
}

async function killHard(child: ChildProcess): Promise<void> {
  child.kill('SIGKILL');
  if (child.exitCode === null && child.signalCode === null) await new Promise((resolve) => child.once('exit', resolve));
}

const sftLine = (i: number) =>
  JSON.stringify({
    messages: [
      { role: 'user', content: `Question ${i}?` },
      { role: 'assistant', content: `Answer ${i}.` },
    ],
  });

for (const backend of backends()) {
  describe(`crash recovery on ${backend.name}`, () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'crash-'));
    let database: Awaited<ReturnType<typeof backend.create>>;
    // Every server started, so one a failed test leaves running is still killed at the end.
    const started = new Set<ChildProcess>();
    before(async () => {
      database = await backend.create();
    });
    after(async () => {
      for (const child of started) child.kill('SIGKILL');
      await database.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    });
    const start = async (env: Record<string, string> = {}) => {
      const server = await spawnServer(dataDir, database.databaseUrl, env);
      started.add(server.child);
      return server;
    };
    const checkpointLeftovers = (modelId: string) => {
      const folder = path.join(dataDir, 'models', modelId, 'checkpoints');
      return fs.existsSync(folder) ? fs.readdirSync(folder) : [];
    };

    /** After the restart: the job FAILED with worker_lost and one terminal event, and only step 0 exists anywhere. */
    async function assertCleanlyFailed(e2e: E2eServer, jobId: string, modelId: string): Promise<void> {
      const ended = await waitForJob(e2e, jobId, 30_000);
      assert.equal(ended.status, 'FAILED');
      assert.equal(ended.error.code, 'worker_lost');
      const events = await allEvents(e2e, jobId);
      assert.equal(
        events.filter((event) => event.type === 'training_failed' || event.type === 'training_ended').length,
        1,
      );
      assert.equal(events.at(-1)?.type, 'training_failed');
      assert.match(String(events.at(-1)?.data.error_message), /stopped before it finished/);
      const checkpoints = (await e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints`)).body.data;
      assert.deepEqual(
        checkpoints.map((c: { step: number }) => c.step),
        [0],
      );
      assert.deepEqual(checkpointLeftovers(modelId), [], 'no half-written checkpoint folder is left');
    }

    test('kill -9 during an RL job: FAILED with training_failed after restart, nothing half-written, queue still works', async () => {
      const first = await start();
      const modelId = (
        await first.e2e.api('POST', '/v1/preview/models', {
          project: 'crash',
          name: 'rl',
          base_model: 'builtin/tiny-chat',
        })
      ).body.id;
      const group = await sampleGroup(first.e2e, 'local/crash/rl', 'Say a word.', 2, (_, i) => i);
      const big = Array.from({ length: 40 }, () => group);
      const job = (
        await first.e2e.api('POST', '/v1/preview/training-jobs', {
          model_id: modelId,
          trajectory_groups: big,
          experimental_config: { packed_sequence_length: 32 },
        })
      ).body;
      await waitFor('a gradient step', async () =>
        (await allEvents(first.e2e, job.id)).some((event) => event.type === 'gradient_step'),
      );
      await killHard(first.child);

      const second = await start();
      await assertCleanlyFailed(second.e2e, job.id, modelId);
      const next = (
        await second.e2e.api('POST', '/v1/preview/training-jobs', {
          model_id: modelId,
          trajectory_groups: [group],
          experimental_config: {},
        })
      ).body;
      const done = await waitForJob(second.e2e, next.id);
      assert.equal(done.status, 'COMPLETED');
      assert.equal(done.checkpoint_step, 1);
      await killHard(second.child);
    });

    test('kill -9 during an SFT job: FAILED after restart, nothing half-written, its data intact, queue still works', async () => {
      const first = await start();
      const modelId = (
        await first.e2e.api('POST', '/v1/preview/models', {
          project: 'crash',
          name: 'sft',
          base_model: 'builtin/tiny-chat',
        })
      ).body.id;
      const data = Array.from({ length: 40 }, (_, i) => sftLine(i)).join('\n');
      const artifact = await uploadArtifact(first.e2e, 'local/crash/sft-data', { 'train.jsonl': data });
      const job = (
        await first.e2e.api('POST', '/v1/preview/sft-training-jobs', {
          model_id: modelId,
          training_data_url: artifact.url,
          config: { batch_size: 1 },
        })
      ).body;
      await waitFor('a gradient step', async () =>
        (await allEvents(first.e2e, job.id)).some((event) => event.type === 'gradient_step'),
      );
      await killHard(first.child);

      const second = await start();
      await assertCleanlyFailed(second.e2e, job.id, modelId);
      const download = await fetch(`${second.e2e.url}/v1/preview/artifacts/local/crash/sft-data:v0/files/train.jsonl`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      assert.equal(await download.text(), data);
      const small = await uploadArtifact(second.e2e, 'local/crash/sft-small', {
        'train.jsonl': [sftLine(1), sftLine(2)].join('\n'),
      });
      const next = (
        await second.e2e.api('POST', '/v1/preview/sft-training-jobs', {
          model_id: modelId,
          training_data_url: small.url,
          config: { batch_size: 2 },
        })
      ).body;
      const done = await waitForJob(second.e2e, next.id);
      assert.equal(done.status, 'COMPLETED', JSON.stringify(done.error));
      assert.equal(done.checkpoint_step, 1);
      await killHard(second.child);
    });

    test('kill -9 during model deletion: its rows go at once, files left half-removed are swept at restart', async () => {
      const first = await start({ ENGINE: 'off' });
      const create = async (name: string) =>
        (await first.e2e.api('POST', '/v1/preview/models', { project: 'crash', name, base_model: 'builtin/tiny-chat' }))
          .body.id as string;
      const keptId = await create('kept');
      const modelId = await create('doomed');
      // Enough files that their removal is still under way when the kill lands.
      const checkpoints = path.join(dataDir, 'models', modelId, 'checkpoints');
      for (let step = 1; step <= 20; step += 1) {
        fs.mkdirSync(path.join(checkpoints, String(step)), { recursive: true });
        for (let file = 0; file < 1000; file += 1)
          fs.writeFileSync(path.join(checkpoints, String(step), `shard-${file}`), 'x');
      }
      void first.e2e.api('DELETE', `/v1/preview/models/${modelId}`).catch(() => undefined);
      // Polled often: on an idle machine 20,000 files still go in well under a second.
      await waitFor(
        'the files to start going',
        () => !fs.existsSync(checkpoints) || fs.readdirSync(checkpoints).length < 20,
        { intervalMs: 2 },
      );
      await killHard(first.child);
      assert.ok(fs.existsSync(checkpoints), 'the kill landed while the files were being removed');

      const second = await start({ ENGINE: 'off' });
      assert.equal((await second.e2e.api('GET', `/v1/preview/models/${modelId}`)).status, 404);
      assert.equal((await second.e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints`)).status, 404);
      assert.equal(fs.existsSync(path.join(dataDir, 'models', modelId)), false, 'the restart swept what the kill left');
      assert.equal((await second.e2e.api('GET', `/v1/preview/models/${keptId}`)).status, 200);
      assert.deepEqual(
        (await second.e2e.api('GET', `/v1/preview/models/${keptId}/checkpoints`)).body.data.map(
          (c: { step: number }) => c.step,
        ),
        [0],
      );
      await killHard(second.child);
    });

    test('kill -9 during an artifact upload: the half-sent version is never listed, acknowledged ones stay whole', async () => {
      const first = await start({ ENGINE: 'off' });
      const kept = 'kept version\n'.repeat(1000);
      assert.equal((await uploadArtifact(first.e2e, 'local/crash/upload', { 'train.jsonl': kept })).version, 'v0');
      const { hostname, port } = new URL(first.e2e.url);
      const socket = net.connect({ host: hostname, port: Number(port) });
      socket.on('error', () => undefined);
      const head = `--cut\r\nContent-Disposition: form-data; name="file"; filename="train.jsonl"\r\nContent-Type: application/octet-stream\r\n\r\n`;
      socket.write(
        `POST /v1/preview/artifacts/local/crash/upload HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${KEY}\r\ncontent-type: multipart/form-data; boundary=cut\r\ncontent-length: ${head.length + 4_000_000}\r\n\r\n${head}`,
      );
      socket.write(Buffer.alloc(1_000_000, 120));
      const staging = path.join(dataDir, 'artifacts', '.staging');
      const stagedBytes = () =>
        fs.existsSync(staging)
          ? fs
              .readdirSync(staging)
              .reduce(
                (sum, id) =>
                  sum +
                  fs
                    .readdirSync(path.join(staging, id))
                    .reduce((s, f) => s + fs.statSync(path.join(staging, id, f)).size, 0),
                0,
              )
          : 0;
      await waitFor('the upload to be staged', () => stagedBytes() > 0);
      await killHard(first.child);
      socket.destroy();

      const second = await start({ ENGINE: 'off' });
      const versions = await second.e2e.api('GET', '/v1/preview/artifacts/local/crash/upload');
      assert.deepEqual(
        versions.body.data.map((v: { version: string }) => v.version),
        ['v0'],
      );
      const download = await fetch(`${second.e2e.url}/v1/preview/artifacts/local/crash/upload:v0/files/train.jsonl`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      assert.equal(await download.text(), kept);
      assert.equal(fs.existsSync(staging) ? fs.readdirSync(staging).length : 0, 0, 'the staging area was swept');
      assert.equal((await uploadArtifact(second.e2e, 'local/crash/upload', { 'train.jsonl': 'next\n' })).version, 'v1');
      await killHard(second.child);
    });
  });
}
