/**
 * OpenPipe ART's real client (openpipe-art, pinned in scripts/python/art.txt, run with $ART_PYTHON) against
 * the real server: test/clients/art_session.py registers a TrainableModel with ART's ServerlessBackend,
 * samples with `model.openai_client()`, trains three RL steps on scored groups with `backend.train`,
 * logs with `model.log`, reads `get_step`, prunes with `delete_checkpoints`, runs SFT from a JSONL file
 * (`train_sft_from_file`) and deletes the model. Every request to our training API is ART's own; only
 * W&B's artifact upload is redirected to our artifact endpoint. This file checks what ART got back, and
 * what the server holds afterwards.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BUILTIN_BASE_MODEL, repoRoot } from '../src/config.ts';
import { runJsonScript } from './helpers/reference.ts';
import { startE2eServer, type E2eServer } from './helpers/server.ts';

const ART_PYTHON = process.env.ART_PYTHON ?? path.join(repoRoot, '.venv-art', 'bin', 'python');

function artSession(request: Record<string, unknown>): Promise<Record<string, any>> {
  return runJsonScript<Record<string, any>>(ART_PYTHON, 'test/clients/art_session.py', request);
}

describe('OpenPipe ART client (ServerlessBackend) against the server', () => {
  let e2e: E2eServer;
  let workdir: string;
  let session: Record<string, any>;

  before(async () => {
    e2e = await startE2eServer();
    workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'art-'));
    const started = Date.now();
    session = await artSession({ server: e2e.url, api_key: e2e.key, base_model: BUILTIN_BASE_MODEL.id, workdir });
    console.log(`ART session: ${((Date.now() - started) / 1000).toFixed(1)}s`);
  });
  after(async () => {
    await e2e?.close();
    if (workdir) fs.rmSync(workdir, { recursive: true, force: true });
  });

  test('register resolves the entity, names the model for inference, and returns the existing model again', () => {
    const { register } = session;
    assert.match(register.id, /^[0-9a-f-]{36}$/);
    assert.equal(register.entity, 'local');
    assert.equal(register.again_id, register.id);
    assert.equal(register.inference_name, 'wandb-artifact:///local/art-client/adder');
    assert.equal(session.initial_step, 0);
  });

  test('backend.train: each call ends with a new checkpoint that get_step reports, with the trainer metrics', () => {
    assert.deepEqual(session.rl.map((step: any) => step.step), [1, 2, 3]);
    for (const step of session.rl) {
      assert.equal(step.get_step, step.step);
      assert.equal(step.artifact_name, `local/art-client/adder:step${step.step}`);
      assert.equal(step.metrics['data/step_num_groups_submitted'], 4);
      // A step whose groups all scored alike has nothing to learn from: no gradient step, so no loss.
      if (step.metrics['data/step_num_groups_trainable'] > 0) assert.ok(Number.isFinite(step.metrics['loss/train']), JSON.stringify(step.metrics));
    }
    assert.ok(session.rl.some((step: any) => Number.isFinite(step.metrics['loss/train'])), 'no step trained');
  });

  test('delete_checkpoints keeps only the latest and the best val/reward step', () => {
    assert.deepEqual(session.steps_before_delete, [0, 1, 2, 3]);
    const history = fs.readFileSync(path.join(workdir, 'art-client', 'models', 'adder', 'history.jsonl'), 'utf8').trim().split('\n').map((line) => JSON.parse(line));
    const val = history.filter((row) => 'val/reward' in row);
    const best = Math.max(...val.map((row) => row['val/reward']));
    // ART picks one of the steps with the best val/reward (ties in any order) and keeps it with the latest.
    const kept = session.steps_after_delete as number[];
    assert.ok(kept.includes(3) && kept.length <= 2, JSON.stringify(kept));
    for (const step of kept.filter((step) => step !== 3)) assert.ok(val.some((row) => row.step === step && row['val/reward'] === best), `step ${step} is not a best step`);
  });

  test('SFT from a file goes through our artifact endpoint and trains a new checkpoint the model then serves', () => {
    assert.equal(session.uploads.length, 1);
    assert.match(session.uploads[0].url, /^wandb-artifact:\/\/\/local\/art-client\/adder-sft-data-[0-9a-f]{12}:v0$/);
    assert.deepEqual(session.uploads[0].files.map((file: { name: string }) => file.name), ['train.jsonl']);
    assert.ok(session.sft.after > session.sft.before, JSON.stringify(session.sft));
    assert.equal(typeof session.answer_after_sft, 'string', 'the model answers after SFT');
  });

  test('backend.delete removes the model: ART then gets a 404 for it', async () => {
    assert.equal(session.after_delete, 'NotFoundError');
    assert.equal((await e2e.api('GET', `/v1/preview/models/${session.register.id}`)).status, 404);
  });
});
