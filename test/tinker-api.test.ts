/**
 * The official `tinker` SDK (pinned 0.38, run with $TINKER_PYTHON) against the real server, engine and database
 * (SQLite, and PostgreSQL when TEST_DATABASE_URL is set): test/clients/tinker_session.py creates LoRA training
 * clients on the built-in model and runs a supervised loop, an importance-sampling RL loop on samples from our own
 * sampling client, a save_state/load_state round trip, sampling from saved weights and the SDK's error paths. This
 * file checks what the SDK got, then reaches the same weights as ordinary checkpoints through the preview API and
 * chat completions, and restarts the server over a request still pending.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BUILTIN_BASE_MODEL, repoRoot } from '../src/config.ts';
import { tinkerAdapterKey } from '../src/engine/adapter-keys.ts';
import { newId } from '../src/ids.ts';
import { openStore } from '../src/store/db.ts';
import { TinkerRepository } from '../src/store/tinker-repository.ts';
import { RESTART_FAILURE } from '../src/tinker/futures.ts';
import { DOWN_PROJ_A, withValue } from './helpers/adapters.ts';
import { httpApi, tinkerKey } from './helpers/api.ts';
import { backends } from './helpers/database.ts';
import { waitFor } from './helpers/poll.ts';
import { runJsonScript } from './helpers/reference.ts';
import { sampleGroup, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const TINKER_PYTHON = process.env.TINKER_PYTHON;
/** tinker 0.16.0 (scripts/python/tinker-016.txt), put first on the path over .venv-tinker. */
const TINKER_016 =
  process.env.TINKER_016_PATH ?? [path.join(repoRoot, '.pyoverlay-tinker-016')].find((folder) => fs.existsSync(folder));
const skip = TINKER_PYTHON ? false : 'TINKER_PYTHON is not set (the python of a venv with tinker==0.38.0)';

/** POST to the Tinker API with the SDK's header, answering JSON (no protobuf Accept). */
function tinkerCall(e2e: E2eServer, route: string, body: unknown): Promise<{ status: number; body: any }> {
  return httpApi(e2e.url, e2e.key, tinkerKey)('POST', route, body);
}

/** The future's answer: retrieve_future holds each poll until it is ready or answers try_again. */
async function result(e2e: E2eServer, requestId: string): Promise<any> {
  return waitFor(
    `the future ${requestId}`,
    async () => {
      const polled = await tinkerCall(e2e, '/api/v1/retrieve_future', { request_id: requestId });
      assert.equal(polled.status, 200, JSON.stringify(polled.body));
      return polled.body.type === 'try_again' ? null : polled.body;
    },
    { timeoutMs: 300_000, intervalMs: 0 },
  );
}

/**
 * POSTs /api/v1/client/config on a keep-alive connection as the SDK's one-off config client does; says what the
 * server answered in `connection` and whether the socket then closed (a kept-alive one stays open here).
 */
function clientConfigConnection(
  e2e: E2eServer,
): Promise<{ status: number; connection: string | undefined; closed: boolean }> {
  const agent = new http.Agent({ keepAlive: true });
  return new Promise((resolve, reject) => {
    let closed = false;
    const request = http.request(
      `${e2e.url}/api/v1/client/config`,
      { method: 'POST', agent, headers: { 'x-api-key': `tml-${e2e.key}`, 'content-type': 'application/json' } },
      (response) => {
        response.resume();
        response.on('end', () => {
          setTimeout(() => {
            agent.destroy();
            resolve({ status: response.statusCode ?? 0, connection: response.headers.connection, closed });
          }, 1_000);
        });
      },
    );
    request.on('socket', (socket) => socket.once('close', () => (closed = true)));
    request.on('error', reject);
    request.end(JSON.stringify({ sdk_version: '0.38.0' }));
  });
}

const maxGap = (a: number[][], b: number[][]) =>
  Math.max(...a.flatMap((row, i) => row.map((value, j) => Math.abs(value - b[i][j]))));

