/**
 * Exactly once on the Tinker API: the official `tinker` SDK (pinned 0.38, run with $TINKER_PYTHON) trains one client
 * through a proxy that loses the answers of a forward_backward and of an optim_step after the server acted on them.
 * The SDK re-sends each with the same `seq_id`; the server must answer the first request's future and run nothing
 * twice, so the weights equal those of the same run without losses. Also over raw HTTP: a re-sent numbered request
 * gets the same future, and a number reused for a different request is refused. SQLite, and PostgreSQL when
 * TEST_DATABASE_URL is set.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BUILTIN_BASE_MODEL } from '../src/config.ts';
import { openStore } from '../src/store/db.ts';
import { httpApi, tinkerKey } from './helpers/api.ts';
import { backends } from './helpers/database.ts';
import { type DroppingProxy, startDroppingProxy } from './helpers/dropping-proxy.ts';
import { runJsonScript } from './helpers/reference.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const TINKER_PYTHON = process.env.TINKER_PYTHON;
const skip = TINKER_PYTHON ? false : 'TINKER_PYTHON is not set (the python of a venv with tinker==0.38.0)';
const STEPS = 3;

interface Run {
  model_id: string;
  losses: number[];
  logprobs: number[][];
}

async function train(server: string, e2e: E2eServer): Promise<Run> {
  return runJsonScript<Run>(TINKER_PYTHON!, 'test/clients/tinker_resend.py', {
    server,
    api_key: e2e.key,
    base_model: BUILTIN_BASE_MODEL.id,
    tokenizer: path.join(BUILTIN_BASE_MODEL.path, 'tokenizer.json'),
    steps: STEPS,
  });
}

function tinkerPost(e2e: E2eServer, route: string, body: unknown): Promise<{ status: number; body: any }> {
  return httpApi(e2e.url, e2e.key, tinkerKey)('POST', route, body);
}

for (const backend of backends()) {
  describe(`a Tinker request re-sent after its answer was lost runs once, on ${backend.name}${skip ? ` — skipped: ${skip}` : ''}`, {
    skip,
  }, () => {
    let database: Awaited<ReturnType<typeof backend.create>>;
    let e2e: E2eServer;
    let proxy: DroppingProxy;
    let direct: Run;
    let proxied: Run;

    before(async () => {
      database = await backend.create();
      e2e = await startE2eServer({ databaseUrl: database.databaseUrl });
      // The first forward_backward's answer (protobuf) and the second optim_step's answer (JSON) are lost.
      proxy = await startDroppingProxy(e2e.url, { '/api/v1/forward_backward': [1], '/api/v1/optim_step': [2] });
      const started = Date.now();
      proxied = await train(proxy.url, e2e);
      const between = Date.now();
      direct = await train(e2e.url, e2e);
      console.log(
        `through the proxy: ${((between - started) / 1000).toFixed(1)}s, direct: ${((Date.now() - between) / 1000).toFixed(1)}s`,
      );
    });
    after(async () => {
      await proxy?.close();
      await e2e?.close();
      await database?.drop();
    });

    test('the SDK re-sent both requests whose answers were lost', () => {
      assert.deepEqual(proxy.dropped, ['/api/v1/forward_backward#1', '/api/v1/optim_step#2']);
      assert.equal(
        proxy.seen.get('/api/v1/forward_backward'),
        STEPS + 2,
        'the steps, the final forward and one re-send',
      );
      assert.equal(proxy.seen.get('/api/v1/optim_step'), STEPS + 1);
    });

    test('the server ran each request once: the weights equal those of the run without losses', async () => {
      assert.notEqual(proxied.model_id, direct.model_id);
      assert.deepEqual(proxied.losses, direct.losses);
      assert.deepEqual(proxied.logprobs, direct.logprobs);
      const store = openStore({ databaseUrl: database.databaseUrl, dataDir: e2e.dataDir });
      try {
        const principal = await e2e.server.services.auth.authenticate(`Bearer ${e2e.key}`);
        const { model } = await e2e.server.services.tinker.models.owned(principal, proxied.model_id);
        const rows = await store.db
          .selectFrom('tinker_futures')
          .select('kind')
          .where('model_id', '=', model.id)
          .execute();
        const kinds = rows.map((row) => row.kind);
        assert.equal(kinds.filter((kind) => kind === 'forward_backward').length, STEPS, JSON.stringify(kinds));
        assert.equal(kinds.filter((kind) => kind === 'optim_step').length, STEPS, JSON.stringify(kinds));
      } finally {
        await store.close();
      }
    });

    test('over raw HTTP: a re-sent numbered request answers the same future; the number on another request is a 400', async () => {
      const body = {
        model_id: direct.model_id,
        seq_id: 1000,
        adam_params: { learning_rate: 1e-3, beta1: 0.9, beta2: 0.95, eps: 1e-12 },
      };
      const first = await tinkerPost(e2e, '/api/v1/optim_step', body);
      const again = await tinkerPost(e2e, '/api/v1/optim_step', body);
      assert.equal(first.status, 200, JSON.stringify(first.body));
      assert.equal(again.body.request_id, first.body.request_id);
      const changed = await tinkerPost(e2e, '/api/v1/optim_step', {
        ...body,
        adam_params: { ...body.adam_params, learning_rate: 1 },
      });
      assert.equal(changed.status, 400, JSON.stringify(changed.body));
      assert.match(
        JSON.stringify(changed.body),
        /seq_id 1000 of model .* was already used by a different request \(optim_step\)/,
      );
      // seq_id 1 of this client was its first forward_backward.
      const reused = await tinkerPost(e2e, '/api/v1/save_weights', { model_id: direct.model_id, seq_id: 1 });
      assert.equal(reused.status, 400, JSON.stringify(reused.body));
      assert.match(JSON.stringify(reused.body), /already used by a different request \(forward_backward\)/);
      // Numbers are per training client: the other client's seq_id 1000 is a request of its own.
      const other = await tinkerPost(e2e, '/api/v1/optim_step', { ...body, model_id: proxied.model_id });
      assert.notEqual(other.body.request_id, first.body.request_id);
    });

    test('a re-sent create_model answers the first one, without a second model', async () => {
      const session = await tinkerPost(e2e, '/api/v1/create_session', { sdk_version: '0.38.0' });
      const body = {
        session_id: session.body.session_id,
        model_seq_id: 0,
        base_model: BUILTIN_BASE_MODEL.id,
        lora_config: { rank: 2 },
      };
      const first = await tinkerPost(e2e, '/api/v1/create_model', body);
      const again = await tinkerPost(e2e, '/api/v1/create_model', body);
      assert.equal(first.status, 200, JSON.stringify(first.body));
      assert.deepEqual(again.body, first.body);
    });
  });
}
