/**
 * Engines on other hosts: engine processes started by the test listen on loopback TCP with a
 * shared secret; the server reaches its trainer and sampler there. A wrong secret is refused and the
 * connection closed; a sampler that dies is reconnected to once it listens again, its in-flight stream
 * failed with an error event.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { EngineClient } from '../src/engine/client.ts';
import { EngineError } from '../src/engine/errors.ts';
import { ssePayloads } from './helpers/api.ts';
import { startTcpEngine, type TcpEngine } from './helpers/engine-process.ts';
import { sampleGroup, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const SECRET = 'loopback-test-secret-7f3a';
const MODEL = 'local/remote/policy';

describe('engines over TCP with a shared secret', () => {
  let trainer: TcpEngine | undefined;
  let sampler: TcpEngine | undefined;
  let e2e: E2eServer | undefined;

  before(async () => {
    [trainer, sampler] = await Promise.all([startTcpEngine({ secret: SECRET }), startTcpEngine({ secret: SECRET })]);
  });
  after(async () => {
    await e2e?.close();
    await Promise.all([trainer?.kill(), sampler?.kill()]);
  });

  test('a wrong or missing secret is refused and the connection closed; the engine then serves the right one', async () => {
    const wrong = await EngineClient.connect('127.0.0.1', trainer!.port, { secret: 'not-the-secret' });
    await assert.rejects(
      wrong.ready,
      (error: unknown) => error instanceof EngineError && error.code === 'unauthorized',
    );
    assert.equal(wrong.closed, true);

    const anonymous = await EngineClient.connect('127.0.0.1', trainer!.port);
    await assert.rejects(
      anonymous.request('stats', {}),
      (error: unknown) => error instanceof EngineError && error.code === 'unauthorized',
    );
    await assert.rejects(anonymous.ready);

    const right = await EngineClient.connect('127.0.0.1', trainer!.port, { secret: SECRET });
    assert.equal((await right.ready).event, 'ready');
    assert.deepEqual((await right.request('stats', {})).bases, []);
    right.close();
  });

  test('the server trains on the remote trainer and serves the checkpoint from the remote sampler', async () => {
    e2e = await startE2eServer({
      env: {
        TRAINER_URL: `tcp://127.0.0.1:${trainer!.port}`,
        SAMPLER_URLS: `tcp://127.0.0.1:${sampler!.port}`,
        ENGINE_SECRET: SECRET,
      },
    });
    const check = await e2e.api('GET', '/v1/system-check');
    assert.equal(check.status, 200, JSON.stringify(check.body));
    assert.deepEqual(
      check.body.engine.engines.map((engine: Record<string, unknown>) => [engine.role, engine.url, engine.pid]),
      [
        ['trainer', `tcp://127.0.0.1:${trainer!.port}`, null],
        ['sampler', `tcp://127.0.0.1:${sampler!.port}`, null],
      ],
    );
    const modelId = (
      await e2e.api('POST', '/v1/preview/models', {
        project: 'remote',
        name: 'policy',
        base_model: 'builtin/tiny-chat',
      })
    ).body.id;
    const group = await sampleGroup(e2e, MODEL, 'Name a colour.', 2, (_, i) => i);
    const job = (
      await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: modelId,
        trajectory_groups: [group],
        experimental_config: {},
      })
    ).body;
    const done = await waitForJob(e2e, job.id);
    assert.equal(done.status, 'COMPLETED', JSON.stringify(done.error));
    const served = await e2e.api('POST', '/v1/chat/completions', {
      model: `${MODEL}:step${done.checkpoint_step}`,
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 4,
    });
    assert.equal(served.status, 200, JSON.stringify(served.body));
  });

  test('a remote sampler that dies fails its stream cleanly; the server reconnects once it listens again', async () => {
    assert.ok(e2e, 'the previous test started the server');
    const response = await fetch(`${e2e.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'Go on.' }],
        max_tokens: 2000,
        ignore_eos: true,
        stream: true,
      }),
    });
    const payloads: string[] = [];
    for await (const payload of ssePayloads(response)) {
      if (payloads.length === 0 && sampler!.child.exitCode === null) await sampler!.kill();
      payloads.push(payload);
    }
    assert.equal(payloads.at(-1), '[DONE]');
    assert.match(JSON.parse(payloads.at(-2)!).error.message, /engine .*(exited|closed)/);

    sampler = await startTcpEngine({ port: sampler!.port, secret: SECRET });
    await e2e.server.waitForEngines();
    const served = await e2e.api('POST', '/v1/chat/completions', {
      model: MODEL,
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 4,
    });
    assert.equal(served.status, 200, JSON.stringify(served.body));
  });
});