for (const backend of backends()) {
  describe(`tinker SDK against the server on ${backend.name}${skip ? ` — skipped: ${skip}` : ''}`, { skip }, () => {
    let database: Awaited<ReturnType<typeof backend.create>>;
    let e2e: E2eServer;
    let session: Record<string, any>;
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tinker-'));
    const env = (): Record<string, string> => (database.databaseUrl ? { DATABASE_URL: database.databaseUrl } : {});

    before(async () => {
      database = await backend.create();
      e2e = await startE2eServer({ dataDir, env: env() });
      const other = await e2e.server.services.auth.createKey('tinker-other');
      const started = Date.now();
      session = await runJsonScript(TINKER_PYTHON!, 'test/clients/tinker_session.py', {
        server: e2e.url,
        api_key: e2e.key,
        other_key: other.key,
        base_model: BUILTIN_BASE_MODEL.id,
        tokenizer: path.join(BUILTIN_BASE_MODEL.path, 'tokenizer.json'),
      });
      console.log(`tinker session: ${((Date.now() - started) / 1000).toFixed(1)}s`);
    });
    after(async () => {
      await e2e?.close();
      await database?.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    });

    test('capabilities list the built-in model; the training client is ours with its LoRA rank', () => {
      assert.ok(session.capabilities.includes(BUILTIN_BASE_MODEL.id), JSON.stringify(session.capabilities));
      const { info, model_id } = session.supervised;
      assert.equal(info.model_id, model_id);
      assert.equal(info.lora_rank, 8);
      assert.equal(info.model_name, BUILTIN_BASE_MODEL.id);
    });

    test('the one-off client-config request closes its connection, so the SDK never closes a live socket from the wrong event loop', async () => {
      // tinker 0.38 drops that client with its connection open and the garbage collector closes it on the caller's
      // thread; that corrupted the SDK loop's socket watch and stalled a later request for the SDK's 60 s timeout.
      const answered = await clientConfigConnection(e2e);
      assert.equal(answered.status, 200);
      assert.equal(answered.connection, 'close');
      assert.ok(answered.closed, 'the client-config connection stayed open');
    });

    test('supervised cross_entropy lowers the loss, and the sampled answer from the saved weights changes', () => {
      const { losses, before, after } = session.supervised;
      const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
      assert.ok(mean(losses.slice(-3)) < 0.6 * mean(losses.slice(0, 3)), JSON.stringify(losses));
      assert.notDeepEqual(after, before);
    });

    test('importance_sampling at step 0: the trainer logprobs equal our sampler logprobs within 1e-4, and a step moves the loss', () => {
      const rl = session.reinforcement;
      assert.equal(rl.trainer_logprobs.length, 4);
      const gap = maxGap(rl.trainer_logprobs, rl.sampler_logprobs);
      console.log(`trainer/sampler logprob gap at step 0: ${gap.toExponential(2)}`);
      assert.ok(gap <= 1e-4, `gap ${gap}`);
      // Ratio 1 at step 0: the loss is minus the advantage-weighted sum, ±1 per token, half of each sign.
      assert.ok(Math.abs(rl.loss_step0) < 1e-3, String(rl.loss_step0));
      assert.ok(rl.loss_step1 < rl.loss_step0, `${rl.loss_step1} after ${rl.loss_step0}`);
      for (const loss of [rl.ppo, rl.other_losses.cispo, rl.other_losses.dro, rl.gspo])
        assert.ok(Number.isFinite(loss), JSON.stringify(rl));
    });

    test("stable_reinforce trains on the sampler's recorded logprobs at the sampled positions named by each datum's provenance", () => {
      const run = session.stable_reinforce;
      const skip = run.prompt_length - 1;
      let total = 0;
      run.elementwise_loss.forEach((loss: number[], d: number) => {
        // Prompt positions carry no loss; on policy every sampled token weighs 1: -A · logprob, with the trainer's
        // logprob equal to the recorded one, whatever the datum said (zeros).
        assert.deepEqual(loss.slice(0, skip), new Array(skip).fill(0));
        assert.ok(maxGap([run.trainer_logprobs[d].slice(skip)], [run.sampler_logprobs[d]]) <= 1e-4);
        loss.slice(skip).forEach((value, t) => {
          const expected = -run.advantages[d] * run.trainer_logprobs[d][skip + t];
          assert.ok(Math.abs(value - expected) < 1e-4, `datum ${d} token ${t}: ${value} vs ${expected}`);
        });
        total += loss.reduce((a, b) => a + b, 0);
      });
      assert.ok(Math.abs(total - run.loss) < 1e-3, `${total} vs ${run.loss}`);
      const { without_provenance, unknown_sequence, other_token } = run.errors;
      for (const [failure, pattern] of [
        [without_provenance, /stable_reinforce needs provenance/],
        [unknown_sequence, /names no sequence this key sampled/],
        [other_token, /is not the recorded sampled token/],
      ] as const) {
        assert.equal(failure?.type, 'BadRequestError', JSON.stringify(failure));
        assert.match(failure.message, pattern);
      }
    });

    test('sampling: stop token ids and stop strings end a sample on the token that completes them, a seed repeats, prompt logprobs cover the prompt', () => {
      const sampled = session.sampling;
      assert.equal(sampled.free.length, 6);
      assert.equal(sampled.free_stop_reason, 'length', JSON.stringify(sampled));
      const stopAt = sampled.free.indexOf(sampled.stop_id);
      assert.deepEqual(sampled.stopped, sampled.free.slice(0, stopAt + 1));
      assert.equal(sampled.stopped_reason, 'stop');
      // A stop string ends the sample after the token that completes it, wherever that string first appears.
      assert.equal(sampled.by_string_reason, 'stop');
      assert.ok(sampled.by_string_text.includes(sampled.stop_text), JSON.stringify(sampled));
      assert.ok(!sampled.by_string_text_before_last.includes(sampled.stop_text), JSON.stringify(sampled));
      assert.deepEqual(sampled.by_string, sampled.free.slice(0, sampled.by_string.length));
      assert.deepEqual(sampled.seeded[0], sampled.seeded[1]);
      assert.equal(sampled.seeded[0].length, 3);
      assert.equal(sampled.prompt_logprobs.length, sampled.prompt_length);
      assert.equal(sampled.prompt_logprobs[0], null);
      assert.ok(sampled.prompt_logprobs.slice(1).every((value: number) => Number.isFinite(value) && value <= 0));
      assert.deepEqual(sampled.scored, sampled.prompt_logprobs, 'compute_logprobs scores the prompt as sampling does');
      assert.deepEqual(sampled.scored_last_2, [
        ...new Array(sampled.prompt_length - 2).fill(null),
        ...sampled.prompt_logprobs.slice(-2),
      ]);
      assert.ok(session.reinforcement.trained_sample_length > 0, 'save_weights_and_get_sampling_client samples');
    });

    test('the REST client: weights info, checkpoint listings, runs by path, and deletion', () => {
      const { rest, supervised, reinforcement } = session;
      const runId = supervised.sampler_path.slice('tinker://'.length).split('/')[0];
      assert.deepEqual(rest.weights_info, { base_model: BUILTIN_BASE_MODEL.id, is_lora: true, lora_rank: 8 });
      assert.deepEqual(rest.checkpoints, [supervised.sampler_path]);
      assert.deepEqual(rest.run_by_path, { id: runId, last_sampler: supervised.sampler_path });
      assert.ok(
        rest.user_checkpoints.includes(supervised.sampler_path) &&
          rest.user_checkpoints.includes(reinforcement.sampler_path),
      );
      assert.ok(!rest.rl_after_delete.includes(reinforcement.sampler_path), JSON.stringify(rest.rl_after_delete));
      assert.equal(rest.sample_deleted?.type, 'NotFoundError', JSON.stringify(rest.sample_deleted));
    });

    test('unload_model frees a training client as a future; the model and its checkpoints stay', async () => {
      const tinkerId = session.errors.model_id;
      const unloaded = await tinkerCall(e2e, '/api/v1/unload_model', { model_id: tinkerId });
      assert.equal(unloaded.status, 200, JSON.stringify(unloaded.body));
      assert.deepEqual(await result(e2e, unloaded.body.request_id), { type: 'unload_model', model_id: tinkerId });
      assert.equal((await tinkerCall(e2e, '/api/v1/get_info', { model_id: tinkerId })).status, 200);
    });

    test('a training client whose adapter left the trainer fails one operation clearly, then goes on from its latest checkpoint', async () => {
      const tinkerId = session.errors.model_id;
      const adam = { learning_rate: 1e-3, beta1: 0.9, beta2: 0.95, eps: 1e-12 };
      const step = async () =>
        result(
          e2e,
          (await tinkerCall(e2e, '/api/v1/optim_step', { model_id: tinkerId, adam_params: adam })).body.request_id,
        );
      assert.equal((await step()).type, 'optim_step');
      const principal = await e2e.server.services.auth.authenticate(`Bearer ${e2e.key}`);
      const { model } = await e2e.server.services.tinker.models.owned(principal, tinkerId);
      // What an engine restart or an LRU eviction does to the trainer's copy.
      await e2e.server.services.runtime.trainer().request('drop_adapter', { adapter: tinkerAdapterKey(model.id) });
      const lost = await step();
      assert.equal(lost.category, 'user');
      assert.match(lost.error, /lost this training client's state/);
      assert.equal((await step()).type, 'optim_step');
    });

    test('save_state / load_state_with_optimizer round-trips bit-exactly: the next forward and the next step are identical, also in a client created from the state', () => {
      const state = session.save_and_load;
      assert.match(state.state_path, /^tinker:\/\/[0-9a-f-]{36}\/weights\/ckpt-a$/);
      assert.notDeepEqual(state.drifted, state.reference);
      assert.deepEqual(state.restored, state.reference);
      assert.deepEqual(state.after_restored_step, state.after_reference_step);
      // A new training client made from the same state (the SDK's create_training_client_from_state_with_optimizer).
      assert.deepEqual(state.cloned, state.reference);
    });

    test('forward_backward_custom (the SDK runs the loss client-side) with cross-entropy as its loss trains exactly as cross_entropy does', () => {
      const { builtin, custom } = session.custom_loss;
      assert.ok(Number.isFinite(custom.metrics.custom_nll), JSON.stringify(custom.metrics));
      assert.deepEqual(custom.logprobs, builtin.logprobs);
    });

    test('an optim_step at an absurd learning rate fails as diverged and leaves the training client exactly as it was', () => {
      const { diverged } = session;
      assert.match(diverged.error?.message ?? 'no error', /training diverged: the step would leave .* at index/);
      assert.deepEqual(diverged.unchanged, diverged.reference);
      // Weights, moments and step count all as before: the next good step lands where a twin's does.
      assert.deepEqual(diverged.after, diverged.twin_after);
      assert.notDeepEqual(diverged.after, diverged.reference);
    });

    test('load_weights and load_state of a checkpoint whose values went bad on disk fail as user errors naming the tensor', async () => {
      const tinkerId = session.diverged.model_id;
      const principal = await e2e.server.services.auth.authenticate(`Bearer ${e2e.key}`);
      const { model } = await e2e.server.services.tinker.models.owned(principal, tinkerId);
      const saves: { path: string; optimizer: boolean; folder: string }[] = [];
      for (const [route, optimizer] of [
        ['/api/v1/save_weights', true],
        ['/api/v1/save_weights_for_sampler', false],
      ] as const) {
        const saved = await result(
          e2e,
          (await tinkerCall(e2e, route, { model_id: tinkerId, path: `damaged-${optimizer}` })).body.request_id,
        );
        saves.push({
          path: saved.path,
          optimizer,
          folder: (await e2e.server.services.repositories.models.latestCheckpoint(model.id))!.adapterPath!,
        });
      }
      for (const { path: tinkerPath, optimizer, folder } of saves) {
        const weights = path.join(folder, 'adapter_model.safetensors');
        fs.writeFileSync(weights, withValue(fs.readFileSync(weights), Number.NaN, DOWN_PROJ_A, [3]));
        const loaded = await result(
          e2e,
          (await tinkerCall(e2e, '/api/v1/load_weights', { model_id: tinkerId, path: tinkerPath, optimizer })).body
            .request_id,
        );
        assert.equal(loaded.category, 'user', JSON.stringify(loaded));
        assert.match(loaded.error, /down_proj\.lora_A\.weight: value NaN at index \[0,3\]/);
      }
    });

    test('the SDK at 0.16 (fields left out of optim_step, a path-less save for sampling) trains and samples', {
      skip: !TINKER_016 && 'no .pyoverlay-tinker-016 (scripts/test.sh builds it)',
    }, async () => {
      const old = await runJsonScript<{ version: string; loss_before: number; loss_after: number; sampled: number[] }>(
        TINKER_PYTHON!,
        'test/clients/tinker_old_sdk.py',
        { server: e2e.url, api_key: e2e.key, base_model: BUILTIN_BASE_MODEL.id },
        { ...process.env, PYTHONPATH: TINKER_016! },
      );
      assert.equal(old.version, '0.16.0');
      // One step at the SDK's default betas and epsilon lowers the loss on the datum it trained on.
      assert.ok(old.loss_after < old.loss_before, JSON.stringify(old));
      assert.ok(old.sampled.length > 0);
    });

    test('bad input gets the SDK exception types, never a 500', () => {
      const { errors } = session;
      for (const name of ['unknown_loss', 'mismatched_lengths', 'outside_vocabulary', 'gspo_without_mask']) {
        assert.equal(errors[name]?.type, 'BadRequestError', `${name}: ${JSON.stringify(errors[name])}`);
      }
      assert.match(errors.unknown_loss.message, /no_such_loss/);
      assert.match(
        errors.gspo_without_mask.message,
        /data\[0\]: loss_fn_inputs\.sequence_ratio_mask is required by gspo/,
      );
      assert.match(errors.mismatched_lengths.message, /data\[0\]: loss_fn_inputs\.target_tokens has 6 values for 7/);
      assert.match(errors.outside_vocabulary.message, /token id 10000000 is outside the vocabulary/);
      for (const name of ['foreign_model', 'foreign_run', 'unknown_future'])
        assert.equal(errors[name]?.type, 'NotFoundError', `${name}: ${JSON.stringify(errors[name])}`);
      assert.ok(Number.isFinite(errors.good_after_errors), 'the training client still works');
    });

    test('the saved sampler weights are an ordinary checkpoint: listed, in the REST client, and served by chat completions', async () => {
      const runId = session.supervised.sampler_path.slice('tinker://'.length).split('/')[0];
      assert.ok(session.rest.training_runs.includes(runId));
      const model = await e2e.api('GET', `/v1/preview/models/${runId}`);
      assert.equal(model.status, 200);
      assert.equal(model.body.project, 'tinker');
      const listed = await e2e.api('GET', `/v1/preview/models/${runId}/checkpoints`);
      assert.deepEqual(
        listed.body.data.map((checkpoint: { step: number }) => checkpoint.step),
        [0, 1],
      );
      const runs = await fetch(`${e2e.url}/api/v1/training_runs/${runId}/checkpoints`, {
        headers: { 'x-api-key': `tml-${e2e.key}` },
      });
      const paths = (await runs.json()).checkpoints.map(
        (checkpoint: { tinker_path: string }) => checkpoint.tinker_path,
      );
      assert.deepEqual(paths, [`tinker://${runId}/sampler_weights/sft-final`]);

      const name = `${model.body.entity}/${model.body.project}/${model.body.name}`;
      const chat = await e2e.api('POST', '/v1/chat/completions', {
        model: `${name}:step1`,
        messages: [{ role: 'user', content: 'the sky is' }],
        temperature: 0,
        max_tokens: 6,
        logprobs: true,
        return_token_ids: true,
      });
      assert.equal(chat.status, 200, JSON.stringify(chat.body));
      // Every checkpoint also has a `step<N>` sampler path: sample it with the prompt chat completions rendered.
      const future = await tinkerCall(e2e, '/api/v1/asample', {
        model_path: `tinker://${runId}/sampler_weights/step1`,
        prompt: { chunks: [{ type: 'encoded_text', tokens: chat.body.prompt_token_ids }] },
        sampling_params: { temperature: 0, max_tokens: 6 },
        num_samples: 1,
      });
      assert.equal(future.status, 200, JSON.stringify(future.body));
      const sample = await result(e2e, future.body.request_id);
      const [sequence] = sample.sequences;
      const choice = chat.body.choices[0];
      assert.deepEqual(sequence.tokens, choice.token_ids);
      const chatLogprobs = choice.logprobs.content.map((entry: { logprob: number }) => entry.logprob);
      assert.ok(maxGap([sequence.logprobs], [chatLogprobs]) <= 1e-4);
      const base = await e2e.api('POST', '/v1/chat/completions', {
        model: BUILTIN_BASE_MODEL.id,
        messages: [{ role: 'user', content: 'the sky is' }],
        temperature: 0,
        max_tokens: 6,
        return_token_ids: true,
      });
      assert.notDeepEqual(base.body.choices[0].token_ids, choice.token_ids, 'the checkpoint is not the base model');

      // Deleting the model through the preview API takes the training client with it.
      assert.equal((await e2e.api('DELETE', `/v1/preview/models/${runId}`)).status, 200);
      assert.equal((await tinkerCall(e2e, '/api/v1/get_info', { model_id: session.supervised.model_id })).status, 404);
      assert.equal(
        (await tinkerCall(e2e, '/api/v1/weights_info', { tinker_path: session.supervised.sampler_path })).status,
        404,
      );
    });

    test('a checkpoint trained by a job has a sampler path: the Tinker API samples it, with the logprobs chat completions give', async () => {
      const model = (
        await e2e.api('POST', '/v1/preview/models', { project: 'jobs', name: 'rl', base_model: BUILTIN_BASE_MODEL.id })
      ).body;
      const name = `${model.entity}/jobs/rl`;
      const group = await sampleGroup(e2e, name, 'What is 2+3?', 2, (_choice, index) => index);
      const job = (
        await e2e.api('POST', '/v1/preview/training-jobs', {
          model_id: model.id,
          trajectory_groups: [group],
          experimental_config: { learning_rate: 1e-2 },
        })
      ).body;
      assert.equal((await waitForJob(e2e, job.id)).status, 'COMPLETED');
      const path = `tinker://${model.id}/sampler_weights/step1`;
      assert.deepEqual((await tinkerCall(e2e, '/api/v1/weights_info', { tinker_path: path })).body, {
        base_model: BUILTIN_BASE_MODEL.id,
        is_lora: true,
        lora_rank: 8,
      });
      const chat = await e2e.api('POST', '/v1/chat/completions', {
        model: `${name}:step1`,
        messages: [{ role: 'user', content: 'What is 2+3?' }],
        temperature: 0,
        max_tokens: 5,
        logprobs: true,
        return_token_ids: true,
      });
      const future = await tinkerCall(e2e, '/api/v1/asample', {
        model_path: path,
        prompt: { chunks: [{ type: 'encoded_text', tokens: chat.body.prompt_token_ids }] },
        sampling_params: { temperature: 0, max_tokens: 5 },
      });
      const [sequence] = (await result(e2e, future.body.request_id)).sequences;
      assert.deepEqual(sequence.tokens, chat.body.choices[0].token_ids);
      assert.ok(
        maxGap(
          [sequence.logprobs],
          [chat.body.choices[0].logprobs.content.map((entry: { logprob: number }) => entry.logprob)],
        ) <= 1e-4,
      );
    });

    test('a restart fails the futures still pending with a clear error; finished ones stay readable', async () => {
      const entityId = (await e2e.server.services.auth.authenticate(`Bearer ${e2e.key}`)).entityId;
      await e2e.close();
      // What a crash leaves: one request still pending, one finished.
      const store = openStore({ databaseUrl: database.databaseUrl, dataDir });
      const repository = new TinkerRepository(store.db);
      const now = new Date().toISOString();
      const row = {
        entity_id: entityId,
        model_id: null,
        result: null,
        error: null,
        category: null,
        created_at: now,
        finished_at: null,
        request_key: null,
        request_hash: null,
      };
      const pending = newId();
      const finished = newId();
      await repository.insertFuture({ ...row, id: pending, kind: 'sample', status: 'pending' });
      await repository.insertFuture({
        ...row,
        id: finished,
        kind: 'optim_step',
        status: 'complete',
        result: JSON.stringify({ type: 'optim_step', metrics: {} }),
      });
      await store.close();
      e2e = await startE2eServer({ dataDir, env: env() });
      assert.deepEqual((await tinkerCall(e2e, '/api/v1/retrieve_future', { request_id: pending })).body, {
        error: RESTART_FAILURE,
        category: 'server',
      });
      assert.deepEqual((await tinkerCall(e2e, '/api/v1/retrieve_future', { request_id: finished })).body, {
        type: 'optim_step',
        metrics: {},
      });
    });
  });
}
