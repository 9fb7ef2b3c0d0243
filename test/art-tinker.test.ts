/**
 * OpenPipe ART's TinkerNativeBackend (openpipe-art 0.5.18 and the tinker 0.18 SDK it pins, run with $ART_TINKER_PYTHON)
 * against the real server through our Tinker API, configured only by TINKER_BASE_URL and TINKER_API_KEY:
 * test/clients/art_tinker_session.py registers a model, samples rollouts through ART's own chat server (which samples
 * through us), trains an RL step, and downloads the trained checkpoint with the SDK's archive call. This file checks
 * what ART got, that the checkpoints it saved are ordinary checkpoints served by our chat completions, and that the
 * signed download URL is refused once altered or expired.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BUILTIN_BASE_MODEL } from '../src/config.ts';
import { openStore } from '../src/store/db.ts';
import { ARCHIVE_URL_TTL_SECONDS, parseTinkerPath } from '../src/tinker/schemas.ts';
import { runJsonScript } from './helpers/reference.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const ART_TINKER_PYTHON = process.env.ART_TINKER_PYTHON;
const skip = ART_TINKER_PYTHON
  ? false
  : 'ART_TINKER_PYTHON is not set (the python of a venv from scripts/python/art-tinker.txt)';

interface Session {
  run_id: string;
  step_before: number;
  sampled: string[];
  train: { step: number; metrics: Record<string, number> };
  step_after: number;
  sampler_paths: Record<string, string>;
  trained_answer: string;
  archive: { url: string; expires: string; members: Record<string, string> };
}

describe(`ART's TinkerNativeBackend against our Tinker API${skip ? ` — skipped: ${skip}` : ''}`, { skip }, () => {
  let e2e: E2eServer;
  let workdir: string;
  let session: Session;
  /** Shifts the server's clock forward, to reach a signed URL's expiry without waiting for it. */
  let clockOffsetMs = 0;

  before(async () => {
    e2e = await startE2eServer({ clock: { now: () => new Date(Date.now() + clockOffsetMs) } });
    workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'art-tinker-'));
    fs.mkdirSync(path.join(workdir, path.dirname(BUILTIN_BASE_MODEL.id)), { recursive: true });
    fs.symlinkSync(BUILTIN_BASE_MODEL.path, path.join(workdir, BUILTIN_BASE_MODEL.id));
    const started = Date.now();
    session = await runJsonScript<Session>(ART_TINKER_PYTHON!, 'test/clients/art_tinker_session.py', {
      server: e2e.url,
      api_key: e2e.key,
      base_model: BUILTIN_BASE_MODEL.id,
      workdir,
    });
    console.log(`ART TinkerNativeBackend session: ${((Date.now() - started) / 1000).toFixed(1)}s`);
  });
  after(async () => {
    await e2e?.close();
    if (workdir) fs.rmSync(workdir, { recursive: true, force: true });
  });

  const modelId = () => parseTinkerPath(session.sampler_paths['1'])!.modelId;

  test('ART trains an RL step through our Tinker API: one forward_backward and one optim_step on its training client', async () => {
    assert.equal(session.step_before, 0);
    assert.equal(session.train.step, 1);
    assert.equal(session.step_after, 1);
    assert.equal(session.sampled.length, 6);
    assert.equal(session.train.metrics['data/step_num_datums'], 6, JSON.stringify(session.train.metrics));
    assert.ok(Number.isFinite(session.train.metrics['loss:sum']), JSON.stringify(session.train.metrics));
    assert.ok(
      session.train.metrics['loss/grad_norm'] > 0,
      JSON.stringify({ metrics: session.train.metrics, sampled: session.sampled }),
    );
    assert.equal(typeof session.trained_answer, 'string');
    const store = openStore({ databaseUrl: null, dataDir: e2e.dataDir });
    try {
      const rows = await store.db
        .selectFrom('tinker_futures')
        .select('kind')
        .where('model_id', '=', modelId())
        .execute();
      const kinds = rows.map((row) => row.kind);
      assert.equal(kinds.filter((kind) => kind === 'forward_backward').length, 1, JSON.stringify(kinds));
      assert.equal(kinds.filter((kind) => kind === 'optim_step').length, 1, JSON.stringify(kinds));
    } finally {
      await store.close();
    }
  });

  test("ART's checkpoints are ordinary checkpoints of one of our models, served by chat completions", async () => {
    assert.deepEqual(Object.keys(session.sampler_paths).sort(), ['0', '1']);
    assert.match(session.sampler_paths['1'], /\/sampler_weights\/step_000001$/);
    const model = await e2e.api('GET', `/v1/preview/models/${modelId()}`);
    assert.equal(model.status, 200, JSON.stringify(model.body));
    assert.equal(model.body.project, 'tinker');
    assert.equal(model.body.base_model, BUILTIN_BASE_MODEL.id);
    const steps: number[] = (await e2e.api('GET', `/v1/preview/models/${modelId()}/checkpoints`)).body.data.map(
      (checkpoint: { step: number }) => checkpoint.step,
    );
    const trained = Math.max(...steps);
    // The archive ART's SDK downloaded is of ART's step 1, which is our latest step.
    assert.match(session.archive.url, new RegExp(`/checkpoint_archives/${modelId()}/${trained}\\?`));
    const name = `${model.body.entity}/${model.body.project}/${model.body.name}`;
    for (const served of [`${name}:step${trained}`, name]) {
      const answer = await e2e.api('POST', '/v1/chat/completions', {
        model: served,
        messages: [{ role: 'user', content: 'What is 2 + 2?' }],
        max_tokens: 4,
        temperature: 0,
      });
      assert.equal(answer.status, 200, `${served}: ${JSON.stringify(answer.body)}`);
      assert.equal(typeof answer.body.choices[0].message.content, 'string');
    }
  });

  test("the SDK's archive call downloads the checkpoint: the PEFT adapter of the preview export plus Tinker's completion marker", async () => {
    assert.deepEqual(Object.keys(session.archive.members).sort(), [
      'adapter_config.json',
      'adapter_model.safetensors',
      'checkpoint_complete',
    ]);
    const expires = Date.parse(`${session.archive.expires}Z`);
    assert.ok(
      Math.abs(expires - (Date.now() + ARCHIVE_URL_TTL_SECONDS * 1000)) < ARCHIVE_URL_TTL_SECONDS * 1000,
      session.archive.expires,
    );
    const step = Number(new URL(session.archive.url).pathname.split('/').at(-1));
    const exported = Buffer.from(
      await (
        await fetch(`${e2e.url}/v1/preview/models/${modelId()}/checkpoints/${step}/adapter`, {
          headers: { authorization: `Bearer ${e2e.key}` },
        })
      ).arrayBuffer(),
    );
    const archive = await fetch(session.archive.url);
    assert.equal(archive.status, 200);
    const bytes = Buffer.from(await archive.arrayBuffer());
    // The same members, byte for byte, before the export's end-of-archive marker (two zero blocks).
    assert.ok(bytes.subarray(0, exported.length - 1024).equals(exported.subarray(0, exported.length - 1024)));
  });

  test('a signed URL altered in any part, or used after it expired, is refused', async () => {
    const url = new URL(session.archive.url);
    const signature = url.searchParams.get('signature')!;
    const altered = (change: (target: URL) => void) => {
      const copy = new URL(url);
      change(copy);
      return copy.toString();
    };
    const cases = [
      altered((target) =>
        target.searchParams.set('signature', `${signature[0] === '0' ? '1' : '0'}${signature.slice(1)}`),
      ),
      altered((target) =>
        target.searchParams.set('expires', String(Number(target.searchParams.get('expires')) + 3600)),
      ),
      altered((target) => (target.pathname = target.pathname.replace(/\/\d+$/, '/1'))),
      altered((target) => target.searchParams.delete('signature')),
      // The same numbers written otherwise are not what was signed.
      altered((target) => (target.pathname = target.pathname.replace(/\/(\d+)$/, '/0$1'))),
      altered((target) => target.searchParams.set('expires', `0${target.searchParams.get('expires')}`)),
    ];
    for (const candidate of cases) {
      const answer = await fetch(candidate);
      assert.equal(answer.status, 403, candidate);
      assert.match(
        JSON.stringify(await answer.json()),
        /download URL (has a signature that does not match|is malformed)/,
      );
    }
    clockOffsetMs = (ARCHIVE_URL_TTL_SECONDS + 60) * 1000;
    try {
      const expired = await fetch(url);
      assert.equal(expired.status, 403);
      assert.match(JSON.stringify(await expired.json()), /download URL expired at/);
    } finally {
      clockOffsetMs = 0;
    }
    assert.equal((await fetch(url)).status, 200, 'the untouched URL still works before its expiry');
  });

  test("another entity's key gets no archive URL for the checkpoint", async () => {
    const other = await e2e.server.services.auth.createKey('art-tinker-other');
    const checkpointId = session.sampler_paths['1'].split('/').slice(-2).join('/');
    const answer = await fetch(`${e2e.url}/api/v1/training_runs/${modelId()}/checkpoints/${checkpointId}/archive`, {
      headers: { 'x-api-key': `tml-${other.key}` },
      redirect: 'manual',
    });
    assert.equal(answer.status, 404);
  });
});
