/**
 * Hostile and malformed requests, as an outside tester sends them: each gets a prompt 4xx in the catalogue's
 * shapes (or the right 2xx), slow clients are timed out, connection caps hold, and health keeps answering
 * within a second throughout. The database parts run on SQLite and PostgreSQL; the transport parts over raw sockets.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { newId } from '../src/ids.ts';
import { ModelRepository } from '../src/store/model-repository.ts';
import { registeredRoutes, startTestApp, type TestApp } from './helpers/app.ts';
import { backends } from './helpers/database.ts';
import { multipartBody } from './helpers/multipart.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const nested = (depth: number, leaf = '1') => `${'{"a":'.repeat(depth)}${leaf}${'}'.repeat(depth)}`;
const nestedSchema = (depth: number) =>
  `${'{"type":"array","items":'.repeat(depth)}{"type":"string"}${'}'.repeat(depth)}`;

/** A raw request over a fresh socket: what came back, and when the server closed it (null: still open at `waitMs`). */
function exchange(
  url: string,
  send: (socket: net.Socket) => void,
  options: { waitMs?: number; localAddress?: string } = {},
): { socket: net.Socket; done: Promise<{ response: string; closedAfterMs: number | null }> } {
  const { hostname, port } = new URL(url);
  const socket = net.connect({ host: hostname, port: Number(port), localAddress: options.localAddress });
  const started = Date.now();
  let response = '';
  socket.on('data', (chunk) => (response += chunk.toString('latin1')));
  socket.on('error', () => undefined);
  const done = new Promise<{ response: string; closedAfterMs: number | null }>((resolve) => {
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ response, closedAfterMs: null });
    }, options.waitMs ?? 5000);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ response, closedAfterMs: Date.now() - started });
    });
  });
  socket.on('connect', () => send(socket));
  return { socket, done };
}

function parseResponse(raw: string): { status: number; body: any } {
  const split = raw.indexOf('\r\n\r\n');
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(raw)?.[1] ?? 0);
  const text = raw.slice(split + 4);
  return { status, body: text ? JSON.parse(text) : null };
}

/** GET /v1/health on its own connection; it must answer 200 within a second. */
async function assertHealthy(url: string, localAddress?: string): Promise<void> {
  const started = Date.now();
  const { done } = exchange(
    url,
    (socket) => socket.write('GET /v1/health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n'),
    { waitMs: 1000, localAddress },
  );
  const { response } = await done;
  assert.equal(parseResponse(response).status, 200, `health answered ${JSON.stringify(response.slice(0, 80))}`);
  assert.ok(Date.now() - started < 1000);
}

