/** The command line as an operator uses it: bootstrap key on first start, keys create/list/revoke, team membership. */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { promisify } from 'node:util';
import { fakeBaseModelFolder } from './helpers/app.ts';
import { serverEnv, spawnListening } from './helpers/server-process.ts';

const run = promisify(execFile);
const cli = (args: string[], env: Record<string, string>) =>
  run(process.execPath, ['--import', 'tsx', 'src/main.ts', ...args], { env: { ...process.env, ...env } });

describe('cli', () => {
  test('keys create prints the key alone on its last line; list and revoke manage it', async () => {
    const env = { DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'cli-test-')) };
    const created = await cli(['keys', 'create', '--entity', 'alice'], env);
    const lines = created.stdout.trim().split('\n');
    const key = lines.at(-1)!;
    assert.match(key, /^sk-[A-Za-z0-9_-]{43}$/);
    const listed = await cli(['keys', 'list'], env);
    assert.match(listed.stdout, /alice/);
    assert.ok(!listed.stdout.includes(key));
    await cli(['teams', 'add-member', '--team', 'research', '--entity', 'alice'], env);
    await cli(['keys', 'revoke', key], env);
    assert.match((await cli(['keys', 'list'], env)).stdout, /REVOKED/);
    await assert.rejects(cli(['keys', 'revoke', key], env), /no live key/);
  });

  test('every command has its own --help; a missing required option names it', async () => {
    const env = { DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'cli-test-')) };
    for (const [args, expected] of [
      [['--help'], /Usage: npm run cli -- \[options\] \[command\][\s\S]*checkpoints/],
      [
        ['sft', '--help'],
        /Usage: npm run cli -- sft \[options\] <paths\.\.\.>[\s\S]*--model-id <model>[\s\S]*--dry-run/,
      ],
      [['checkpoints', 'download', '--help'], /--url <url>[\s\S]*--step <n>[\s\S]*--output <file>/],
      [['keys', 'create', '--help'], /--entity <name>/],
    ] as const) {
      assert.match((await cli([...args], env)).stdout, expected, args.join(' '));
    }
    await assert.rejects(cli(['keys', 'create'], env), /required option '--entity <name>' not specified/);
    await assert.rejects(cli(['nonsense'], env), /unknown command 'nonsense'/);
  });

  test('a command with no server answering says where it looked and how to point it elsewhere', async () => {
    const env = { DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'cli-test-')), API_KEY: `sk-${'c'.repeat(43)}` };
    const args = ['checkpoints', 'download', '--model-id', 'm', '--step', '1'];
    // A port that was free a moment ago: nothing listens there.
    const probe = net.createServer().listen(0, '127.0.0.1');
    await once(probe, 'listening');
    const port = (probe.address() as net.AddressInfo).port;
    probe.close();
    await assert.rejects(
      cli([...args, '--url', `http://127.0.0.1:${port}`], env),
      new RegExp(
        `no agent-trainer server answers at http://127\\.0\\.0\\.1:${port} \\(ECONNREFUSED\\).*--url or AGENT_TRAINER_URL`,
      ),
    );
    await assert.rejects(
      cli(args, { ...env, AGENT_TRAINER_URL: `http://127.0.0.1:${port}/` }),
      new RegExp(`answers at http://127\\.0\\.0\\.1:${port} `),
    );
  });

  test('serve bootstraps the configured key into an owner-only file and answers with it', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'serve-test-'));
    const key = `sk-${'b'.repeat(43)}`;
    const env = await serverEnv({
      dataDir,
      key,
      env: { ENGINE: 'off', BASE_MODELS: `test/base=${fakeBaseModelFolder()}` },
    });
    const { child, url, banner } = await spawnListening(env);
    try {
      const file = path.join(dataDir, 'bootstrap-api-key');
      assert.equal(fs.readFileSync(file, 'utf8').trim(), key);
      assert.equal(fs.statSync(file).mode & 0o777, 0o600);
      assert.match(banner, /API key file: .*bootstrap-api-key/);
      const response = await fetch(`${url}/v1/preview/models`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ project: 'p', name: 'm', base_model: 'test/base' }),
      });
      assert.equal(response.status, 200);
      assert.equal((await response.json()).entity, 'local');
    } finally {
      child.kill('SIGTERM');
    }
  });
});
