/**
 * The engine's op table has one meaning on every side: `OPS` of src/engine/ops.ts, `OPS` of engine/server.py and
 * the op table of docs/engine-protocol.md list the same ops, with the same role, streaming and sampler fan-out
 * (engine/tests/test_ops.py checks the engine's threads against the same doc). And the sampler pool routes by
 * that table: no engine is started here, the samplers are recorders.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { EngineError } from '../src/engine/errors.ts';
import { ReplyStream } from '../src/engine/generate-stream.ts';
import { OPS, type OpName, type SamplerEngine } from '../src/engine/ops.ts';
import { SamplerPool } from '../src/engine/roles.ts';

const read = (path: string) => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');

/** op → [role, streams, every, thread] from the doc's table. */
function docTable(): Map<string, string[]> {
  const rows = read('docs/engine-protocol.md').matchAll(/^\| `(\w+)` \| (\w+) \| (\w+) \| (\w+) \| (\w+) \|$/gm);
  return new Map([...rows].map(([, op, ...cells]) => [op, cells]));
}

describe('the op table', () => {
  test('the TypeScript map, the engine and the doc list the same ops', () => {
    const doc = [...docTable().keys()].sort();
    const engine = [...read('engine/server.py').matchAll(/^ {4}"(\w+)": Op\(/gm)].map((match) => match[1]).sort();
    assert.ok(doc.length > 10, 'the doc has an op table');
    assert.deepEqual(Object.keys(OPS).sort(), doc);
    assert.deepEqual(engine, doc);
  });

  test('role, streaming and fan-out are the doc’s', () => {
    const doc = docTable();
    for (const [op, info] of Object.entries(OPS)) {
      const [role, streams, every] = doc.get(op)!;
      assert.deepEqual(
        [info.role, info.streams ? 'yes' : 'no', 'every' in info ? 'yes' : 'no'],
        [role, streams, every],
        op,
      );
    }
  });
});

/** A sampler that answers every op with a reply naming itself, and records what it was sent. */
function recorder(name: string, flags: Record<string, boolean> = {}) {
  const sent: OpName[] = [];
  const engine: SamplerEngine = {
    request: async (op) => {
      sent.push(op);
      return { from: name, ...flags } as never;
    },
    generate: () => {
      sent.push('generate');
      return new ReplyStream(name, async () => undefined);
    },
  };
  return { engine, sent };
}

describe('the sampler pool', () => {
  test('sends state to every sampler, merges their flags, and sends the rest to the least busy', async () => {
    const [idle, busy] = [recorder('idle', { loaded: false }), recorder('busy', { loaded: true })];
    const pool = new SamplerPool([
      { engine: busy.engine, busyness: () => 5 },
      { engine: idle.engine, busyness: () => 0 },
    ]);
    assert.deepEqual(await pool.request('ensure_adapter', { adapter: 'a', base: 'b' }), { from: 'busy', loaded: true });
    await pool.request('load_base', { base: 'b', path: '/b' });
    assert.deepEqual(await pool.request('stats', {}), { from: 'idle', loaded: false });
    await pool.request('forward', { base: 'b', adapter: null, rows: [] });
    pool.generate({ base: 'b', adapter: null, prompt: [1], max_tokens: 1 });
    assert.deepEqual(idle.sent, ['ensure_adapter', 'load_base', 'stats', 'forward', 'generate']);
    assert.deepEqual(busy.sent, ['ensure_adapter', 'load_base']);
  });

  test('refuses trainer ops, even when a caller names one at run time', async () => {
    const only = recorder('only');
    const pool = new SamplerPool([{ engine: only.engine, busyness: () => 0 }]);
    const op = 'optim_step' as never;
    await assert.rejects(
      pool.request(op, {} as never),
      (error: unknown) => error instanceof EngineError && error.code === 'bad_request',
    );
    assert.deepEqual(only.sent, []);
  });
});
