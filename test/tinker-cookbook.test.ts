/**
 * Thinking Machines' tinker-cookbook (pinned with the official `tinker` SDK in scripts/python/tinker.txt, run with
 * $TINKER_PYTHON) against the real server: its supervised recipe (`recipes/chat_sl/train.py`) and its RL recipe
 * (`recipes/math_rl/train.py`, the arithmetic environment) run unmodified, configured only through their own chz
 * command-line fields and the SDK's environment. Offline: the tokenizer is our model folder, found under the base
 * model's own id (the cookbook loads a local directory when the model name names one), and the SFT data is a JSONL
 * file made here; the arithmetic environment makes its problems itself. This file checks that each recipe finished,
 * what it wrote (metrics.jsonl, checkpoints.jsonl), and that its checkpoints are ordinary checkpoints of our API.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BUILTIN_BASE_MODEL, repoRoot } from '../src/config.ts';
import { TINKER_KEY_PREFIX } from '../src/http/auth.ts';
import { openStore } from '../src/store/db.ts';
import { parseTinkerPath } from '../src/tinker/schemas.ts';
import { runPython } from './helpers/reference.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const TINKER_PYTHON = process.env.TINKER_PYTHON ?? path.join(repoRoot, '.venv-tinker', 'bin', 'python');
/** A recipe that has not finished by then is stuck (the SDK retries what it takes for transient failures). */
const RECIPE_TIMEOUT_MS = 360_000;

interface RecipeRun {
  logPath: string;
  metrics: Record<string, any>[];
  checkpoints: Record<string, any>[];
}

function readJsonl(file: string): Record<string, any>[] {
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line.trim())
    .map((line) => JSON.parse(line));
}

/** SFT data the tiny model can learn from in a few steps: additions answered with the sum alone. */
function writeSftData(file: string): void {
  const pairs = [
    [3, 4],
    [12, 30],
    [7, 8],
    [25, 25],
    [40, 2],
    [9, 11],
    [15, 6],
    [33, 44],
  ];
  const lines = pairs.map(([a, b]) =>
    JSON.stringify({
      messages: [
        { role: 'user', content: `What is ${a} + ${b}?` },
        { role: 'assistant', content: String(a + b) },
      ],
    }),
  );
  fs.writeFileSync(file, `${lines.join('\n')}\n`);
}

/** A Tinker training run is one of our models: its checkpoints' tinker:// paths name our model id. */
function modelIdOf(tinkerPath: string): string {
  const parsed = parseTinkerPath(tinkerPath);
  assert.ok(parsed, `not a tinker:// checkpoint path: ${tinkerPath}`);
  return parsed.modelId;
}

/**
 * How many requests of each kind the server recorded for one model. A request the SDK re-sends with the same seq_id
 * (after a lost answer or its 60 s timeout) answers the first one's future and adds no row (test/tinker-exactly-once).
 */
async function requestsOf(dataDir: string, modelId: string): Promise<Record<string, number>> {
  const store = openStore({ databaseUrl: null, dataDir });
  try {
    const rows = await store.db.selectFrom('tinker_futures').select('kind').where('model_id', '=', modelId).execute();
    const counts: Record<string, number> = {};
    for (const row of rows) counts[row.kind] = (counts[row.kind] ?? 0) + 1;
    return counts;
  } finally {
    await store.close();
  }
}

