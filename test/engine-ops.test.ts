/**
 * The engine protocol has one home, engine/protocol.json: src/engine/protocol.ts (every message's type, the op
 * table) and the op table of docs/engine-protocol.md are generated from it (`npm run protocol`), and fail here
 * when they are not what it generates; engine/tests/test_ops.py holds the engine's handlers and parsers to it, and
 * the engine's tests check every reply they read against it. And the sampler pool routes by that table: no engine
 * is started here, the samplers are recorders.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { DOC_FILE, generated, readSchema, TYPES_FILE } from '../scripts/engine-protocol.ts';
import { EngineError } from '../src/engine/errors.ts';
import { ReplyStream } from '../src/engine/generate-stream.ts';
import { OPS, type OpName, type SamplerEngine } from '../src/engine/ops.ts';
import { SamplerPool } from '../src/engine/roles.ts';

describe('the protocol schema', () => {
  test('src/engine/protocol.ts and the doc’s op table are what engine/protocol.json generates', () => {
    const fresh = generated();
    assert.equal(readFileSync(TYPES_FILE, 'utf8'), fresh.types, 'run `npm run protocol` and commit the result');
    assert.equal(readFileSync(DOC_FILE, 'utf8'), fresh.doc, 'run `npm run protocol` and commit the result');
  });

  test('the op table the server routes by is the schema’s', () => {
    const schema = readSchema();
    assert.ok(Object.keys(schema.ops).length > 10);
    assert.deepEqual(
      Object.fromEntries(Object.entries(OPS).map(([op, info]) => [op, [info.role, info.streams, 'every' in info]])),
      Object.fromEntries(
        Object.entries(schema.ops).map(([op, spec]) => [op, [spec.role, spec.streams, spec.every === true]]),
      ),
    );
  });

  test('the doc’s table of forward_backward losses names the schema’s losses and each one’s config keys', () => {
    const { $defs } = readSchema();
    const configs = $defs.StepLossConfigs.properties ?? {};
    const keysOf = (node: { $ref?: string; properties?: Record<string, unknown> }) =>
      Object.keys((node.$ref ? $defs[node.$ref.slice(node.$ref.lastIndexOf('/') + 1)] : node).properties ?? {});
    const schema = Object.entries(configs).map(([loss, node]) => [loss, keysOf(node).join(', ')]);
    const rows = readFileSync(DOC_FILE, 'utf8').matchAll(/^\| `(\w+)` \| (`\{\}`|`[\w`, ]+`) \|.*\|$/gm);
    const doc = [...rows].map(([, loss, keys]) => [loss, keys === '`{}`' ? '' : keys.replaceAll('`', '')]);
    assert.deepEqual(doc, schema);
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
