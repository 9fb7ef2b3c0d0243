/**
 * One tenant's weights never touch another tenant's tokens, through the HTTP API and a sampler engine process.
 *
 * The import refuses an adapter holding NaN, so to get one into the sampler this test does what a damaged disk
 * would: it imports a valid adapter and overwrites its safetensors with NaN before the first use. The sampler runs
 * as a TCP engine this test starts with --skip-adapter-value-check (a test-only engine flag the server never
 * passes), so the adapter becomes resident instead of being refused at load. Entity B's temperature-0 answers on
 * the base model and on its own adapter are the same before, during and after six chats on A's NaN model run
 * beside them in the same batches (where B's answers once came back as NUL tokens at logprob −9999), and each of
 * those fails cleanly with a 422 and no tokens.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ADAPTER_WEIGHTS } from '../src/services/checkpoint-export.ts';
import { withValue } from './helpers/adapters.ts';
import { startTcpEngine, type TcpEngine } from './helpers/engine-process.ts';
import { sampleGroup, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const SECRET = 'isolation-test-secret';
const BASE = 'builtin/tiny-chat';
const ASK = [{ role: 'user', content: 'Count: 1 2 3' }];

type Answer = { status: number; tokens: string[]; logprobs: number[]; error: string | null };

describe('a NaN adapter resident in the sampler never reaches another entity’s tokens', () => {
  let sampler: TcpEngine;
  let e2e: E2eServer;
  let keyB: string;
  const chat = async (model: string, key: string, stream = false): Promise<Answer> => {
    const response = await e2e.api(
      'POST',
      '/v1/chat/completions',
      { model, messages: ASK, max_tokens: 8, temperature: 0, logprobs: true, ignore_eos: true, stream },
      key,
    );
    const content: { token: string; logprob: number }[] = response.body?.choices?.[0]?.logprobs?.content ?? [];
    return {
      status: response.status,
      tokens: content.map((c) => c.token),
      logprobs: content.map((c) => c.logprob),
      error: response.body?.error?.message ?? null,
    };
  };
  /** Entity B's answers: the base model and B's own adapter, three times each, all at once. */
  const answersOfB = () =>
    Promise.all([...Array(3).fill(BASE), ...Array(3).fill('tenant-b/iso/mine')].map((model) => chat(model, keyB)));

  before(async () => {
    sampler = await startTcpEngine({ secret: SECRET, args: ['--skip-adapter-value-check'] });
    e2e = await startE2eServer({ env: { SAMPLER_URLS: `tcp://127.0.0.1:${sampler.port}`, ENGINE_SECRET: SECRET } });
    keyB = (await e2e.server.services.auth.createKey('tenant-b')).key;
    // A trained adapter (so B's import is not a no-op), exported once and imported by both entities.
    const trained = (await e2e.api('POST', '/v1/preview/models', { project: 'iso', name: 'trained', base_model: BASE }))
      .body.id;
    const group = await sampleGroup(e2e, 'local/iso/trained', 'Count: 1 2 3', 2, (_choice, index) => index);
    const job = (
      await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: trained,
        trajectory_groups: [group],
        experimental_config: { learning_rate: 0.05 },
      })
    ).body;
    assert.equal((await waitForJob(e2e, job.id)).status, 'COMPLETED');
    const tar = Buffer.from(
      await (
        await fetch(`${e2e.url}/v1/preview/models/${trained}/checkpoints/1/adapter`, {
          headers: { authorization: `Bearer ${e2e.key}` },
        })
      ).arrayBuffer(),
    );
    const upload = async (key: string, name: string) => {
      const query = new URLSearchParams({ project: 'iso', name, base_model: BASE });
      const response = await fetch(`${e2e.url}/v1/preview/models/import?${query}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/x-tar' },
        body: new Uint8Array(tar),
      });
      assert.equal(response.status, 200, await response.clone().text());
      return ((await response.json()) as { id: string }).id;
    };
    await upload(keyB, 'mine');
    const poisoned = await upload(e2e.key, 'poisoned');
    // Before its first use: the sampler has never loaded it, so it reads these bytes.
    const weights = path.join(e2e.server.services.models.modelFolder(poisoned), 'checkpoints', '0', ADAPTER_WEIGHTS);
    fs.writeFileSync(weights, withValue(fs.readFileSync(weights), Number.NaN));
  });
  after(async () => {
    await e2e?.close();
    await sampler?.kill();
  });

  test('B answers the same before, during and after six chats on A’s NaN model, which fail alone with a 422', async () => {
    const beforeB = await answersOfB();
    for (const answer of beforeB) assert.equal(answer.status, 200, answer.error ?? '');
    assert.notDeepEqual(
      beforeB[0].tokens,
      beforeB[3].tokens,
      'B’s adapter changes its answer: the adapter row is exercised',
    );

    const poisonedChats = Array.from({ length: 6 }, () => chat('local/iso/poisoned', e2e.key));
    const [duringB, poisoned] = await Promise.all([answersOfB(), Promise.all(poisonedChats)]);
    const streamed = await fetch(`${e2e.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'local/iso/poisoned', messages: ASK, max_tokens: 8, stream: true }),
    });
    const events = await streamed.text();
    const afterB = await answersOfB();

    for (const answer of poisoned) {
      // Resident (the test flag let it past the load check): it failed at its first logits, before any token.
      assert.equal(answer.status, 422, JSON.stringify(answer));
      assert.match(answer.error!, /logits of this request are not finite .* no token was sampled/);
      assert.deepEqual(answer.tokens, []);
    }
    assert.equal(streamed.status, 200); // a stream's status is sent before the engine answers; the error is an event
    assert.match(events, /logits of this request are not finite/);
    assert.doesNotMatch(events, /"content":"[^"]/, 'a streamed chat on it carries no content');
    for (const [label, answers] of [
      ['during', duringB],
      ['after', afterB],
    ] as const) {
      answers.forEach((answer, i) => {
        assert.equal(answer.status, 200, `${label} ${i}: ${answer.error}`);
        assert.deepEqual(answer.tokens, beforeB[i].tokens, `${label} ${i}: B's tokens changed`);
        // Same tokens; logprobs equal up to batching's float rounding (a batch attends over its longest row's span).
        for (const [t, lp] of answer.logprobs.entries())
          assert.ok(
            Math.abs(lp - beforeB[i].logprobs[t]) < 1e-5,
            `${label} ${i} token ${t}: ${lp} vs ${beforeB[i].logprobs[t]}`,
          );
      });
    }
  });
});
