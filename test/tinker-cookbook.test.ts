/**
 * Thinking Machines' tinker-cookbook with the official `tinker` SDK 0.38 ($TINKER_PYTHON) against the real server, at
 * two releases: 0.5.8 (pinned in scripts/python/tinker.txt) and the newest, 0.6.1 (scripts/python/tinker-cookbook-061.txt,
 * a folder first on the recipes' PYTHONPATH: its tml-renderers>=0.4.1 is not on PyPI, so it is installed without
 * dependencies). Each runs its supervised recipe (`recipes/chat_sl/train.py`) and its RL recipe (`recipes/math_rl/train.py`,
 * the arithmetic environment) unmodified, configured only through their own chz command-line fields and the SDK's
 * environment; 0.6.1's RL recipe trains with its default loss, StableReinforce. Offline: the tokenizer is our model
 * folder, found under the name the recipe is given (the cookbook loads a local directory when the model name names
 * one), and the SFT data is a JSONL file made here; the arithmetic environment makes its problems itself. 0.5.8 is
 * given the base model's id and a renderer; 0.6.1 a Hugging Face name the server knows the base by
 * (`BASE_MODEL_ALIASES`: the tiny model stands in for Qwen3-4B-Instruct-2507, whose ChatML it shares), from which the
 * recipe looks its renderer up itself. This file checks that each recipe finished, what it wrote (metrics.jsonl,
 * checkpoints.jsonl), that its checkpoints are ordinary checkpoints of our API, and that tinker 0.38's
 * `tinker checkpoint download` fetches one as a PEFT adapter that Hugging Face PEFT loads with our engine's logprobs.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BUILTIN_BASE_MODEL, repoRoot } from '../src/config.ts';
import { servingAdapterKey } from '../src/engine/adapter-keys.ts';
import { TINKER_KEY_PREFIX } from '../src/http/auth.ts';
import { openStore } from '../src/store/db.ts';
import { TinkerRepository } from '../src/store/tinker-repository.ts';
import { parseTinkerPath } from '../src/tinker/schemas.ts';
import { NO_REFERENCE, REFERENCE_PYTHON, runJsonScript, runPython } from './helpers/reference.ts';
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

/** The name 0.6.1's recipes are given for the tiny model: one the cookbook knows (and the server knows it by). */
const HF_NAME = 'Qwen/Qwen3-4B-Instruct-2507';
const COOKBOOK_061 =
  process.env.TINKER_COOKBOOK_061_PATH ??
  [path.join(repoRoot, '.pyoverlay-tinker-cookbook-061')].find((folder) => fs.existsSync(folder));

interface Cookbook {
  version: string;
  /** Put first on PYTHONPATH (the release installed over .venv-tinker); null: .venv-tinker's own. */
  pythonPath: string | null;
  /** The recipes' `model_name`, and the arguments beside it (0.5.8 names its renderer; 0.6.1 looks it up). */
  model: string;
  modelArgs: string[];
  /** The RL recipe's default loss. */
  rlLoss: string;
  skip: string | false;
}

const COOKBOOKS: Cookbook[] = [
  {
    version: '0.5.8',
    pythonPath: null,
    model: BUILTIN_BASE_MODEL.id,
    modelArgs: ['renderer_name=qwen3_instruct'],
    rlLoss: 'importance_sampling',
    skip: false,
  },
  {
    version: '0.6.1',
    pythonPath: COOKBOOK_061 ?? null,
    model: HF_NAME,
    modelArgs: [],
    rlLoss: 'stable_reinforce',
    skip: COOKBOOK_061 ? false : 'no .pyoverlay-tinker-cookbook-061 (scripts/test.sh builds it)',
  },
];

/** The checkpoint names Tinker clients gave one model's steps. */
async function namedCheckpoints(dataDir: string, modelId: string) {
  const store = openStore({ databaseUrl: null, dataDir });
  try {
    return await new TinkerRepository(store.db).checkpointsOf(modelId);
  } finally {
    await store.close();
  }
}