for (const backend of backends()) {
  describe(`hostile request bodies on ${backend.name}`, () => {
    let t: TestApp;
    let modelId: string;
    before(async () => {
      t = await startTestApp(backend);
      modelId = (await t.call('POST', '/v1/preview/models', { project: 'hostile', name: 'm', base_model: 'test/base' }))
        .body.id;
    });
    after(async () => {
      await t.close();
    });

    const send = (method: string, url: string, payload: string, contentType = 'application/json') =>
      t.app.inject({
        method: method as 'POST',
        url,
        payload,
        headers: { authorization: `Bearer ${t.key}`, 'content-type': contentType },
      });
    const logBody = (metadata: string) =>
      `{"split":"train","trajectory_groups":[{"trajectories":[{"messages_and_choices":[{"role":"user","content":"hi"}],"reward":1,"metadata":${metadata}}]}]}`;

    test('JSON nested thousands deep is a 400 naming the depth limit, on every kind of endpoint', async () => {
      const log = await send('POST', `/v1/preview/models/${modelId}/log`, logBody(nested(6000)));
      assert.equal(log.statusCode, 400);
      assert.equal(log.json().detail, '`trajectory_groups` is nested more than 64 levels deep');
      const job = await send(
        'POST',
        '/v1/preview/training-jobs',
        `{"model_id":"${modelId}","trajectory_groups":[{"trajectories":[{"messages_and_choices":[],"reward":0,"metrics":${nested(5000)}}]}]}`,
      );
      assert.equal(job.statusCode, 400);
      const schema = await send(
        'POST',
        '/v1/chat/completions',
        `{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":${nestedSchema(1000)}}}}`,
      );
      assert.equal(schema.statusCode, 400);
      assert.equal(schema.json().error.type, 'BadRequestError');
      assert.match(schema.json().error.message, /nested more than 64 levels/);
      assert.equal(schema.json().error.param, 'response_format');
      const tools = await send(
        'POST',
        '/v1/chat/completions',
        `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":${nested(5000)}}}]}`,
      );
      assert.equal(tools.statusCode, 400);
      assert.ok(tools.json().error);
    });

    test('nesting within the limit, and brackets inside strings, are accepted', async () => {
      const deepEnough = await send('POST', `/v1/preview/models/${modelId}/log`, logBody(nested(50)));
      assert.equal(deepEnough.statusCode, 200, deepEnough.body);
      const bracketsInStrings = await send(
        'POST',
        `/v1/preview/models/${modelId}/log`,
        logBody(JSON.stringify({ text: `${'[{'.repeat(10_000)}\\"` })),
      );
      assert.equal(bracketsInStrings.statusCode, 200, bracketsInStrings.body);
      const stored = await t.call('GET', `/v1/dashboard/models/${modelId}/trajectories?split=train`);
      assert.equal(stored.status, 200);
      assert.equal(stored.body.data.length, 2);
    });

    test('deleting 40,000 checkpoint steps at once deletes the ones that exist (batched SQL)', async () => {
      const model = (
        await t.call('POST', '/v1/preview/models', { project: 'hostile', name: 'many', base_model: 'test/base' })
      ).body.id;
      const repository = new ModelRepository(t.store.db);
      for (let step = 1; step <= 1200; step += 1) {
        await repository.insertCheckpoint({
          id: newId(),
          model_id: model,
          step,
          metrics: '{}',
          adapter_path: null,
          created_at: new Date().toISOString(),
        });
      }
      const steps = Array.from({ length: 40_000 }, (_, i) => i);
      const deleted = await t.call('DELETE', `/v1/preview/models/${model}/checkpoints`, { steps });
      assert.equal(deleted.status, 200, JSON.stringify(deleted.body).slice(0, 300));
      assert.equal(deleted.body.deleted_count, 1201);
      assert.equal(deleted.body.not_found_steps.length, 40_000 - 1201);
      assert.equal(deleted.body.not_found_steps[0], 1201);
      assert.deepEqual((await t.call('GET', `/v1/preview/models/${model}/checkpoints`)).body.data, []);
    });

    test('an empty body with a JSON content type is no body: optional-body routes work, required ones say it is missing', async () => {
      const model = (
        await t.call('POST', '/v1/preview/models', { project: 'hostile', name: 'gone', base_model: 'test/base' })
      ).body.id;
      const deleted = await send('DELETE', `/v1/preview/models/${model}`, '');
      assert.equal(deleted.statusCode, 200, deleted.body);
      assert.equal(deleted.json().model_id, model);
      const cancel = await send('POST', `/v1/preview/training-jobs/${newId()}/cancel`, '');
      assert.equal(cancel.statusCode, 404, cancel.body);
      const create = await send('POST', '/v1/preview/models', '');
      assert.equal(create.statusCode, 422);
      assert.deepEqual(create.json().detail, [{ loc: ['body'], msg: 'Field required', type: 'missing' }]);
      const chat = await send('POST', '/v1/chat/completions', '');
      assert.equal(chat.statusCode, 400);
      assert.equal(chat.json().error.type, 'BadRequestError');
    });

    test('multipart without a boundary is 400; a part with a content type but no filename is 422 naming it; nothing is stored', async () => {
      const noBoundary = await send('POST', '/v1/preview/artifacts/local/data/hostile', 'hello', 'multipart/form-data');
      assert.equal(noBoundary.statusCode, 400);
      assert.match(noBoundary.json().detail, /no boundary/);
      const boundary = 'hostileBoundary';
      const body = `--${boundary}\r\nContent-Disposition: form-data; name="note"\r\nContent-Type: application/octet-stream\r\n\r\nhi\r\n--${boundary}--\r\n`;
      const noFilename = await send(
        'POST',
        '/v1/preview/artifacts/local/data/hostile',
        body,
        `multipart/form-data; boundary=${boundary}`,
      );
      assert.equal(noFilename.statusCode, 422);
      assert.deepEqual(noFilename.json().detail[0].loc, ['body', 'note']);
      assert.match(noFilename.json().detail[0].msg, /no filename/);
      assert.equal((await t.call('GET', '/v1/preview/artifacts/local/data/hostile')).status, 404);
      const { payload, headers } = multipartBody([{ name: 'train.jsonl', content: '{}' }]);
      const fine = await t.app.inject({
        method: 'POST',
        url: '/v1/preview/artifacts/local/data/hostile',
        payload,
        headers: { ...headers, authorization: `Bearer ${t.key}` },
      });
      assert.equal(fine.statusCode, 200, fine.body);
    });

    test('every authenticated route answers a caller without a key 401 before it reads the body', async () => {
      // Routes open without a key: health, the API description, the dashboard's files, signed URLs (their own 403).
      const open =
        /^(GET \/(|index\.html|favicon\.svg|assets\/.*|docs.*|openapi\.json|metrics|v1\/health|v1\/system-check|api\/v1\/healthz|api\/v1\/(checkpoint_archives|external_weights)\/.*)|PUT \/wandb\/uploads\/.*|POST \/sdk\/otel\/.*)$/;
      const routes = (await registeredRoutes()).filter((route) => !open.test(route));
      assert.ok(routes.length > 60, `${routes.length} routes`);
      const bodies = [
        { payload: '{"not json', type: 'application/json' },
        { payload: 'plain text', type: 'text/plain' },
        { payload: '{"model_id": 5, "unknown": [1, 2]}', type: 'application/json' },
      ];
      const wrong: string[] = [];
      for (const route of routes) {
        const [method, template] = route.split(' ');
        const url = template.replace(/:[a-z_A-Z]+/g, 'x').replace('*', 'x');
        for (const body of bodies) {
          const hasBody = method !== 'GET';
          const response = await t.app.inject({
            method: method as 'POST',
            url,
            ...(hasBody ? { payload: body.payload, headers: { 'content-type': body.type } } : {}),
          });
          if (response.statusCode !== 401)
            wrong.push(`${route} (${body.type}): ${response.statusCode} ${response.body.slice(0, 120)}`);
        }
      }
      assert.deepEqual(wrong, []);
    });

    test('a route whose schema is keyed by content type refuses the others: forward_backward in text/plain is 415', async () => {
      const text = await send('POST', '/api/v1/forward_backward', '{"model_id": "x"}', 'text/plain');
      assert.equal(text.statusCode, 415, text.body);
      assert.match(text.json().detail, /application\/json \(tinker 0\.18\) or application\/x-protobuf/);
      const empty = await send('POST', '/api/v1/forward_backward', '');
      assert.equal(empty.statusCode, 422, empty.body);
    });

    test('framework refusals answer in the catalogue shapes; 404s do not echo long input', async () => {
      const badEscape = await t.call('GET', '/v1/preview/models/%C0%AF');
      assert.equal(badEscape.status, 400);
      assert.match(badEscape.body.detail, /not a valid url component/);
      const chatEscape = await send('POST', '/v1/chat/completions%C0%AF', '{}');
      assert.equal(chatEscape.statusCode, 400);
      assert.equal(chatEscape.json().error.type, 'BadRequestError');
      const longParam = await t.call('GET', `/v1/preview/models/${'a'.repeat(600)}`);
      assert.equal(longParam.status, 414);
      assert.equal(typeof longParam.body.detail, 'string');
      assert.ok(longParam.body.detail.length < 300);
      const unknown = await t.call('GET', `/v1/${'x'.repeat(5000)}`);
      assert.equal(unknown.status, 404);
      assert.ok(unknown.body.detail.length < 300 && unknown.body.detail.endsWith('…'), unknown.body.detail);
    });
  });
}

