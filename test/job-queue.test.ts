/** The durable queue on its own, on both databases, with a hand-driven clock: order, leases, reaping, cancel. */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import type { Clock } from '../src/clock.ts';
import { JOB_ERROR_CATALOGUE, JobError } from '../src/errors.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { backends } from './helpers/database.ts';

class ManualClock implements Clock {
  constructor(private time = Date.parse('2026-01-01T00:00:00Z')) {}
  now(): Date {
    return new Date(this.time);
  }
  advance(ms: number): void {
    this.time += ms;
  }
}

for (const backend of backends()) {
  describe(`job queue on ${backend.name}`, () => {
    let t: TestApp;
    const clock = new ManualClock();
    let modelA: string;
    let modelB: string;
    before(async () => {
      t = await startTestApp(backend, { clock });
      modelA = (await t.call('POST', '/v1/preview/models', { project: 'q', name: 'a', base_model: 'test/base' })).body
        .id;
      modelB = (await t.call('POST', '/v1/preview/models', { project: 'q', name: 'b', base_model: 'test/base' })).body
        .id;
    });
    after(async () => {
      await t.close();
    });

    const events = async (jobId: string) =>
      (await t.services.repositories.jobs.events(jobId, undefined, 100)).items.map((e) => [e.type, e.data] as const);

    test('jobs of one model run in submission order; other models interleave', async () => {
      const queue = t.services.queue;
      const a1 = await queue.enqueue({ modelId: modelA, type: 'rl', payload: { n: 1 } });
      clock.advance(1);
      const a2 = await queue.enqueue({ modelId: modelA, type: 'rl', payload: { n: 2 } });
      clock.advance(1);
      const b1 = await queue.enqueue({ modelId: modelB, type: 'rl', payload: { n: 3 } });
      assert.deepEqual(JSON.parse(fs.readFileSync(a1.payload_path, 'utf8')), { n: 1 });

      const first = await queue.claim('w1');
      const second = await queue.claim('w2');
      assert.equal(first?.id, a1.id);
      assert.equal(second?.id, b1.id, 'a2 waits for a1; b1 may run beside it');
      assert.equal(await queue.claim('w3'), undefined);
      assert.equal(first?.status, 'RUNNING');
      assert.equal(first?.attempts, 1);

      assert.equal(
        await queue.complete(a1.id, 'w2', { step: 1, checkpointId: 'x' }),
        false,
        'only the lease holder completes',
      );
      assert.equal(await queue.complete(a1.id, 'w1', { step: 1, checkpointId: 'c1' }), true);
      assert.equal(
        await queue.complete(a1.id, 'w1', { step: 1, checkpointId: 'c1' }),
        false,
        'a finished job stays finished',
      );
      assert.deepEqual(await events(a1.id), [['training_ended', { step: 1, checkpoint_id: 'c1' }]]);
      assert.equal((await queue.claim('w3'))?.id, a2.id);
      assert.equal(await queue.fail(a2.id, 'w3', new JobError('bad_training_data', 'broken data')), true);
      assert.equal(await queue.fail(b1.id, 'w2', new JobError('bad_training_data', 'x')), true);
      const failed = await t.services.repositories.jobs.findById(a2.id);
      assert.deepEqual(
        [failed?.status, failed?.error_code, failed?.error_message],
        ['FAILED', 'bad_training_data', 'broken data'],
      );
    });

    test('a lease that is not renewed expires and the reaper fails the job once', async () => {
      const queue = t.services.queue;
      const job = await queue.enqueue({ modelId: modelA, type: 'rl', payload: {} });
      assert.equal((await queue.claim('dead-worker'))?.id, job.id);
      clock.advance(10_000);
      assert.deepEqual(await queue.heartbeat(job.id, 'dead-worker'), { held: true, cancelRequested: false });
      clock.advance(15_000);
      assert.deepEqual(await queue.reap(), [], 'renewed 15 s ago: still held');
      clock.advance(10_000);
      assert.deepEqual(await queue.reap(), [job.id]);
      assert.deepEqual(await queue.reap(), []);
      const reaped = await t.services.repositories.jobs.findById(job.id);
      assert.equal(reaped?.status, 'FAILED');
      const [[type, data]] = await events(job.id);
      assert.equal(type, 'training_failed');
      assert.match(String(data.error_message), /stopped before it finished/);
      assert.equal(
        await queue.complete(job.id, 'dead-worker', { step: 9, checkpointId: 'late' }),
        false,
        'a reaped worker cannot complete',
      );
      assert.equal((await queue.heartbeat(job.id, 'dead-worker')).held, false);
    });

    test('cancel: a queued job ends at once, a running one is asked to stop', async () => {
      const queue = t.services.queue;
      const running = await queue.enqueue({ modelId: modelB, type: 'rl', payload: {} });
      const queued = await queue.enqueue({ modelId: modelB, type: 'rl', payload: {} });
      assert.equal((await queue.claim('w'))?.id, running.id);

      const cancelledQueued = await queue.cancel(queued.id);
      assert.equal(cancelledQueued?.status, 'CANCELLED');
      assert.deepEqual(await events(queued.id), [
        ['training_failed', { error_message: JOB_ERROR_CATALOGUE.cancelled.message }],
      ]);

      const asked = await queue.cancel(running.id);
      assert.equal(asked?.status, 'RUNNING');
      assert.deepEqual(await queue.heartbeat(running.id, 'w'), { held: true, cancelRequested: true });
      assert.equal(await queue.finishCancelled(running.id, 'w'), true);
      assert.equal((await t.services.repositories.jobs.findById(running.id))?.status, 'CANCELLED');
      assert.equal(await queue.claim('w'), undefined, 'the cancelled queued job is never claimed');
    });

    test('events page with a cursor, oldest first', async () => {
      const queue = t.services.queue;
      const job = await queue.enqueue({ modelId: modelA, type: 'rl', payload: {} });
      for (let step = 1; step <= 5; step += 1) await queue.emit(job.id, 'gradient_step', { step });
      const jobs = t.services.repositories.jobs;
      const first = await jobs.events(job.id, undefined, 2);
      assert.equal(first.hasMore, true);
      const rest = await jobs.events(job.id, first.items[1].id, 10);
      assert.deepEqual(
        rest.items.map((e) => e.data.step),
        [3, 4, 5],
      );
      assert.equal(rest.hasMore, false);
    });
  });
}