describe('tinker-cookbook recipes against the server', () => {
  let e2e: E2eServer;
  let workdir: string;
  let sl: RecipeRun;
  let rl: RecipeRun;

  before(async () => {
    e2e = await startE2eServer();
    workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'tinker-cookbook-'));
    fs.mkdirSync(path.join(workdir, path.dirname(BUILTIN_BASE_MODEL.id)), { recursive: true });
    fs.symlinkSync(BUILTIN_BASE_MODEL.path, path.join(workdir, BUILTIN_BASE_MODEL.id));
    writeSftData(path.join(workdir, 'sft.jsonl'));
  });
  after(async () => {
    await e2e?.close();
    if (workdir) fs.rmSync(workdir, { recursive: true, force: true });
  });

  /** What both recipes share: our server and key, our base model, a renderer for its ChatML, no model hub. */
  function common(name: string): { args: string[]; env: Record<string, string>; logPath: string } {
    const logPath = path.join(workdir, name);
    return {
      logPath,
      args: [
        `base_url=${e2e.url}`,
        `model_name=${BUILTIN_BASE_MODEL.id}`,
        'renderer_name=qwen3_instruct',
        'lora_rank=8',
        `log_path=${logPath}`,
        'behavior_if_log_dir_exists=delete',
        'eval_every=0',
        'save_every=1',
      ],
      env: {
        TINKER_API_KEY: `${TINKER_KEY_PREFIX}${e2e.key}`,
        HF_HUB_OFFLINE: '1',
        HF_DATASETS_OFFLINE: '1',
        TRANSFORMERS_VERBOSITY: 'error',
      },
    };
  }

  async function run(name: string, module: string, args: string[]): Promise<RecipeRun> {
    const shared = common(name);
    const { seconds } = await runPython(TINKER_PYTHON, ['-m', module, ...shared.args, ...args], {
      label: module,
      timeoutMs: RECIPE_TIMEOUT_MS,
      cwd: workdir,
      env: { ...process.env, ...shared.env },
    });
    console.log(`${name}: ${seconds.toFixed(1)}s`);
    return {
      logPath: shared.logPath,
      metrics: readJsonl(path.join(shared.logPath, 'metrics.jsonl')),
      checkpoints: readJsonl(path.join(shared.logPath, 'checkpoints.jsonl')),
    };
  }

  test('supervised recipe (chat_sl) trains on a local JSONL file to completion, lowering its training loss', async () => {
    // One batch of all eight conversations, three epochs: every step sees the same data, so the loss must fall.
    sl = await run('sl', 'tinker_cookbook.recipes.chat_sl.train', [
      `dataset=${path.join(workdir, 'sft.jsonl')}`,
      'batch_size=8',
      'max_length=128',
      'num_epochs=3',
      'learning_rate=5e-3',
    ]);
    const losses = sl.metrics.filter((row) => 'train_mean_nll' in row).map((row) => row.train_mean_nll as number);
    assert.equal(losses.length, 3, JSON.stringify(sl.metrics));
    assert.ok(losses.every(Number.isFinite), JSON.stringify(losses));
    assert.ok(losses[2]! < losses[0]!, `loss did not fall: ${JSON.stringify(losses)}`);
    assertFinalCheckpoint(sl);
    // Each step ran once.
    const sent = await requestsOf(e2e.dataDir, modelIdOf(sl.checkpoints.at(-1)!.state_path));
    assert.equal(sent.forward_backward, 3, JSON.stringify(sent));
    assert.equal(sent.optim_step, 3, JSON.stringify(sent));
  });

  test('RL recipe (math_rl, arithmetic environment) samples, scores and trains to completion', async () => {
    // Eight problems of four samples a step: enough for the tiny model to get some right now and then (a group with
    // mixed rewards is one with a gradient), few enough for half a minute.
    rl = await run('rl', 'tinker_cookbook.recipes.math_rl.train', [
      'env=arithmetic',
      'group_size=4',
      'groups_per_batch=8',
      'max_tokens=5',
      'max_steps=2',
      'learning_rate=1e-3',
    ]);
    const steps = rl.metrics.filter((row) => 'progress/batch' in row);
    assert.deepEqual(
      steps.map((row) => row['progress/batch']),
      [0, 1],
      JSON.stringify(rl.metrics),
    );
    for (const row of steps) {
      assert.ok(Number.isFinite(row['env/all/reward/total']), JSON.stringify(row));
      // The recipe's own check of our sampler against our trainer: the KL between the logprobs the sampler returned
      // and those forward_backward computed for the same tokens (v1: mean difference, v2: half its mean square).
      assert.ok(Math.abs(row['optim/kl_sample_train_v1']) < 1e-4, JSON.stringify(row));
      assert.ok(row['optim/kl_sample_train_v2'] >= 0 && row['optim/kl_sample_train_v2'] < 1e-8, JSON.stringify(row));
    }
    assertFinalCheckpoint(rl);
  });

  test("each recipe's checkpoints are ordinary checkpoints of one of our models, served by chat completions", async (t) => {
    for (const recipe of [sl, rl]) {
      if (!recipe) return t.skip('a recipe did not finish (its own test says why)');
      const final = recipe.checkpoints.at(-1)!;
      const modelId = modelIdOf(final.sampler_path);
      const model = await e2e.api('GET', `/v1/preview/models/${modelId}`);
      assert.equal(model.status, 200, JSON.stringify(model.body));
      assert.equal(model.body.base_model, BUILTIN_BASE_MODEL.id);
      const listed = await e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints`);
      assert.equal(listed.status, 200, JSON.stringify(listed.body));
      const steps: number[] = listed.body.data.map((checkpoint: { step: number }) => checkpoint.step);
      // Step 0 is the untrained adapter; every sampler checkpoint the recipe recorded is a trained step of ours.
      const samplerPaths = new Set(recipe.checkpoints.map((row) => row.sampler_path).filter(Boolean));
      assert.ok(
        steps.filter((step) => step > 0).length >= samplerPaths.size,
        `${JSON.stringify(steps)} for ${[...samplerPaths]}`,
      );
      const name = `${model.body.entity}/${model.body.project}/${model.body.name}`;
      for (const served of [name, `${name}:step${Math.max(...steps)}`]) {
        const answer = await e2e.api('POST', '/v1/chat/completions', {
          model: served,
          messages: [{ role: 'user', content: 'What is 12 + 30?' }],
          max_tokens: 4,
          temperature: 0,
        });
        assert.equal(answer.status, 200, `${served}: ${JSON.stringify(answer.body)}`);
        assert.equal(typeof answer.body.choices[0].message.content, 'string');
      }
    }
  });
});

/** The recipe ended by saving a final checkpoint, weights for sampling included, under a tinker:// path. */
function assertFinalCheckpoint(recipe: RecipeRun): void {
  const final = recipe.checkpoints.at(-1);
  assert.ok(final, `no checkpoints.jsonl rows in ${recipe.logPath}`);
  assert.equal(final.name, 'final', JSON.stringify(recipe.checkpoints));
  assert.match(final.sampler_path, /^tinker:\/\//);
  assert.match(final.state_path, /^tinker:\/\//);
  assert.equal(modelIdOf(final.sampler_path), modelIdOf(final.state_path));
}
