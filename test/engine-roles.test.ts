/**
 * Serving while training with separate engines, through the real HTTP API, engines and database:
 * chat streams while a job trains, a new checkpoint is served by a sampler at once, and killing a sampler or
 * the trainer with SIGKILL fails only what it was doing.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import type { RoleEngine } from '../src/engine/roles.ts';
import { streamChat } from './helpers/api.ts';
import { waitFor } from './helpers/poll.ts';
import { allEvents, jobAtItsFirstStep, sampleGroup, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const MODEL = 'local/roles/policy';
/** Many one-sequence rows, so a job takes many gradient steps (seconds on the tiny model). */
const MANY_STEPS = { packed_sequence_length: 64, learning_rate: 0.01 };

/** A streamed chat completion: its data payloads, in order, up to and including [DONE]. */
const stream = (e2e: E2eServer, body: Record<string, unknown>, onFirstChunk?: () => void) =>
  streamChat(
    e2e.url,
    e2e.key,
    { model: MODEL, messages: [{ role: 'user', content: 'Say something long.' }], ...body },
    onFirstChunk,
  );

function engineOf(e2e: E2eServer, role: RoleEngine['role']): RoleEngine {
  return e2e.server.engines?.all.find((engine) => engine.role === role) ?? assert.fail(`no ${role} engine`);
}

async function killAndWaitForRestart(engine: RoleEngine): Promise<void> {
  const pid = engine.supervisor.health().pid ?? assert.fail('no pid');
  process.kill(pid, 'SIGKILL');
  await waitFor('the engine to restart', () => engine.supervisor.health().pid !== pid, {
    timeoutMs: 60_000,
    intervalMs: 20,
  });
  await engine.supervisor.waitUntilReady();
}

