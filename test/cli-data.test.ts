/** The data commands of the CLI against a real server: upload with a progress bar, and sft followed to its end. */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const run = promisify(execFile);

describe('cli upload and sft', () => {
  let e2e: E2eServer;
  let folder: string;
  before(async () => {
    e2e = await startE2eServer();
    folder = fs.mkdtempSync(path.join(os.tmpdir(), 'cli-data-'));
    const line = JSON.stringify({
      messages: [
        { role: 'user', content: 'Ping?' },
        { role: 'assistant', content: 'Pong.' },
      ],
    });
    fs.writeFileSync(path.join(folder, 'train.jsonl'), `${line}\n${line}\n${line}\n`);
    fs.writeFileSync(path.join(folder, 'metadata.json'), '{}');
  });
  after(async () => {
    await e2e.close();
  });

  const cli = (args: string[]) =>
    run(process.execPath, ['--import', 'tsx', 'src/main.ts', ...args, '--url', e2e.url, '--key', e2e.key], {
      env: { ...process.env, DATA_DIR: e2e.dataDir },
    });

  test('upload prints the artifact URL on its last line and shows progress', async () => {
    const { stdout, stderr } = await cli(['upload', folder, '--project', 'cli', '--name', 'chats']);
    assert.equal(stdout.trim().split('\n').at(-1), 'wandb-artifact:///local/cli/chats:v0');
    assert.match(stdout, /train\.jsonl\s+\d+ bytes\s+sha256 [0-9a-f]{64}/);
    assert.match(stderr, /upload \[#+\]\s+100%/);
  });

  test('sft (given the model by name) uploads, starts a job and follows it to its checkpoint', async () => {
    const model = (
      await e2e.api('POST', '/v1/preview/models', { project: 'cli', name: 'tuned', base_model: 'builtin/tiny-chat' })
    ).body;
    const { stdout, stderr } = await cli([
      'sft',
      '--model-id',
      'local/cli/tuned',
      path.join(folder, 'train.jsonl'),
      '--batch-size',
      '1',
    ]);
    assert.match(stdout, /SFT job finished .*wandb-artifact:\/\/\/local\/cli\/tuned-sft-data:v0.*checkpoint step 1/);
    assert.match(stderr, /train \[#+\]\s+100% 3\/3/);
    const checkpoints = await e2e.api('GET', `/v1/preview/models/${model.id}/checkpoints`);
    assert.deepEqual(
      checkpoints.body.data.map((c: { step: number }) => c.step),
      [0, 1],
    );
  });

  test('sft --dry-run checks every line here and names each bad one; a real run with bad data uploads nothing', async () => {
    const bad = path.join(folder, 'bad');
    fs.mkdirSync(bad);
    const good = JSON.stringify({
      messages: [
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: 'Hello' },
      ],
    });
    fs.writeFileSync(
      path.join(bad, 'train.jsonl'),
      `${good}\n{"messages": 3}\n\n${good}\nnot json\n${JSON.stringify({ messages: [], tools: 'x' })}\n`,
    );
    const dry = cli(['sft', '--dry-run', bad]);
    await assert.rejects(dry, (error: { stdout: string; stderr: string }) => {
      assert.match(error.stdout, /train\.jsonl: 2 conversations/);
      assert.match(error.stderr, /train\.jsonl line 2: expected an object with a "messages" array/);
      assert.match(error.stderr, /train\.jsonl line 5: not valid JSON/);
      assert.match(error.stderr, /train\.jsonl line 6: "tools" must be an array/);
      return true;
    });
    const { stdout } = await cli(['sft', '--dry-run', path.join(folder, 'train.jsonl')]);
    assert.match(stdout, /train\.jsonl: 3 conversations\n.*valid; nothing was uploaded/);

    const model = (
      await e2e.api('POST', '/v1/preview/models', { project: 'cli', name: 'careful', base_model: 'builtin/tiny-chat' })
    ).body;
    await assert.rejects(cli(['sft', '--model-id', model.id, bad]), /nothing was uploaded[\s\S]*line 2/);
    assert.deepEqual((await e2e.api('GET', '/v1/preview/artifacts/local/cli/careful-sft-data')).body.data ?? [], []);
  });
});
