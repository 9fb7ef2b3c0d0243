/**
 * Smoke tests of examples/: each example runs as its README section says, with its real client (ART, openai,
 * tinker-cookbook, transformers+peft), against the real server, on the tiny model and a couple of steps
 * (`--base-model builtin/tiny-chat`), and leaves what it promises: trained checkpoints, held-out evaluations logged
 * with split "val", tool calls answered, an exported adapter PEFT loads, an imported model the server serves.
 * Whether SmolLM2 visibly learns is the benchmark's to show (bench/examples.ts runs the examples in full).
 * Each client's tests skip, saying so, where its venv is missing.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { BUILTIN_BASE_MODEL } from '../src/config.ts';
import { CLIENTS, runExample } from './helpers/examples.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const TINY = ['--base-model', BUILTIN_BASE_MODEL.id];
const TIMEOUT_MS = 6 * 60_000;

describe('examples/ against the server (tiny model, a couple of steps)', () => {
  let e2e: E2eServer;
  /** Checkpoints the ART examples left, for the examples that start from one. */
  const trained: { rl?: string; sft?: string } = {};

  before(async () => {
    e2e = await startE2eServer();
  });
  after(async () => {
    await e2e?.close();
  });

  const run = (python: string | undefined, script: string, args: string[]) =>
    runExample(python!, script, args, e2e, TIMEOUT_MS);
  const steps = async (modelId: string) =>
    (await e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints`)).body.data
      .map((c: { step: number }) => c.step)
      .sort();

  test('1. RL with ART: two steps, a checkpoint per step, held-out evaluations logged as val beside the train rows', {
    skip: CLIENTS.art.skip,
  }, async () => {
    const { summary, output } = await run(CLIENTS.art.python, 'rl_capitals_art.py', [
      ...TINY,
      '--name',
      'rl-smoke',
      '--steps',
      '2',
      '--samples',
      '2',
      '--eval-samples',
      '2',
      '--eval-every',
      '1',
    ]);
    assert.equal(summary.step, 2);
    assert.deepEqual(await steps(summary.model_id), [0, 1, 2]);
    assert.match(output, /country +before +after/);
    assert.ok(Number.isFinite(summary.reward_before) && Number.isFinite(summary.reward_after), JSON.stringify(summary));
    const history = (await e2e.api('GET', `/v1/dashboard/models/${summary.model_id}/metrics?limit=100`)).body.data as {
      step: number;
      split: string;
      metrics: Record<string, number>;
    }[];
    const val = history.filter((row) => row.split === 'val');
    assert.deepEqual(
      val.map((row) => row.step),
      [0, 1, 2],
      JSON.stringify(history),
    );
    for (const row of val) assert.ok(Number.isFinite(row.metrics['val/reward']), JSON.stringify(row));
    assert.deepEqual(
      history.filter((row) => row.split === 'train').map((row) => row.step),
      [1, 2],
      JSON.stringify(history),
    );
    trained.rl = `${summary.model}:step2`;
  });

  test('2. SFT with ART from the JSONL file: one job, one new checkpoint, answers before and after', {
    skip: CLIENTS.art.skip,
  }, async () => {
    const { summary } = await run(CLIENTS.art.python, 'sft_fact_art.py', [...TINY, '--name', 'sft-smoke']);
    assert.equal(summary.step, 1);
    assert.deepEqual(await steps(summary.model_id), [0, 1]);
    assert.equal(typeof summary.before, 'string');
    assert.equal(typeof summary.after, 'string');
    trained.sft = `${summary.model}:step1`;
  });

  test('3. the openai SDK agent loop on a trained checkpoint: every user turn calls a tool, gets its result and answers', {
    skip: CLIENTS.art.skip,
  }, async (t) => {
    if (!trained.rl) return t.skip('example 1 did not finish (its own test says why)');
    const { summary } = await run(CLIENTS.art.python, 'tool_agent_openai.py', ['--model', trained.rl]);
    assert.equal(summary.turns.length, 2);
    for (const turn of summary.turns) {
      // The first call of a turn is forced (tool_choice "required"), so it is one of the two tools with a valid
      // argument; later ones are the model's own choice, and a tool that does not exist gets an error as its result.
      assert.ok(['lookup_capital', 'lookup_population'].includes(turn.tool_calls[0]?.name), JSON.stringify(turn));
      assert.doesNotMatch(turn.tool_calls[0].result, /^error/, JSON.stringify(turn));
      assert.equal(typeof turn.answer, 'string', JSON.stringify(turn));
    }
    // The conversation went on across both turns: each tool result went back under its call's id.
    const messages = summary.messages as Record<string, any>[];
    const callIds = messages.flatMap((message) => (message.tool_calls ?? []).map((call: { id: string }) => call.id));
    assert.deepEqual(
      messages.filter((message) => message.role === 'tool').map((message) => message.tool_call_id),
      callIds,
    );
    assert.equal(messages.filter((message) => message.role === 'user').length, 2);
  });

  test("4. the tinker-cookbook RL recipe: one batch, its final checkpoint one of the server's", {
    skip: CLIENTS.tinker.skip,
  }, async () => {
    const { summary } = await run(CLIENTS.tinker.python, 'tinker_cookbook_rl.py', [
      ...TINY,
      '--steps',
      '1',
      '--run-dir',
      `${e2e.dataDir}/cookbook`,
    ]);
    assert.equal(summary.rewards.length, 1);
    assert.match(summary.final.sampler_path, /^tinker:\/\//);
    const modelId = String(summary.final.sampler_path).slice('tinker://'.length).split('/')[0];
    assert.ok((await steps(modelId)).length >= 2, `no trained checkpoint for ${modelId}`);
  });

  test('5. export a checkpoint into transformers+peft, import an adapter trained there', {
    skip: CLIENTS.peft.skip,
  }, async (t) => {
    if (!trained.sft) return t.skip('example 2 did not finish (its own test says why)');
    const { summary } = await run(CLIENTS.peft.python, 'peft_export_import.py', [
      ...TINY,
      '--model',
      trained.sft,
      '--import-name',
      'imported-smoke',
      '--import-steps',
      '2',
    ]);
    assert.equal(summary.export.model, trained.sft);
    // The same adapter, greedy, in transformers+peft and on the server: the same answer.
    assert.equal(summary.export.transformers_answer.trim(), summary.export.server_answer.trim());
    assert.deepEqual(await steps(summary.import.model_id), [0]);
    assert.equal(typeof summary.import.answer, 'string');
  });
});
