/**
 * OpenPipe ART's real client against the real server, at two pinned releases: 0.5.18 (Python 3.11,
 * scripts/python/art.txt, $ART_PYTHON) and the newest, 0.5.23 (Python 3.12, art-0523.txt, $ART_0523_PYTHON), whose wire
 * differs (shared/spec/reference/art-0.5.23.md §2.4). test/clients/art_session.py registers a TrainableModel with ART's
 * ServerlessBackend, samples with `model.openai_client()` (n > 1 with logprobs, whose token counts 0.5.23 checks),
 * trains RL steps on scored groups where most rewards are 0.0 and one step of multi-turn tool trajectories with
 * `backend.train`, logs with `model.log`, prunes with `delete_checkpoints`, runs SFT from a JSONL file
 * (`train_sft_from_file`, whose data ART uploads with W&B's real `wandb` SDK pointed at our server by WANDB_BASE_URL;
 * 0.5.23 asks the server to log its metrics), trains (0.5.23) with every `experimental_config` key off its default,
 * drives 0.5.23's `PipelineTrainer`, and deletes the model. Every request to our training API and our W&B API is ART's
 * or the SDK's own. This file checks what ART got back, and what the server held before the delete; what each
 * `experimental_config` key does to training is test/art-config.test.ts's.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BUILTIN_BASE_MODEL, repoRoot } from '../src/config.ts';
import { runJsonScript } from './helpers/reference.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

interface Client {
  version: string;
  python: string | undefined;
  /** The wandb release its requirements file pins. */
  wandb: string | undefined;
  /** Why its tests cannot run here, or false. */
  skip: string | false;
}

function client(version: string, env: string, venv: string, requirements: string, needs: string): Client {
  const fallback = path.join(repoRoot, venv, 'bin', 'python');
  const python = process.env[env] ?? (fs.existsSync(fallback) ? fallback : undefined);
  const wandb = /^wandb==(\S+)$/m.exec(
    fs.readFileSync(path.join(repoRoot, 'scripts', 'python', requirements), 'utf8'),
  )?.[1];
  return {
    version,
    python,
    wandb,
    skip: python ? false : `no ART ${version} venv: set ${env} (scripts/test.sh builds ${venv}${needs})`,
  };
}

const CLIENTS = [
  client('0.5.18', 'ART_PYTHON', '.venv-art', 'art.txt', ''),
  client(
    '0.5.23',
    'ART_0523_PYTHON',
    '.venv-art-0523',
    'art-0523.txt',
    ' where a Python 3.12 exists: python3.12 on PATH or pyenv’s 3.12.*',
  ),
];
const EXPERIMENTAL = JSON.parse(
  fs.readFileSync(path.join(repoRoot, 'test', 'fixtures', 'art-0.5.23-experimental-config.json'), 'utf8'),
).cases as Record<string, { experimental_config: Record<string, unknown> }>;
const KL_REFERENCE_KEYS = ['kl_penalty_reference_step', 'kl_penalty_step_lag', 'kl_ref_adapter_path'];

type Row = { step: number; source: string; metrics: Record<string, number> };

/**
 * The anthropic SDK ART 0.5.23's capture can record (scripts/python/anthropic-httpx.txt, in front of .venv-art-0523 on
 * the capture session's PYTHONPATH): from 1.0 the SDK sends through httpx2, which ART's capture does not patch.
 */
const fallbackOverlay = path.join(repoRoot, '.pyoverlay-anthropic-httpx');
const ANTHROPIC_HTTPX =
  process.env.ART_0523_ANTHROPIC_PATH ?? (fs.existsSync(fallbackOverlay) ? fallbackOverlay : undefined);

/**
 * The APIs whose captured rollouts the 0.5.23 session trains (test/clients/art_capture.py makes them), and where each
 * response says which ids were sampled (ART's token evidence, art.trajectories._tokenize).
 */
const SERVED_KINDS = ['chat_completions', 'completions', 'responses', 'messages'];
const CAPTURED_KINDS = SERVED_KINDS.filter((kind) => kind !== 'messages' || ANTHROPIC_HTTPX);
const sampledIds: Record<string, (exchange: any) => number[]> = {
  chat_completions: (exchange) => exchange.response.choices.flatMap((choice: any) => choice.token_ids),
  completions: (exchange) => exchange.response.choices.flatMap((choice: any) => choice.token_ids),
  responses: (exchange) => exchange.response.token_generations.flatMap((generation: any) => generation.token_ids),
  messages: (exchange) => exchange.response.token_ids,
};
const finite = (metrics: Record<string, unknown> | null | undefined, key: string) => Number.isFinite(metrics?.[key]);

