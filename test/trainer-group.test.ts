/**
 * The trainer as a process group, through the real HTTP API, engines and database: with
 * TRAINER_WORLD_SIZE=2 torch's launcher starts two trainer ranks (gloo, the base sharded with FSDP2), RL and SFT jobs
 * complete and their checkpoints are served at once, the system check shows each rank's process and memory, and
 * `kill -9` of one rank fails only the job it was running; a group that cannot start says why in bounded time.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { repoRoot } from '../src/config.ts';
import { trainerGroupProcess } from '../src/engine/roles.ts';
import { EngineSupervisor } from '../src/engine/supervisor.ts';
import { enginePython } from './helpers/engine-process.ts';
import { waitFor } from './helpers/poll.ts';
import { allEvents, jobAtItsFirstStep, sampleGroup, trainRl, trainSft, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const MODEL = 'local/group/policy';
/** Many one-sequence rows, so a job takes many gradient steps (seconds on the tiny model): time to kill a rank. */
const MANY_STEPS = { packed_sequence_length: 64, learning_rate: 0.01 };

type Rank = { rank: number; pid: number; host: string; device: string; rss_bytes?: number; memory?: any };

describe('a trainer of two ranks', () => {
  let e2e: E2eServer;
  let modelId: string;
  let groups: Awaited<ReturnType<typeof sampleGroup>>[];

  const trainer = async () => {
    const check = await e2e.api('GET', '/v1/system-check');
    assert.equal(check.status, 200, JSON.stringify(check.body));
    return (check.body.engine.engines as Record<string, any>[]).find((engine) => engine.role === 'trainer')!;
  };
  const checkpoints = async () =>
    (await e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints?limit=100`)).body.data as { step: number }[];

  before(async () => {
    e2e = await startE2eServer({ env: { ENGINES: 'separate', TRAINER_WORLD_SIZE: '2' } });
    modelId = (
      await e2e.api('POST', '/v1/preview/models', { project: 'group', name: 'policy', base_model: 'builtin/tiny-chat' })
    ).body.id;
    groups = [];
    for (const [g, prompt] of ['Name a colour.', 'Count to three.', 'Say hello.'].entries())
      groups.push(await sampleGroup(e2e, MODEL, prompt, 4, (_, i) => i % 2, 10 * g));
  });
  after(async () => {
    await e2e?.close();
  });

  test('the system check shows the trainer as two ranks, each with its process and memory by kind', async () => {
    const entry = await trainer();
    const ranks = entry.ranks as Rank[];
    assert.deepEqual(
      ranks.map((rank) => rank.rank),
      [0, 1],
    );
    assert.equal(new Set(ranks.map((rank) => rank.pid)).size, 2);
    assert.ok(!ranks.some((rank) => rank.pid === entry.pid), 'the launcher is not a rank');
    for (const rank of ranks) {
      assert.equal(rank.device, 'cpu');
      assert.ok(rank.rss_bytes && rank.rss_bytes > 0, JSON.stringify(rank));
      for (const kind of [
        'weights_bytes',
        'adapters_bytes',
        'optimizer_bytes',
        'kv_cache_bytes',
        'activations_peak_bytes',
      ])
        assert.equal(typeof rank.memory[kind], 'number', `${kind} of rank ${rank.rank}`);
      assert.equal(rank.memory.kv_cache_bytes, 0); // a trainer never samples
    }
  });

  test('an RL job and an SFT job complete, and each checkpoint is served at once', async () => {
    const rl = await trainRl(e2e, modelId, groups, { learning_rate: 0.01 });
    const sft = await trainSft(e2e, modelId, 'local/group/sft', [['Name a colour.', 'Blue.']], {
      batch_size: 1,
      learning_rate: 0.01,
    });
    for (const step of [rl.job.checkpoint_step, sft.job.checkpoint_step]) {
      const served = await e2e.api('POST', '/v1/chat/completions', {
        model: `${MODEL}:step${step}`,
        messages: [{ role: 'user', content: 'Name a colour.' }],
        max_tokens: 4,
        logprobs: true,
      });
      assert.equal(served.status, 200, JSON.stringify(served.body));
    }
    // Both ranks held their share of the base and of the adapter while training.
    for (const rank of (await trainer()).ranks as Rank[])
      assert.ok(rank.memory.weights_bytes > 0 && rank.memory.activations_peak_bytes >= 0, JSON.stringify(rank));
  });

  test('kill -9 of one rank mid-job fails that job (training_failed, no checkpoint); the group restarts and the next job runs', async () => {
    const before = (await checkpoints()).length;
    const restarts = (await trainer()).restarts;
    const follower = ((await trainer()).ranks as Rank[]).find((rank) => rank.rank === 1)!;
    const job = { id: await jobAtItsFirstStep(e2e, modelId, groups, MANY_STEPS) };
    process.kill(follower.pid, 'SIGKILL');
    const failed = await waitForJob(e2e, job.id, 120_000);
    assert.equal(failed.status, 'FAILED');
    // The rank that dies ends the group: the job hears it from rank 0 (its group failed) or from the exit itself.
    assert.match(failed.error.message, /engine .*exited|trainer's group of 2 ranks failed/);
    assert.equal((await allEvents(e2e, job.id)).at(-1)?.type, 'training_failed');
    assert.equal((await checkpoints()).length, before, 'a failed job lists no checkpoint');

    await waitFor(
      'the group to restart',
      async () => {
        const check = await e2e.api('GET', '/v1/system-check');
        return check.status === 200 && (await trainer()).restarts > restarts;
      },
      { timeoutMs: 120_000, intervalMs: 200 },
    );
    const again = (await trainer()).ranks as Rank[];
    assert.equal(again.length, 2);
    assert.ok(!again.some((rank) => rank.pid === follower.pid));
    await trainRl(e2e, modelId, groups.slice(0, 1), {}, 120_000);
    assert.equal((await checkpoints()).length, before + 1);
  });
});

describe('a trainer group that cannot start', () => {
  /** The trainer supervisor the server would make for `group`; resolves with why it cannot start and how long that took. */
  async function startFailure(
    group: Parameters<typeof trainerGroupProcess>[0],
    args: string[] = [],
  ): Promise<{ error: Error; seconds: number; supervisor: EngineSupervisor }> {
    const { launcher, role } = trainerGroupProcess(group);
    const supervisor = new EngineSupervisor({
      logger: { info() {}, warn() {}, error() {} },
      python: await enginePython(),
      launcher,
      args: ['--threads', '1', ...(role ?? []), ...args],
      requestWaitMs: 300_000, // what ends the wait must be the failure, not this
      restartBackoff: { initialMs: 60_000, maxMs: 60_000, stableAfterMs: 60_000 },
    });
    const t0 = Date.now();
    supervisor.start();
    const error = await supervisor.waitUntilReady().then(
      () => assert.fail('the group started'),
      (e: Error) => e,
    );
    return { error, seconds: (Date.now() - t0) / 1000, supervisor };
  }

  test('more ranks than GPUs: the start fails with the reason, and is not retried', async () => {
    const { error, seconds, supervisor } = await startFailure(
      { worldSize: 2, nodes: 1, rendezvous: null, timeoutS: 60 },
      ['--device', 'cuda'],
    );
    try {
      assert.match(error.message, /2 trainer ranks on this node need 2 CUDA devices/);
      assert.ok(seconds < 90, `${seconds} s`);
      assert.equal(supervisor.health().state, 'failed');
      await assert.rejects(supervisor.request('stats', {}), /need 2 CUDA devices/); // at once, not after a wait
    } finally {
      await supervisor.stop();
    }
  });

  test('a rendezvous that never forms: the start fails naming the timeout, within it', async () => {
    const { error, seconds, supervisor } = await startFailure({
      worldSize: 2,
      nodes: 2,
      rendezvous: `127.0.0.1:${20_000 + (process.pid % 20_000)}`,
      timeoutS: 5,
    });
    try {
      assert.match(error.message, /exited before it was ready.*(Timed out|timed out|waiting for clients)/);
      assert.ok(seconds < 60, `${seconds} s`);
    } finally {
      await supervisor.stop();
    }
  });
});

/** A port free on loopback now (for the second node's rendezvous). */
async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  return port;
}

describe('two nodes on loopback: the server launches node 0, node 1 joins with the same launcher', () => {
  let e2e: E2eServer;
  let node1: ChildProcess;

  before(async () => {
    const endpoint = `127.0.0.1:${await freePort()}`;
    // What an operator runs on the second node (docs/trainer-group.md), here beside the first.
    node1 = spawn(
      await enginePython(),
      [
        ...['-m', 'torch.distributed.run', '--nnodes=2', '--node-rank=1', '--nproc-per-node=1', '--max-restarts=0'],
        ...['--rdzv-backend=static', `--rdzv-endpoint=${endpoint}`, '--rdzv-conf=timeout=120'],
        ...['-m', 'engine', '--role', 'trainer', '--dist-timeout', '120', '--threads', '1'],
      ],
      { cwd: repoRoot, stdio: ['ignore', 'ignore', 'ignore'] },
    );
    e2e = await startE2eServer({
      env: {
        TRAINER_WORLD_SIZE: '2',
        TRAINER_NNODES: '2',
        TRAINER_RDZV_ENDPOINT: endpoint,
        TRAINER_RDZV_TIMEOUT: '120',
      },
    });
  });
  after(async () => {
    if (!closed) await e2e?.close();
    node1.kill('SIGKILL');
  });
  let closed = false;

  test("the group spans both launchers, an RL job completes, and node 1 ends with the server's group", async () => {
    const check = await e2e.api('GET', '/v1/system-check');
    const trainer = (check.body.engine.engines as Record<string, any>[]).find((engine) => engine.role === 'trainer')!;
    assert.deepEqual(
      (trainer.ranks as Rank[]).map((rank) => rank.rank),
      [0, 1],
    );
    const modelId = (
      await e2e.api('POST', '/v1/preview/models', { project: 'nodes', name: 'policy', base_model: 'builtin/tiny-chat' })
    ).body.id;
    const group = await sampleGroup(e2e, 'local/nodes/policy', 'Say hello.', 4, (_, i) => i % 2);
    await trainRl(e2e, modelId, [group], { learning_rate: 0.01 }, 120_000);

    const exited = once(node1, 'exit');
    await e2e.close(); // rank 0 stops its group as it stops: node 1's rank and launcher end with it
    closed = true;
    const [code] = (await Promise.race([
      exited,
      new Promise((r) => setTimeout(() => r(['still running']), 30_000)),
    ])) as [unknown];
    assert.equal(code, 0);
  });
});