/** How many sampled sequences the server recorded for StableReinforce (`record_stability_info`). */
async function recordedSequences(dataDir: string): Promise<number> {
  const store = openStore({ databaseUrl: null, dataDir });
  try {
    const row = await store.db
      .selectFrom('tinker_sampled_sequences')
      .select((eb) => eb.fn.countAll().as('n'))
      .executeTakeFirst();
    return Number(row?.n ?? 0);
  } finally {
    await store.close();
  }
}

describe('tinker-cookbook recipes against the server', () => {
  let e2e: E2eServer;
  let workdir: string;
  const runs: Record<string, { sl?: RecipeRun; rl?: RecipeRun }> = {};

  before(async () => {
    e2e = await startE2eServer({ env: { BASE_MODEL_ALIASES: `${BUILTIN_BASE_MODEL.id}=${HF_NAME}` } });
    workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'tinker-cookbook-'));
    for (const name of [BUILTIN_BASE_MODEL.id, HF_NAME]) {
      fs.mkdirSync(path.join(workdir, path.dirname(name)), { recursive: true });
      fs.symlinkSync(BUILTIN_BASE_MODEL.path, path.join(workdir, name));
    }
    writeSftData(path.join(workdir, 'sft.jsonl'));
  });
  after(async () => {
    await e2e?.close();
    if (workdir) fs.rmSync(workdir, { recursive: true, force: true });
  });

  /** What every recipe run shares: our server and key, the model's name, no model hub. */
  function common(cookbook: Cookbook, name: string): { args: string[]; env: NodeJS.ProcessEnv; logPath: string } {
    const logPath = path.join(workdir, `${cookbook.version}-${name}`);
    return {
      logPath,
      args: [
        `base_url=${e2e.url}`,
        `model_name=${cookbook.model}`,
        ...cookbook.modelArgs,
        'lora_rank=8',
        `log_path=${logPath}`,
        'behavior_if_log_dir_exists=delete',
        'eval_every=0',
        'save_every=1',
      ],
      env: {
        ...process.env,
        TINKER_API_KEY: `${TINKER_KEY_PREFIX}${e2e.key}`,
        HF_HUB_OFFLINE: '1',
        HF_DATASETS_OFFLINE: '1',
        TRANSFORMERS_VERBOSITY: 'error',
        ...(cookbook.pythonPath ? { PYTHONPATH: cookbook.pythonPath } : {}),
      },
    };
  }

  async function run(cookbook: Cookbook, name: string, module: string, args: string[]): Promise<RecipeRun> {
    const shared = common(cookbook, name);
    const { seconds } = await runPython(TINKER_PYTHON, ['-m', module, ...shared.args, ...args], {
      label: `${module} (tinker-cookbook ${cookbook.version})`,
      timeoutMs: RECIPE_TIMEOUT_MS,
      cwd: workdir,
      env: shared.env,
    });
    console.log(`tinker-cookbook ${cookbook.version} ${name}: ${seconds.toFixed(1)}s`);
    return {
      logPath: shared.logPath,
      metrics: readJsonl(path.join(shared.logPath, 'metrics.jsonl')),
      checkpoints: readJsonl(path.join(shared.logPath, 'checkpoints.jsonl')),
    };
  }

  for (const cookbook of COOKBOOKS) {
    describe(`tinker-cookbook ${cookbook.version}`, { skip: cookbook.skip }, () => {
      const own = {};
      runs[cookbook.version] = own;
      recipeTests(cookbook, own, () => ({ e2e, run, workdir }));
    });
  }

  test("tinker 0.38's `tinker checkpoint download` fetches a training checkpoint as a PEFT adapter that PEFT loads, with our engine's logprobs", {
    skip: NO_REFERENCE,
  }, async (t) => {
    const rl = runs['0.6.1']?.rl ?? runs['0.5.8']?.rl;
    if (!rl) return t.skip('the RL recipe did not finish (its own test says why)');
    const statePath = rl.checkpoints.at(-1)!.state_path as string;
    const output = fs.mkdtempSync(path.join(workdir, 'download-'));
    await runPython(TINKER_PYTHON, ['-m', 'tinker.cli', 'checkpoint', 'download', statePath, '--output', output], {
      label: 'tinker checkpoint download',
      timeoutMs: 120_000,
      env: { ...process.env, TINKER_BASE_URL: e2e.url, TINKER_API_KEY: `${TINKER_KEY_PREFIX}${e2e.key}` },
    });
    const folder = path.join(output, statePath.replace('tinker://', '').replaceAll('/', '_'));
    assert.deepEqual(fs.readdirSync(folder).sort(), ['adapter_config.json', 'adapter_model.safetensors']);
    const services = e2e.server.services;
    const { modelId, name } = parseTinkerPath(statePath)!;
    const named = (await namedCheckpoints(e2e.dataDir, modelId)).find(
      (row) => row.kind === 'training' && row.name === name,
    );
    const checkpoint = (await services.repositories.models.findCheckpointByStep(modelId, named!.step))!;
    const base = await services.runtime.load(BUILTIN_BASE_MODEL.id);
    const tokens = base.tokenizer.encode('What is 12 + 30? The answer is 42.');
    const ours = await services.runtime.sampler().request('forward', {
      base: base.id,
      adapter: servingAdapterKey(checkpoint.id),
      adapter_path: checkpoint.adapterPath!,
      rows: [{ tokens }],
    });
    const peft = await runJsonScript<{ logprobs: (number | null)[][]; config: Record<string, unknown> }>(
      REFERENCE_PYTHON!,
      'test/reference/peft_check.py',
      { base: BUILTIN_BASE_MODEL.path, adapter: folder, rows: [tokens] },
    );
    assert.equal(peft.config.base_model_name_or_path, BUILTIN_BASE_MODEL.id);
    let worst = 0;
    for (let t = 1; t < tokens.length; t += 1)
      worst = Math.max(worst, Math.abs(ours.logprobs[0][t]! - peft.logprobs[0][t]!));
    console.log(`# downloaded checkpoint, peft vs engine: max |logprob difference| ${worst.toExponential(2)}`);
    assert.ok(worst <= 1e-4, `max difference ${worst}`);
    // The CLI exported through a training run of its own, and deleted the export after the download.
    const store = openStore({ databaseUrl: null, dataDir: e2e.dataDir });
    try {
      const exports = await store.db
        .selectFrom('tinker_checkpoints')
        .select('name')
        .where('kind', '=', 'external')
        .execute();
      assert.deepEqual(exports, []);
    } finally {
      await store.close();
    }
  });
});