describe('slow and hostile clients over real sockets', () => {
  const idleMs = 300;
  let e2e: E2eServer;
  before(async () => {
    e2e = await startE2eServer({
      env: {
        BODY_IDLE_TIMEOUT_MS: String(idleMs),
        HEADERS_TIMEOUT_MS: '1000',
        REQUEST_TIMEOUT_MS: '1500',
        KEEP_ALIVE_TIMEOUT_MS: '500',
      },
    });
  });
  after(async () => {
    await e2e.close();
  });
  const auth = () => `authorization: Bearer ${e2e.key}\r\n`;

  test('a body shorter than its Content-Length, or a multipart body that never closes, is 408 and closed; health keeps answering', async () => {
    const short = exchange(e2e.url, (socket) =>
      socket.write(
        `POST /v1/preview/models HTTP/1.1\r\nhost: x\r\n${auth()}content-type: application/json\r\ncontent-length: 100\r\n\r\n{"project":`,
      ),
    );
    const open = exchange(e2e.url, (socket) =>
      socket.write(
        `POST /v1/preview/artifacts/local/data/slow HTTP/1.1\r\nhost: x\r\n${auth()}content-type: multipart/form-data; boundary=b\r\ntransfer-encoding: chunked\r\n\r\n5\r\n--b\r\n\r\n`,
      ),
    );
    const chat = exchange(e2e.url, (socket) =>
      socket.write(
        `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n${auth()}content-type: application/json\r\ncontent-length: 50\r\n\r\n{"messages":`,
      ),
    );
    await assertHealthy(e2e.url);
    for (const [name, pending] of Object.entries({ short, open, chat })) {
      const { response, closedAfterMs } = await pending.done;
      assert.ok(closedAfterMs !== null && closedAfterMs < idleMs + 1000, `${name} closed after ${closedAfterMs} ms`);
      const { status, body } = parseResponse(response);
      assert.equal(status, 408, `${name}: ${response}`);
      if (name === 'chat') assert.equal(body.error.code, 408);
      else assert.match(body.detail, /No part of the request body arrived/);
    }
    await assertHealthy(e2e.url);
  });

  test('headers that never finish are 408; a body trickled past the whole-request limit is closed', async () => {
    const headers = exchange(e2e.url, (socket) => socket.write(`GET /v1/preview/me HTTP/1.1\r\nhost: x\r\n`));
    let timer: NodeJS.Timeout | undefined;
    const trickle = exchange(e2e.url, (socket) => {
      socket.write(
        `POST /v1/preview/models HTTP/1.1\r\nhost: x\r\n${auth()}content-type: application/json\r\ncontent-length: 100000\r\n\r\n`,
      );
      timer = setInterval(() => socket.write(' '), 100);
    });
    await assertHealthy(e2e.url);
    const headersEnd = await headers.done;
    assert.equal(parseResponse(headersEnd.response).status, 408, headersEnd.response);
    assert.ok(headersEnd.closedAfterMs !== null && headersEnd.closedAfterMs < 2500);
    const trickleEnd = await trickle.done;
    clearInterval(timer);
    assert.ok(
      trickleEnd.closedAfterMs !== null && trickleEnd.closedAfterMs < 3500,
      `closed after ${trickleEnd.closedAfterMs} ms`,
    );
  });

  test('an upload that keeps sending is never cut by the idle timeout', async () => {
    const boundary = 'trickleBoundary';
    const head = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="train.jsonl"\r\nContent-Type: application/octet-stream\r\n\r\n`;
    const chunks = [head, ...Array.from({ length: 8 }, (_, i) => `{"line":${i}}\n`), `\r\n--${boundary}--\r\n`];
    const length = chunks.reduce((sum, chunk) => sum + Buffer.byteLength(chunk), 0);
    const started = Date.now();
    const upload = exchange(e2e.url, (socket) => {
      socket.write(
        `POST /v1/preview/artifacts/local/data/trickle HTTP/1.1\r\nhost: x\r\n${auth()}content-type: multipart/form-data; boundary=${boundary}\r\ncontent-length: ${length}\r\nconnection: close\r\n\r\n`,
      );
      let index = 0;
      const timer = setInterval(() => {
        socket.write(chunks[index]);
        index += 1;
        if (index === chunks.length) clearInterval(timer);
      }, 120);
    });
    const { response } = await upload.done;
    assert.ok(Date.now() - started > 3 * idleMs, 'the upload outlasted the idle timeout several times over');
    const { status, body } = parseResponse(response);
    assert.equal(status, 200, response);
    assert.equal(body.files[0].name, 'train.jsonl');
  });

  test('oversized headers are 431, an oversized URL 414, garbage 400, an oversized body 413, a 20 MB model name is not echoed; chat keeps its error shape', async () => {
    const big = exchange(e2e.url, (socket) =>
      socket.write(`GET /v1/preview/me HTTP/1.1\r\nhost: x\r\nx-big: ${'a'.repeat(20_000)}\r\n\r\n`),
    );
    const bigAnswer = parseResponse((await big.done).response);
    assert.equal(bigAnswer.status, 431);
    assert.equal(bigAnswer.body.detail, 'The request headers are too large');
    const chatBig = exchange(e2e.url, (socket) =>
      socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-big: ${'a'.repeat(20_000)}\r\n\r\n`),
    );
    const chatAnswer = parseResponse((await chatBig.done).response);
    assert.equal(chatAnswer.status, 431);
    assert.equal(chatAnswer.body.error.code, 431);
    const longUrl = exchange(e2e.url, (socket) =>
      socket.write(`GET /v1/preview/models/${'a'.repeat(20_000)} HTTP/1.1\r\nhost: x\r\n\r\n`),
    );
    const longAnswer = parseResponse((await longUrl.done).response);
    assert.equal(longAnswer.status, 414);
    assert.equal(longAnswer.body.detail, 'The request URL is too long');

    const garbage = exchange(e2e.url, (socket) => socket.write('NOT-HTTP at all\r\n\r\n'));
    const garbageAnswer = parseResponse((await garbage.done).response);
    assert.equal(garbageAnswer.status, 400);
    assert.match(garbageAnswer.body.detail, /^Malformed HTTP request \(HPE_/);
    const huge = exchange(e2e.url, (socket) =>
      socket.write(
        `POST /v1/preview/models HTTP/1.1\r\nhost: x\r\n${auth()}content-type: application/json\r\ncontent-length: ${2 ** 40}\r\n\r\n{`,
      ),
    );
    const hugeAnswer = parseResponse((await huge.done).response);
    assert.equal(hugeAnswer.status, 413);
    assert.equal(typeof hugeAnswer.body.detail, 'string');

    const name = 'm'.repeat(20 * 1024 * 1024);
    const unknown = await e2e.api('POST', '/v1/chat/completions', {
      model: name,
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(unknown.status, 404);
    assert.ok(unknown.body.error.message.length < 400, `message of ${unknown.body.error.message.length} characters`);
    await assertHealthy(e2e.url);
  });
});

describe('connection caps', () => {
  let e2e: E2eServer;
  before(async () => {
    e2e = await startE2eServer({ env: { ENGINE: 'off', MAX_CONNECTIONS_PER_CLIENT: '4', MAX_CONNECTIONS: '6' } });
  });
  after(async () => {
    await e2e.close();
  });

  /** A connection that sends nothing, and whether the server closed it within 200 ms. */
  async function idleConnection(localAddress: string): Promise<{ socket: net.Socket; refused: boolean }> {
    const { hostname, port } = new URL(e2e.url);
    const socket = net.connect({ host: hostname, port: Number(port), localAddress });
    socket.on('error', () => undefined);
    let closed = false;
    socket.on('close', () => (closed = true));
    await new Promise((resolve) => setTimeout(resolve, 200));
    return { socket, refused: closed };
  }

  test('beyond the per-address and total caps new connections are closed at once; closing one frees its place', async () => {
    const first = await Promise.all(Array.from({ length: 4 }, () => idleConnection('127.0.0.1')));
    assert.deepEqual(
      first.map((c) => c.refused),
      [false, false, false, false],
    );
    assert.equal((await idleConnection('127.0.0.1')).refused, true, 'a fifth connection from one address is closed');
    const second = await Promise.all([idleConnection('127.0.0.2'), idleConnection('127.0.0.2')]);
    assert.deepEqual(
      second.map((c) => c.refused),
      [false, false],
    );
    assert.equal((await idleConnection('127.0.0.3')).refused, true, 'a seventh connection in all is closed');

    first[0].socket.destroy();
    await new Promise((resolve) => setTimeout(resolve, 100));
    await assertHealthy(e2e.url);
    for (const connection of [...first, ...second]) connection.socket.destroy();
  });
});

describe('answers that take longer than every timeout', () => {
  // Timeouts far below any generation's length (the tiny model decodes at most ~1,500 tokens/s), so the stream and
  // the long answer below outlive each of them many times over, however fast the machine.
  const timeoutMs = 100;
  let fast: E2eServer;
  before(async () => {
    fast = await startE2eServer({
      env: {
        BODY_IDLE_TIMEOUT_MS: String(timeoutMs),
        HEADERS_TIMEOUT_MS: String(timeoutMs),
        REQUEST_TIMEOUT_MS: String(timeoutMs),
        KEEP_ALIVE_TIMEOUT_MS: '500',
      },
    });
  });
  after(async () => {
    await fast.close();
  });

  test('a chat stream and a long JSON answer outlive every timeout; an idle keep-alive connection is closed', async () => {
    const started = Date.now();
    const stream = await fetch(`${fast.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${fast.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
        max_tokens: 1500,
        ignore_eos: true,
      }),
    });
    const json = fast.api('POST', '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 400,
      ignore_eos: true,
    });
    const text = await stream.text();
    assert.ok(text.trimEnd().endsWith('data: [DONE]'), text.slice(-200));
    assert.doesNotMatch(text, /"error"/);
    const answered = await json;
    assert.equal(answered.status, 200);
    assert.equal(answered.body.usage.completion_tokens, 400);
    assert.ok(
      Date.now() - started > 5 * timeoutMs,
      `the answers took ${Date.now() - started} ms, several times every timeout`,
    );

    const keepAlive = exchange(fast.url, (socket) => socket.write('GET /v1/health HTTP/1.1\r\nhost: x\r\n\r\n'));
    const { response, closedAfterMs } = await keepAlive.done;
    assert.equal(parseResponse(response).status, 200);
    assert.ok(
      closedAfterMs !== null && closedAfterMs >= 400 && closedAfterMs < 3000,
      `closed after ${closedAfterMs} ms`,
    );
  });
});
