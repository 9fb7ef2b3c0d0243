/**
 * ART's SFT through W&B's real `wandb` SDK against the real server, with ART 0.5.18 ($ART_PYTHON, scripts/python/art.txt)
 * and 0.5.23 ($ART_0523_PYTHON, art-0523.txt), each venv pinning the SDK: test/clients/art_wandb_sft.py runs
 * `train_sft_from_file` with WANDB_BASE_URL set to the server and one of its keys as WANDB_API_KEY, as the README tells a
 * self-hosted user (with the key set, ART also opens a W&B run of its own and records provenance through it). The SDK's
 * upload must land in our artifact store under the key's entity, the SFT job must train from it (a checkpoint appears),
 * and the SDK used directly must be refused with a wrong key and told which W&B feature is not served.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BUILTIN_BASE_MODEL, repoRoot } from '../src/config.ts';
import { chromiumAvailable, openBrowser } from './helpers/browser.ts';
import { runJsonScript } from './helpers/reference.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

function client(version: string, env: string, venv: string, requirements: string) {
  const fallback = path.join(repoRoot, venv, 'bin', 'python');
  const python = process.env[env] ?? (fs.existsSync(fallback) ? fallback : undefined);
  const wandbPin = /^wandb==(\S+)$/m.exec(
    fs.readFileSync(path.join(repoRoot, 'scripts', 'python', requirements), 'utf8'),
  )?.[1];
  return {
    version,
    python,
    requirements,
    wandbPin,
    skip: python ? false : `no ART ${version} venv: set ${env} (scripts/test.sh builds ${venv})`,
  };
}

const CLIENTS = [
  client('0.5.18', 'ART_PYTHON', '.venv-art', 'art.txt'),
  client('0.5.23', 'ART_0523_PYTHON', '.venv-art-0523', 'art-0523.txt'),
];

for (const art of CLIENTS) {
  describe(`ART ${art.version} SFT with the real wandb SDK pointed at the server`, { skip: art.skip }, () => {
    let e2e: E2eServer;
    let workdir: string;
    let session: Record<string, any>;

    before(async () => {
      e2e = await startE2eServer();
      workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'art-wandb-'));
      const wandbDirs = Object.fromEntries(
        ['WANDB_DIR', 'WANDB_DATA_DIR', 'WANDB_CACHE_DIR', 'WANDB_CONFIG_DIR'].map((name) => [
          name,
          path.join(workdir, name.toLowerCase()),
        ]),
      );
      const env = { ...process.env, ...wandbDirs, WANDB_BASE_URL: e2e.url, WANDB_API_KEY: e2e.key };
      const started = Date.now();
      session = await runJsonScript(
        art.python!,
        'test/clients/art_wandb_sft.py',
        { server: e2e.url, api_key: e2e.key, base_model: BUILTIN_BASE_MODEL.id, workdir },
        env,
      );
      console.log(`ART ${art.version} + wandb session: ${((Date.now() - started) / 1000).toFixed(1)}s`);
    });
    after(async () => {
      await e2e?.close();
      if (workdir) fs.rmSync(workdir, { recursive: true, force: true });
    });

    test('the real SDK ran: the pinned wandb release, not a stand-in', () => {
      assert.ok(art.wandbPin, `scripts/python/${art.requirements} pins wandb`);
      assert.equal(session.art_version, art.version);
      assert.equal(session.wandb_version, art.wandbPin);
    });

    test("the SDK's upload lands in our store under the key's entity, as the artifact ART sends the SFT job", async () => {
      assert.equal(session.entity, 'local');
      assert.equal(session.training_data_urls.length, 1);
      const [, project, name] =
        /^wandb-artifact:\/\/\/local\/(art-wandb)\/(adder-sft-data-[0-9a-f]{12}):v0$/.exec(
          session.training_data_urls[0],
        ) ?? [];
      assert.ok(name, session.training_data_urls[0]);
      const listed = await e2e.api('GET', `/v1/preview/artifacts/local/${project}/${name}`);
      assert.equal(listed.status, 200);
      assert.deepEqual(
        listed.body.data.map((version: any) => [version.version, version.files.map((file: any) => file.name)]),
        [['v0', ['train.jsonl']]],
      );
      // ART writes the file's conversations anew (in its own order) before the SDK uploads them.
      const stored = await fetch(`${e2e.url}/v1/preview/artifacts/local/${project}/${name}:v0/files/train.jsonl`, {
        headers: { authorization: `Bearer ${e2e.key}` },
      });
      const conversations = (await stored.text())
        .trim()
        .split('\n')
        .map((line) => JSON.stringify(JSON.parse(line).messages));
      assert.deepEqual(
        conversations.sort(),
        session.conversations.map((messages: unknown) => JSON.stringify(messages)).sort(),
      );
    });

    test('the SFT job trains from that artifact: a new checkpoint appears', async () => {
      assert.equal(session.after, session.before + 1);
      const checkpoints = await e2e.api('GET', `/v1/preview/models/${session.model_id}/checkpoints`);
      assert.ok(
        checkpoints.body.data.some((checkpoint: any) => checkpoint.step === session.after),
        JSON.stringify(checkpoints.body),
      );
    });

    test('model.log(split="val") through W&B: the SDK\'s history lines are the model\'s val curve, once each', async () => {
      const metrics = await e2e.api('GET', `/v1/dashboard/models/${session.model_id}/metrics?limit=200`);
      const val = metrics.body.data.filter((row: { source: string }) => row.source === 'wandb:val');
      assert.deepEqual(
        val.map((row: { step: number; split: string; metrics: Record<string, number> }) => [
          row.step,
          row.split,
          row.metrics['val/reward'],
        ]),
        session.val_logged.map(({ step, reward }: { step: number; reward: number }) => [step, 'val', reward]),
      );
      // ART's other W&B keys (training_step, time/…) and W&B's own (_step, _runtime) are not split metrics.
      assert.ok(
        val.every((row: { metrics: Record<string, number> }) =>
          Object.keys(row.metrics).every((key) => key.startsWith('val/')),
        ),
      );
      const summary = await e2e.api('GET', `/v1/dashboard/models/${session.model_id}`);
      assert.deepEqual(
        [summary.body.rewards.val?.value, summary.body.rewards.val?.step],
        [0.75, 2],
        'the model list shows it',
      );
    });

    test('the model page, screenshot-checked: the val curve logged through W&B is drawn', {
      skip: !chromiumAvailable() && 'no Chromium',
    }, async () => {
      const browser = await openBrowser(e2e.url);
      try {
        const page = browser.page;
        page.setDefaultTimeout(60_000);
        await page.addInitScript((key) => sessionStorage.setItem('agent-trainer.api-key', key), e2e.key);
        await page.goto(`/#/models/${session.model_id}`);
        const reward = page.locator('figure[data-chart="Reward"]');
        await reward.locator('canvas').first().waitFor();
        await page.mouse.move(0, 0);
        const legend = await reward
          .locator('.chart-legend li')
          .evaluateAll((nodes) =>
            nodes.map((node) => [node.getAttribute('data-series'), node.getAttribute('data-points')]),
          );
        assert.deepEqual(legend, [['0:val:reward', '3']]);
        await browser.screenshot(`art-${art.version}-wandb-val-curve`);
        assert.deepEqual(browser.problems, [], 'no browser console errors, page errors or failed requests');
      } finally {
        await browser.close();
      }
    });

    test('a wrong key is refused the way the SDK reports authentication errors', () => {
      assert.equal(session.wrong_key.type, 'wandb.errors.errors.CommError');
      assert.match(session.wrong_key.message, /Invalid or revoked API key/);
    });

    test('a W&B feature the server does not serve is named in the error the SDK raises, and nothing is stored', async () => {
      assert.match(
        session.unsupported_alias.message,
        /Artifact aliases other than "latest" \("best"\): not supported by this server/,
      );
      assert.equal((await e2e.api('GET', '/v1/preview/artifacts/local/art-wandb/aliased-data')).status, 404);
    });
  });
}