/** One release's recipes: supervised, RL, and what their checkpoints are on our side. */
function recipeTests(
  cookbook: Cookbook,
  own: { sl?: RecipeRun; rl?: RecipeRun },
  server: () => {
    e2e: E2eServer;
    run: (cookbook: Cookbook, name: string, module: string, args: string[]) => Promise<RecipeRun>;
    workdir: string;
  },
): void {
  test('supervised recipe (chat_sl) trains on a local JSONL file to completion, lowering its training loss', async () => {
    const { e2e, run, workdir } = server();
    // One batch of all eight conversations, three epochs: every step sees the same data, so the loss must fall.
    own.sl = await run(cookbook, 'sl', 'tinker_cookbook.recipes.chat_sl.train', [
      `dataset=${path.join(workdir, 'sft.jsonl')}`,
      'batch_size=8',
      'max_length=128',
      'num_epochs=3',
      'learning_rate=5e-3',
    ]);
    const losses = own.sl.metrics.filter((row) => 'train_mean_nll' in row).map((row) => row.train_mean_nll as number);
    assert.equal(losses.length, 3, JSON.stringify(own.sl.metrics));
    assert.ok(losses.every(Number.isFinite), JSON.stringify(losses));
    assert.ok(losses[2]! < losses[0]!, `loss did not fall: ${JSON.stringify(losses)}`);
    assertFinalCheckpoint(own.sl);
    // Each step ran once.
    const sent = await requestsOf(e2e.dataDir, modelIdOf(own.sl.checkpoints.at(-1)!.state_path));
    assert.equal(sent.forward_backward, 3, JSON.stringify(sent));
    assert.equal(sent.optim_step, 3, JSON.stringify(sent));
  });

  test(`RL recipe (math_rl, arithmetic environment) samples, scores and trains to completion with its default loss (${cookbook.rlLoss})`, async () => {
    const { e2e, run } = server();
    // Eight problems of four samples a step: enough for the tiny model to get some right now and then (a group with
    // mixed rewards is one with a gradient), few enough for half a minute.
    own.rl = await run(cookbook, 'rl', 'tinker_cookbook.recipes.math_rl.train', [
      'env=arithmetic',
      'group_size=4',
      'groups_per_batch=8',
      'max_tokens=5',
      'max_steps=2',
      'learning_rate=1e-3',
    ]);
    const steps = own.rl.metrics.filter((row) => 'progress/batch' in row);
    assert.deepEqual(
      steps.map((row) => row['progress/batch']),
      [0, 1],
      JSON.stringify(own.rl.metrics),
    );
    for (const row of steps) {
      assert.ok(Number.isFinite(row['env/all/reward/total']), JSON.stringify(row));
      // The recipe's own check of our sampler against our trainer: the KL between the logprobs the sampler returned
      // and those forward_backward computed for the same tokens (v1: mean difference, v2: half its mean square).
      assert.ok(Math.abs(row['optim/kl_sample_train_v1']) < 1e-4, JSON.stringify(row));
      assert.ok(row['optim/kl_sample_train_v2'] >= 0 && row['optim/kl_sample_train_v2'] < 1e-8, JSON.stringify(row));
    }
    assertFinalCheckpoint(own.rl);
    const modelId = modelIdOf(own.rl.checkpoints.at(-1)!.state_path);
    const sent = await requestsOf(e2e.dataDir, modelId);
    assert.equal(sent.forward_backward, 2, JSON.stringify(sent));
    // StableReinforce trains on what the sampler recorded: every sequence of both steps (8 problems × 4 samples).
    const recorded = await recordedSequences(e2e.dataDir);
    if (cookbook.rlLoss === 'stable_reinforce') assert.ok(recorded >= 2 * 8 * 4, `${recorded} recorded sequences`);
  });

  test("each recipe's checkpoints are ordinary checkpoints of one of our models, served by chat completions", async (t) => {
    const { e2e } = server();
    for (const recipe of [own.sl, own.rl]) {
      if (!recipe) return t.skip('a recipe did not finish (its own test says why)');
      const final = recipe.checkpoints.at(-1)!;
      const modelId = modelIdOf(final.sampler_path);
      const model = await e2e.api('GET', `/v1/preview/models/${modelId}`);
      assert.equal(model.status, 200, JSON.stringify(model.body));
      // Whatever name the recipe gave the base, the model is on the base's id.
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
}

/** The recipe ended by saving a final checkpoint, weights for sampling included, under a tinker:// path. */
function assertFinalCheckpoint(recipe: RecipeRun): void {
  const final = recipe.checkpoints.at(-1);
  assert.ok(final, `no checkpoints.jsonl rows in ${recipe.logPath}`);
  assert.equal(final.name, 'final', JSON.stringify(recipe.checkpoints));
  assert.match(final.sampler_path, /^tinker:\/\//);
  assert.match(final.state_path, /^tinker:\/\//);
  assert.equal(modelIdOf(final.sampler_path), modelIdOf(final.state_path));
}