describe('separate sampler and trainer engines', () => {
  let e2e: E2eServer;
  let modelId: string;
  let groups: Awaited<ReturnType<typeof sampleGroup>>[];

  before(async () => {
    e2e = await startE2eServer({ env: { ENGINES: 'separate' } });
    modelId = (
      await e2e.api('POST', '/v1/preview/models', { project: 'roles', name: 'policy', base_model: 'builtin/tiny-chat' })
    ).body.id;
    groups = [];
    for (const [g, prompt] of ['Name a colour.', 'Count to three.', 'Say hello.', 'Pick a number.'].entries()) {
      groups.push(await sampleGroup(e2e, MODEL, prompt, 4, (_, i) => i % 2, 10 * g));
    }
  });
  after(async () => {
    await e2e.close();
  });

  test('the system check lists a trainer and a sampler, each with its process and limits', async () => {
    const check = await e2e.api('GET', '/v1/system-check');
    assert.equal(check.status, 200, JSON.stringify(check.body));
    const engines = check.body.engine.engines as Record<string, any>[];
    assert.deepEqual(
      engines.map((engine) => engine.role),
      ['trainer', 'sampler'],
    );
    assert.notEqual(engines[0].pid, engines[1].pid);
    // The trainer yields the cores to the sampler (field 19 of /proc/PID/stat is the nice value).
    const nice = (pid: number) => Number(fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')[16]);
    assert.deepEqual([nice(engines[0].pid), nice(engines[1].pid)], [10, 0]);
    for (const engine of engines) {
      assert.equal(engine.state, 'ready');
      assert.equal(engine.limits.max_num_seqs, 32);
      assert.equal(engine.limits.max_num_batched_tokens, 2048);
    }
  });

  test('a job trains while chat requests stream without error; its checkpoint is served by the sampler at once', async () => {
    const job = (
      await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: modelId,
        trajectory_groups: groups,
        experimental_config: MANY_STEPS,
      })
    ).body;
    let streamedWhileTraining = 0;
    for (;;) {
      const status = (await e2e.api('GET', `/v1/preview/training-jobs/${job.id}`)).body.status;
      if (status !== 'QUEUED' && status !== 'RUNNING') break;
      const payloads = await stream(e2e, { max_tokens: 12, seed: streamedWhileTraining });
      assert.equal(payloads.at(-1), '[DONE]');
      for (const payload of payloads.slice(0, -1)) assert.equal(JSON.parse(payload).error, undefined, payload);
      if (status === 'RUNNING') streamedWhileTraining += 1;
    }
    const done = await waitForJob(e2e, job.id);
    assert.equal(done.status, 'COMPLETED', JSON.stringify(done.error));
    assert.ok(streamedWhileTraining >= 2, `only ${streamedWhileTraining} streams ran while the job trained`);

    // Served by the sampler at once, and different from step 0 (learning rate 0.01 moves the tiny model).
    const ask = (model: string) =>
      e2e.api('POST', '/v1/chat/completions', {
        model,
        messages: [{ role: 'user', content: 'Name a colour.' }],
        max_tokens: 8,
        temperature: 0,
        logprobs: true,
      });
    const trained = await ask(`${MODEL}:step${done.checkpoint_step}`);
    const base = await ask('builtin/tiny-chat'); // step 0: a fresh adapter is an exact no-op
    assert.equal(trained.status, 200, JSON.stringify(trained.body));
    // Greedy tokens of both; where they agree, the logprobs must have moved (the adapter is no longer a no-op).
    const entries = (body: any) => body.choices[0].logprobs.content as { token: string; logprob: number }[];
    const [after, before] = [entries(trained.body), entries(base.body)];
    let moved = 0;
    for (let t = 0; t < Math.min(after.length, before.length) && after[t].token === before[t].token; t += 1)
      moved = Math.max(moved, Math.abs(after[t].logprob - before[t].logprob));
    const sameTokens = after.map((entry) => entry.token).join() === before.map((entry) => entry.token).join();
    assert.ok(
      !sameTokens || moved > 1e-4,
      `the trained checkpoint samples exactly like step 0 (max logprob change ${moved})`,
    );
  });

  test('a prompt shared with an earlier request reuses its KV: usage reports the cached prompt tokens', async () => {
    const content = `Remember this list: ${Array.from({ length: 40 }, (_, i) => `item ${i}`).join(', ')}.`;
    const ask = (seed: number) =>
      e2e.api('POST', '/v1/chat/completions', {
        model: MODEL,
        messages: [{ role: 'user', content }],
        max_tokens: 2,
        seed,
      });
    const first = await ask(1);
    const second = await ask(2);
    assert.equal(second.status, 200);
    assert.equal(first.body.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(second.body.usage.prompt_tokens_details.cached_tokens, second.body.usage.prompt_tokens - 1);
  });

  test('kill -9 of the trainer fails the running job with training_failed; chat keeps answering and the next job works', async () => {
    const trainer = engineOf(e2e, 'trainer');
    const job = { id: await jobAtItsFirstStep(e2e, modelId, groups, MANY_STEPS) };
    await killAndWaitForRestart(trainer);
    const failed = await waitForJob(e2e, job.id);
    assert.equal(failed.status, 'FAILED');
    assert.match(failed.error.message, /engine .*exited/);
    const events = await allEvents(e2e, job.id);
    assert.equal(events.at(-1)?.type, 'training_failed');
    assert.equal(
      (
        await e2e.api('POST', '/v1/chat/completions', {
          model: MODEL,
          messages: [{ role: 'user', content: 'hi' }],
          max_tokens: 2,
        })
      ).status,
      200,
    );

    const next = (
      await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: modelId,
        trajectory_groups: groups.slice(0, 1),
        experimental_config: {},
      })
    ).body;
    assert.equal((await waitForJob(e2e, next.id)).status, 'COMPLETED');
  });

  test('kill -9 of a sampler during a stream: the client gets an error event, then the next request is served', async () => {
    const sampler = engineOf(e2e, 'sampler');
    const pid = sampler.supervisor.health().pid ?? assert.fail('no pid');
    const payloads = await stream(e2e, { max_tokens: 2000, ignore_eos: true }, () => process.kill(pid, 'SIGKILL'));
    assert.equal(payloads.at(-1), '[DONE]');
    const error = JSON.parse(payloads.at(-2)!).error;
    assert.ok(error, `no error event: ${payloads.at(-2)}`);
    assert.match(error.message, /engine .*exited/);
    await sampler.supervisor.waitUntilReady();
    const served = await e2e.api('POST', '/v1/chat/completions', {
      model: MODEL,
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
    });
    assert.equal(served.status, 200, JSON.stringify(served.body));
  });
});
