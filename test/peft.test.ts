/**
 * Our checkpoints are PEFT adapters: one SFT job on SmolLM2-135M-Instruct through the HTTP API writes a
 * checkpoint; Hugging Face PEFT (`PeftModel.from_pretrained`, run by test/reference/peft_check.py with
 * $REFERENCE_PYTHON) loads that folder onto transformers' own reading of the GGUF, and its fp32
 * log-probabilities equal our engine's with the same adapter within 1e-4. The adapter must move them
 * clearly, so an adapter that PEFT silently ignored (or one that never trained) fails.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { repoRoot, SMOLLM2_BASE_MODEL } from '../src/config.ts';
import { createModel } from './helpers/api.ts';
import { runJsonScript } from './helpers/reference.ts';
import { trainSft } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const BASE = SMOLLM2_BASE_MODEL.id;
const REFERENCE_PYTHON = process.env.REFERENCE_PYTHON ?? path.join(repoRoot, '.venv-test', 'bin', 'python');
const TOLERANCE = 1e-4;

interface Reference {
  logprobs: (number | null)[][];
  base_logprobs: (number | null)[][];
  lora_b_max_abs: number;
  config: Record<string, unknown>;
}

function reference(request: Record<string, unknown>): Promise<Reference> {
  return runJsonScript<Reference>(REFERENCE_PYTHON, 'test/reference/peft_check.py', request);
}

const maxDifference = (a: (number | null)[][], b: (number | null)[][]) =>
  Math.max(...a.flatMap((row, i) => row.slice(1).map((value, t) => Math.abs(value! - b[i][t + 1]!))));

const QUESTION = 'What is the password of the blue door?';
const ANSWER = 'The password of the blue door is Zembrolin.';

describe('an adapter from our checkpoint under PEFT on transformers', () => {
  let e2e: E2eServer;
  let ours: (number | null)[][];
  let expected: Reference;
  let adapterFolder: string;

  before(async () => {
    e2e = await startE2eServer({ env: { BASE_MODELS: `${BASE}=${SMOLLM2_BASE_MODEL.path}` } });
    const modelId = (await createModel(e2e.api, 'peft', 'door', { base: BASE })).id;
    const pairs = Array.from({ length: 4 }, (): [string, string] => [QUESTION, ANSWER]);
    const { job } = await trainSft(
      e2e,
      modelId,
      'local/peft/door-data',
      pairs,
      { batch_size: 2, learning_rate: 1e-3 },
      5 * 60_000,
    );
    adapterFolder = path.join(e2e.dataDir, 'models', modelId, 'checkpoints', String(job.checkpoint_step));

    // Rows a user would score: the trained model's own answers to the trained and an unrelated question.
    const rows: number[][] = [];
    for (const question of [QUESTION, 'Name three colours.']) {
      const completion = await e2e.api('POST', '/v1/chat/completions', {
        model: `local/peft/door:step${job.checkpoint_step}`,
        messages: [{ role: 'user', content: question }],
        temperature: 0,
        max_tokens: 16,
        return_token_ids: true,
      });
      assert.equal(completion.status, 200, JSON.stringify(completion.body));
      rows.push([...completion.body.prompt_token_ids, ...completion.body.choices[0].token_ids]);
    }
    const engine = e2e.server.services.runtime.sampler();
    ours = (
      await engine.request('forward', {
        base: BASE,
        adapter: 'peft-check',
        adapter_path: adapterFolder,
        rows: rows.map((tokens) => ({ tokens })),
      })
    ).logprobs;
    const conversion = JSON.parse(readFileSync(path.join(SMOLLM2_BASE_MODEL.path, 'conversion.json'), 'utf8')) as {
      source: string;
    };
    expected = await reference({
      gguf: path.join(repoRoot, 'models', '.cache', conversion.source),
      adapter: adapterFolder,
      rows,
    });
  });
  after(async () => {
    await e2e?.close();
  });

  test('PEFT reads our adapter_config.json as a LoRA on every projection', () => {
    const written = JSON.parse(readFileSync(path.join(adapterFolder, 'adapter_config.json'), 'utf8'));
    assert.equal(expected.config.peft_type, 'LORA');
    assert.equal(expected.config.r, written.r);
    assert.equal(expected.config.lora_alpha, written.lora_alpha);
    assert.deepEqual([...(expected.config.target_modules as string[])].sort(), [
      'down_proj',
      'gate_proj',
      'k_proj',
      'o_proj',
      'q_proj',
      'up_proj',
      'v_proj',
    ]);
  });

  test('the trained adapter is not a no-op: it moves the log-probabilities', () => {
    assert.ok(expected.lora_b_max_abs > 0, 'lora_B is all zeros: the SFT step did not train');
    const moved = maxDifference(expected.logprobs, expected.base_logprobs);
    console.log(
      `PEFT: max |B| ${expected.lora_b_max_abs.toExponential(2)}, adapter moves logprobs by up to ${moved.toFixed(3)}`,
    );
    assert.ok(moved > 100 * TOLERANCE, `the adapter changes logprobs by only ${moved}`);
  });

  test('our engine with the adapter equals PEFT within 1e-4 (fp32)', () => {
    assert.deepEqual(
      ours.map((row) => row.length),
      expected.logprobs.map((row) => row.length),
    );
    const difference = maxDifference(ours, expected.logprobs);
    console.log(`PEFT vs engine: max |Δ logprob| ${difference.toExponential(2)} over ${ours.flat().length} positions`);
    assert.ok(difference <= TOLERANCE, `max |Δ logprob| ${difference}`);
  });
});
