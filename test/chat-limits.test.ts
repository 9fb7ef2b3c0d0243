/** The in-flight limit of chat completions: beyond it, 429 with retry-after; capacity returns when requests end. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { waitFor } from './helpers/poll.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

describe('chat in-flight limit', () => {
  let e2e: E2eServer;
  before(async () => {
    e2e = await startE2eServer({ env: { MAX_INFLIGHT_CHAT: '2' } });
  });
  after(async () => {
    await e2e.close();
  });

  const chat = (body: Record<string, unknown>, signal?: AbortSignal) =>
    fetch(`${e2e.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], ...body }),
      signal,
    });

  test('a request beyond the limit is 429 with retry-after; a finished one frees its place', async () => {
    const abort = new AbortController();
    const long = { stream: true, max_tokens: 1500, ignore_eos: true };
    const streams = [await chat(long, abort.signal), await chat(long, abort.signal)];
    assert.deepEqual(
      streams.map((response) => response.status),
      [200, 200],
    );
    const refused = await chat({ max_tokens: 1 });
    assert.equal(refused.status, 429);
    assert.equal(refused.headers.get('retry-after'), '1');
    const body = await refused.json();
    assert.equal(body.error.type, 'RateLimitError');
    assert.equal(body.error.code, 429);

    abort.abort();
    await Promise.all(streams.map((response) => response.body?.cancel().catch(() => undefined)));
    await waitFor('a chat to be admitted again', async () => (await chat({ max_tokens: 1 })).status === 200, {
      timeoutMs: 5000,
      intervalMs: 50,
    });
  });
});
