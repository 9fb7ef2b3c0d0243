/**
 * Chat completions: the server's own cost per request (its Server-Timing total minus the engine time it
 * reports for the same request) as p50/p99, and streaming throughput with 32 concurrent clients vs one.
 * Prints figures; asserts nothing.
 * Usage: npx tsx bench/chat-overhead.ts
 */
import { startE2eServer } from '../test/helpers/server.ts';

const REQUESTS = 200;
const percentile = (values: number[], p: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor((p / 100) * values.length))];

const e2e = await startE2eServer();
try {
  const services = e2e.server.services;
  await services.runtime.load('builtin/tiny-chat');
  const messages = [{ role: 'user', content: 'What is 2 + 2?' }];
  const body = { model: 'builtin/tiny-chat', messages, max_tokens: 1, temperature: 0 };

  const serverOverhead = async () => {
    const response = await fetch(`${e2e.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    await response.json();
    const timing = Object.fromEntries(
      (response.headers.get('server-timing') ?? '').split(',').map((part) => {
        const [name, duration] = part.trim().split(';dur=');
        return [name, Number(duration)];
      }),
    );
    return timing.total - timing.engine;
  };
  for (let i = 0; i < 20; i += 1) await serverOverhead();
  const overheads: number[] = [];
  for (let i = 0; i < REQUESTS; i += 1) overheads.push(await serverOverhead());
  console.log(
    `server overhead per request (Server-Timing total − engine, ${REQUESTS} requests): p50 ${percentile(overheads, 50).toFixed(2)} ms, p99 ${percentile(overheads, 99).toFixed(2)} ms (goal p50 < 2 ms)`,
  );

  const streamTokens = async (seed: number) => {
    const response = await fetch(`${e2e.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        ...body,
        max_tokens: 64,
        temperature: 1,
        seed,
        ignore_eos: true,
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    const text = await response.text();
    const usage = text
      .split('\n')
      .filter((line) => line.includes('"usage"'))
      .map((line) => JSON.parse(line.slice(6)).usage)
      .at(-1);
    return usage.completion_tokens as number;
  };
  const throughput = async (clients: number) => {
    const started = performance.now();
    const tokens = await Promise.all(Array.from({ length: clients }, (_, i) => streamTokens(i)));
    return tokens.reduce((a, b) => a + b, 0) / ((performance.now() - started) / 1000);
  };
  await throughput(4);
  const one = await throughput(1);
  const many = await throughput(32);
  console.log(
    `streaming throughput: 1 client ${one.toFixed(0)} tokens/s, 32 clients ${many.toFixed(0)} tokens/s, ratio ${(many / one).toFixed(1)}x`,
  );
} finally {
  await e2e.close();
}