for (const art of CLIENTS) {
  const newWire = art.version !== '0.5.18';
  describe(`OpenPipe ART ${art.version} client (ServerlessBackend) against the server`, { skip: art.skip }, () => {
    let e2e: E2eServer;
    let workdir: string;
    let session: Record<string, any>;
    const project = `art-${art.version.replaceAll('.', '')}`;

    before(async () => {
      e2e = await startE2eServer();
      workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'art-'));
      const started = Date.now();
      // W&B's SDK talks to our server, as the README tells a self-hosted user; its files stay in the workdir.
      const wandbDirs = Object.fromEntries(
        ['WANDB_DIR', 'WANDB_DATA_DIR', 'WANDB_CACHE_DIR', 'WANDB_CONFIG_DIR'].map((name) => [
          name,
          path.join(workdir, name.toLowerCase()),
        ]),
      );
      const env = { ...process.env, ...wandbDirs, WANDB_BASE_URL: e2e.url };
      session = await runJsonScript(
        art.python!,
        'test/clients/art_session.py',
        { server: e2e.url, api_key: e2e.key, base_model: BUILTIN_BASE_MODEL.id, workdir, project },
        env,
      );
      console.log(
        `ART ${art.version} session: ${((Date.now() - started) / 1000).toFixed(1)}s ${JSON.stringify(session.timings)}`,
      );
    });
    after(async () => {
      await e2e?.close();
      if (workdir) fs.rmSync(workdir, { recursive: true, force: true });
    });

    const history = () =>
      fs
        .readFileSync(path.join(workdir, project, 'models', session.storage_name, 'history.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line));

    test('register resolves the entity, names the model (0.5.23: by its run_name) and returns the existing model again', () => {
      const { register } = session;
      assert.equal(session.art_version, art.version);
      assert.equal(session.storage_name, newWire ? 'adder-run-1' : 'adder');
      assert.match(register.id, /^[0-9a-f-]{36}$/);
      assert.equal(register.entity, 'local');
      assert.equal(register.again_id, register.id);
      assert.equal(register.inference_name, `wandb-artifact:///local/${project}/${session.storage_name}`);
      assert.equal(session.server.name, session.storage_name);
      assert.equal(session.initial_step, 0);
    });

    test('backend.train on groups whose rewards are mostly 0.0: each call ends with a new checkpoint that get_step reports', () => {
      assert.deepEqual(
        session.rl.map((step: any) => step.step),
        [1, 2, 3],
      );
      const rewards = session.rl.flatMap((step: any) => step.rewards.flat());
      assert.ok(rewards.filter((reward: number) => reward === 0).length > rewards.length / 2, JSON.stringify(rewards));
      for (const step of session.rl) {
        assert.equal(step.get_step, step.step);
        assert.equal(step.artifact_name, `local/${project}/${session.storage_name}:step${step.step}`);
        assert.equal(step.metrics['data/step_num_groups_submitted'], 4);
        // The first group rewards the shortest answer, so every step has something to learn.
        assert.ok(step.metrics['data/step_num_groups_trainable'] >= 1, JSON.stringify(step.metrics));
        assert.ok(finite(step.metrics, 'loss/train'), JSON.stringify(step.metrics));
      }
      // What went on the wire: 0.5.23 leaves out every field at its default, so a 0.0 reward is not sent at all.
      const trajectoryKeys = session.rl.flatMap((step: any) => step.wire.flatMap((group: any) => group.trajectories));
      const withoutReward = trajectoryKeys.filter((keys: string[]) => !keys.includes('reward'));
      if (newWire) {
        assert.ok(
          withoutReward.length > 0 &&
            trajectoryKeys.every((keys: string[]) => !keys.includes('tools') && !keys.includes('logs')),
          JSON.stringify(trajectoryKeys),
        );
      } else {
        assert.equal(withoutReward.length, 0);
      }
      // The server read each left-out reward as 0.0.
      const stored = session.server.train_trajectories.filter((row: any) => row.step < 3).map((row: any) => row.reward);
      assert.deepEqual(
        stored,
        session.rl.flatMap((step: any) => step.rewards.flat()),
      );
    });

    test('multi-turn tool trajectories train: the tools and both sampled turns reach the stored trajectory', () => {
      const { tools } = session;
      assert.equal(tools.step, 4);
      assert.equal(tools.metrics['data/step_num_groups_trainable'], 1);
      assert.ok(finite(tools.metrics, 'loss/train'), JSON.stringify(tools.metrics));
      const stored = session.server.train_trajectories.filter((row: any) => row.step === 3);
      assert.equal(stored.length, 3);
      for (const { detail } of stored) {
        assert.deepEqual(
          detail.tools.map((tool: any) => tool.function.name),
          ['add'],
        );
        const items = detail.messages_and_choices;
        assert.deepEqual(
          items.map((item: any) => item.role ?? 'choice'),
          ['system', 'user', 'assistant', 'tool', 'choice', 'user', 'choice'],
        );
      }
    });

    test('n > 1 with logprobs: per-choice token counts add up to usage.completion_tokens, as 0.5.23 checks', {
      skip: !newWire && 'only 0.5.20+ checks the counts',
    }, () => {
      const { token_ids: withIds, logprobs: withoutIds } = session.token_counts;
      // ART's default extra body asks for token ids: the count is each choice's token_ids.
      assert.deepEqual(withIds.art_counts, withIds.token_ids);
      assert.equal(
        withIds.art_counts.reduce((a: number, b: number) => a + b, 0),
        withIds.usage,
      );
      // Token ids turned off by the caller: the count is each choice's logprobs.
      assert.deepEqual(withoutIds.token_ids, [0, 0, 0]);
      assert.deepEqual(withoutIds.art_counts, withoutIds.logprobs);
      assert.equal(
        withoutIds.art_counts.reduce((a: number, b: number) => a + b, 0),
        withoutIds.usage,
      );
    });

    test('delete_checkpoints keeps only the latest and the best val/reward step', () => {
      assert.deepEqual(session.steps_before_delete, [0, 1, 2, 3, 4]);
      // The rows there were when it ran (later evals log more).
      const val = history().filter((row) => 'val/reward' in row && session.steps_before_delete.includes(row.step));
      const best = Math.max(...val.map((row) => row['val/reward']));
      // ART picks one of the steps with the best val/reward (ties in any order) and keeps it with the latest.
      const kept = session.steps_after_delete as number[];
      assert.ok(kept.includes(4) && kept.length <= 2, JSON.stringify(kept));
      for (const step of kept.filter((step) => step !== 4))
        assert.ok(
          val.some((row) => row.step === step && row['val/reward'] === best),
          `step ${step} is not a best step`,
        );
    });

    test('SFT from a file: the real wandb SDK uploads the data to our W&B API, and the job trains a new checkpoint whose metrics the server records', async () => {
      assert.ok(art.wandb, 'the requirements pin wandb');
      assert.equal(session.wandb_version, art.wandb);
      const [, name] =
        new RegExp(`^wandb-artifact:///local/${project}/(${session.storage_name}-sft-data-[0-9a-f]{12}):v0$`).exec(
          session.sft_training_data_url,
        ) ?? [];
      assert.ok(name, session.sft_training_data_url);
      // The model is deleted by now; the artifact ART uploaded through the SDK stays in the key's store.
      const stored = await e2e.api('GET', `/v1/preview/artifacts/local/${project}/${name}`);
      assert.equal(stored.status, 200, JSON.stringify(stored.body));
      assert.deepEqual(
        stored.body.data.map((version: any) => [version.version, version.files.map((file: any) => file.name)]),
        [['v0', ['train.jsonl']]],
      );
      const { before: from, after: step, checkpoint_metrics: metrics } = session.sft;
      assert.equal(step, from + 1);
      // 0.5.20+ no longer logs SFT metrics itself: it asks the server to, at the step the job writes.
      if (newWire)
        assert.deepEqual(session.sft_request_config.metric_logging, { enabled: true, target_training_step: step });
      else assert.equal(session.sft_request_config.metric_logging, undefined);
      const rows = (session.server.history as Row[]).filter((row) => row.step === step);
      assert.deepEqual(
        rows.map((row) => row.source),
        ['train'],
      );
      for (const key of ['loss', 'learning_rate', 'grad_norm', 'num_trainable_tokens']) {
        assert.ok(finite(metrics, key), `${key} in /checkpoints: ${JSON.stringify(metrics)}`);
        assert.equal(rows[0].metrics[key], metrics[key], key);
      }
      const localSftRows = history().filter(
        (row) => row.step === step && Object.keys(row).some((key) => key.startsWith('loss/') || key.startsWith('sft/')),
      );
      if (newWire) assert.deepEqual(localSftRows, [], 'ART 0.5.23 logged SFT metrics itself');
      assert.equal(typeof session.answer_after_training, 'string', 'the model answers after training');
    });

    test('backend.train with every experimental_config key off its default: ART sends all 25, and each job trains with them', {
      skip: !newWire && 'experimental_config has 25 keys from 0.5.20',
    }, () => {
      const defaults = EXPERIMENTAL.default.experimental_config;
      // With a KL coefficient, ART's own default source is "sample" (current_learner is its default without one).
      const defaultOf = (key: string) =>
        key === 'kl_penalty_source' ? EXPERIMENTAL.kl_penalty_coef.experimental_config[key] : defaults[key];
      const calls = session.every_key as {
        step: number;
        experimental_config: Record<string, unknown>;
        events: { type: string; data: Record<string, number> }[];
      }[];
      assert.deepEqual(
        calls.map((call) => call.step),
        [1, 2, 3].map((n) => session.sft.after + n),
      );
      // The three ways of naming the KL reference exclude one another: each call names it one way.
      assert.deepEqual(
        calls.map((call) => KL_REFERENCE_KEYS.filter((key) => call.experimental_config[key] !== null)),
        KL_REFERENCE_KEYS.map((key) => [key]),
      );
      for (const [index, { experimental_config: sent, events }] of calls.entries()) {
        assert.deepEqual(Object.keys(sent).sort(), Object.keys(defaults).sort());
        const atDefault = Object.keys(defaults)
          .filter((key) => !KL_REFERENCE_KEYS.includes(key) || key === KL_REFERENCE_KEYS[index])
          .filter((key) => JSON.stringify(sent[key]) === JSON.stringify(defaultOf(key)));
        assert.deepEqual(atDefault, [], `call ${index}`);
        // What the job reports: rows of packed_sequence_length, logits chunks of logprob_calculation_chunk_size, the KL
        // term, truncation of the precalculated ratios, whose first step is on-policy (ratio 1).
        assert.deepEqual([events[0].type, events.at(-1)!.type], ['training_started', 'training_ended']);
        assert.ok(events[0].data.num_sequences > 1, JSON.stringify(events[0].data));
        const steps = events.filter((event) => event.type === 'gradient_step').map((event) => event.data);
        assert.equal(steps.length, events[0].data.num_sequences);
        for (const step of steps) {
          assert.equal(step.logprob_chunk_size, 8);
          assert.ok(
            finite(step, 'kl_policy_ref') && finite(step, 'truncated_token_fraction') && finite(step, 'loss'),
            JSON.stringify(step),
          );
        }
        assert.ok(Math.abs(steps[0].importance_ratio_mean - 1) < 1e-4, JSON.stringify(steps[0]));
      }
    });

    test('PipelineTrainer trains two steps from its rollouts and evaluates the checkpoint it started from', {
      skip: !newWire && 'PipelineTrainer is 0.5.20+',
    }, () => {
      const { pipeline } = session;
      assert.equal(pipeline.after, pipeline.before + 2);
      // Its eval requires each answer's policy provenance (policy_token_spans) to name the step it evaluates.
      assert.equal(pipeline.eval_steps[0], pipeline.before, JSON.stringify(pipeline.eval_steps));
      assert.ok(
        history().some((row) => row.step === pipeline.before && Number.isFinite(row['val/reward'])),
        'no eval row in the history',
      );
      const trained = session.server.train_trajectories.filter((row: any) => row.step >= pipeline.before);
      assert.ok(trained.length >= 2 * 2 * 4, String(trained.length));
      // The trainer stamps each rollout with the policy it was sampled from: sent as set, never defaulted away.
      assert.ok(
        trained.every((row: any) => Number.isInteger(row.detail.initial_policy_version)),
        JSON.stringify(trained.map((row: any) => row.detail.initial_policy_version)),
      );
    });

    test('backend.delete removes the model: ART then gets a 404 for it', async () => {
      assert.equal(session.after_delete, 'NotFoundError');
      assert.equal((await e2e.api('GET', `/v1/preview/models/${session.register.id}`)).status, 404);
    });

    describe("ART's own capture (`with art.Trajectory()`, 0.5.20+): captured trajectories log and train", {
      skip: !newWire && 'capture is 0.5.20+',
    }, () => {
      let capture: { model_id: string; trained: any[]; server: any[] };
      before(async () => {
        if (CAPTURED_KINDS.length < SERVED_KINDS.length)
          console.log(
            '# no .pyoverlay-anthropic-httpx (scripts/test.sh builds it): Messages rollouts are not captured',
          );
        const env = { ...process.env, ...(ANTHROPIC_HTTPX ? { PYTHONPATH: ANTHROPIC_HTTPX } : {}) };
        capture = await runJsonScript(
          art.python!,
          'test/clients/art_capture.py',
          {
            server: e2e.url,
            api_key: e2e.key,
            base_model: BUILTIN_BASE_MODEL.id,
            workdir,
            project: `${project}-capture`,
            kinds: CAPTURED_KINDS,
          },
          env,
        );
      });
      const stored = (label: string) => {
        const step = capture.trained.find((trained) => trained.label === label).step - 1;
        return capture.server.filter((row) => row.step === step);
      };

      test('each API: backend.train completes on four two-turn captured rollouts, sent in the exchanges form', () => {
        assert.deepEqual(
          capture.trained.map((trained) => [trained.label, trained.step]),
          [...CAPTURED_KINDS, 'mixed'].map((label, index) => [label, index + 1]),
        );
        for (const trained of capture.trained) assert.ok(Number.isFinite(trained.loss), JSON.stringify(trained));
        for (const kind of CAPTURED_KINDS) {
          const sent = capture.trained.find((trained) => trained.label === kind).sent.trajectories;
          assert.deepEqual(
            sent.map((trajectory: any) => [Object.keys(trajectory.exchanges), trajectory.exchanges[kind].length]),
            sent.map(() => [[kind], 2]),
            'ART sends only the exchanges form, two exchanges a rollout',
          );
          assert.ok(sent.every((trajectory: any) => !('messages_and_choices' in trajectory)));
        }
      });

      test('the trained token ids are the ids each response says were sampled; the dashboard shows the conversation', () => {
        for (const kind of CAPTURED_KINDS) {
          const rows = stored(kind);
          assert.equal(rows.length, 4);
          for (const row of rows) {
            const exchanges = row.data.exchanges[kind];
            assert.deepEqual(row.trained_tokens?.token_ids, exchanges.flatMap(sampledIds[kind]), `${kind} ${row.id}`);
            assert.equal(row.conversation.form, 'captured');
            assert.deepEqual(row.conversation.kinds, [kind]);
            assert.equal(row.conversation.messages_and_choices.filter((item: any) => item.message).length, 2);
          }
        }
      });

      test('a group mixing captured and legacy trajectories trains every one of them', () => {
        const rows = stored('mixed');
        assert.deepEqual(
          rows.map((row) => row.conversation.form),
          ['captured', 'captured', 'legacy', 'legacy'],
        );
        for (const row of rows) assert.ok(row.trained_tokens?.token_ids.length > 0, row.id);
        for (const row of rows.slice(0, 2))
          assert.deepEqual(
            row.trained_tokens.token_ids,
            row.data.exchanges.chat_completions.flatMap(sampledIds.chat_completions),
          );
      });

      test('one trajectory in both forms, or a malformed exchange, is a 422 naming the field', async () => {
        const captured = stored(CAPTURED_KINDS[0])[0].data;
        const legacy = stored('mixed')[2].data;
        const mixed = { ...captured, messages_and_choices: legacy.messages_and_choices };
        const broken = structuredClone(captured);
        delete broken.exchanges[CAPTURED_KINDS[0]][1].request[
          CAPTURED_KINDS[0] === 'completions' ? 'prompt' : 'messages'
        ];
        const loc = ['body', 'trajectory_groups', 0, 'trajectories', 1];
        for (const [trajectory, where, pattern] of [
          [mixed, [...loc, 'exchanges'], /both exchanges and legacy histories/],
          [broken, [...loc, 'exchanges', CAPTURED_KINDS[0], 1, 'request'], /Input should be/],
        ] as const) {
          const trajectories = [legacy, trajectory];
          for (const [route, body] of [
            ['/v1/preview/training-jobs', { model_id: capture.model_id, trajectory_groups: [{ trajectories }] }],
            [`/v1/preview/models/${capture.model_id}/log`, { split: 'val', trajectory_groups: [{ trajectories }] }],
          ] as const) {
            const response = await e2e.api('POST', route, body);
            assert.equal(response.status, 422, JSON.stringify(response.body));
            const problem = response.body.detail.find((d: any) =>
              JSON.stringify(d.loc).startsWith(JSON.stringify(where).slice(0, -1)),
            );
            assert.ok(problem && pattern.test(problem.msg), `${route}: ${JSON.stringify(response.body.detail)}`);
          }
        }
      });

      test("captured groups logged through ART's client (split val): the val reward of each step is in the run history", async () => {
        const metrics = await e2e.api('GET', `/v1/dashboard/models/${capture.model_id}/metrics?limit=200`);
        const val = metrics.body.data
          .filter((row: Row) => row.source === 'log:val')
          .sort((a: Row, b: Row) => a.step - b.step);
        assert.deepEqual(
          val.map((row: Row) => [row.step, row.metrics['val/reward'], row.metrics['val/num_trajectories']]),
          capture.trained.map((_, step) => [step, 0.25, 4]),
        );
      });
    });
  });
}
