/**
 * Hostile chat requests (issue 21): each answers a prompt 4xx naming its cause, `/v1/health` keeps
 * answering within a second while it runs, and the server serves a normal completion afterwards.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startE2eServer, type E2eServer } from './helpers/server.ts';

const HUGE_RANGE = '{{ range(999999999) | length }}';
const LARGE_RANGE = '{{ range(10**8) | length }}';
const NESTED_LOOPS = '{% for i in range(3000) %}{% for j in range(3000) %}x{% endfor %}{% endfor %}';

type Answer = { status: number; body: any; ms: number };

function chatCaller(e2e: () => E2eServer) {
  return async (extra: Record<string, unknown>): Promise<Answer> => {
    const started = performance.now();
    const { status, body } = await e2e().api('POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, ...extra });
    return { status, body, ms: performance.now() - started };
  };
}

/** Runs `hostile` while polling health every 50 ms; answers its result and the slowest health answer. */
async function whileHealthPolled(e2e: E2eServer, hostile: () => Promise<Answer>): Promise<{ answer: Answer; slowestHealthMs: number; polls: number }> {
  let done = false;
  let slowest = 0;
  let polls = 0;
  const poller = (async () => {
    while (!done) {
      const started = performance.now();
      const response = await fetch(`${e2e.url}/v1/health`);
      assert.equal(response.status, 200);
      await response.arrayBuffer();
      slowest = Math.max(slowest, performance.now() - started);
      polls += 1;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  })();
  try {
    return { answer: await hostile(), slowestHealthMs: slowest, polls };
  } finally {
    done = true;
    await poller;
  }
}

async function assertStillServes(chat: ReturnType<typeof chatCaller>): Promise<void> {
  const normal = await chat({});
  assert.equal(normal.status, 200, JSON.stringify(normal.body));
  assert.equal(normal.body.object, 'chat.completion');
}

describe('hostile chat requests, request templates not trusted (the default)', () => {
  let e2e: E2eServer;
  const chat = chatCaller(() => e2e);
  before(async () => {
    e2e = await startE2eServer();
  });
  after(async () => {
    await e2e.close();
  });

  test('a request chat_template is refused with a 400 naming the setting, before anything renders', async () => {
    for (const template of [HUGE_RANGE, NESTED_LOOPS, '{{ messages[0].content }}']) {
      const { answer, slowestHealthMs } = await whileHealthPolled(e2e, () => chat({ chat_template: template }));
      assert.equal(answer.status, 400);
      assert.equal(answer.body.error.param, 'chat_template');
      assert.match(answer.body.error.message, /TRUST_REQUEST_CHAT_TEMPLATE=on/);
      assert.ok(answer.ms < 2000, `answered in ${answer.ms} ms`);
      assert.ok(slowestHealthMs < 1000, `health took ${slowestHealthMs} ms`);
    }
    await assertStillServes(chat);
  });
});

describe('hostile chat requests, request templates trusted', () => {
  let e2e: E2eServer;
  const chat = chatCaller(() => e2e);
  before(async () => {
    e2e = await startE2eServer({ env: { TRUST_REQUEST_CHAT_TEMPLATE: 'on' } });
  });
  after(async () => {
    await e2e.close();
  });

  test('a benign request template renders the prompt the model continues', async () => {
    const template = '{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}';
    const answer = await chat({ chat_template: template, return_token_ids: true, messages: [{ role: 'user', content: 'hello there' }] });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.ok(answer.body.prompt_token_ids.length > 0);
    const plain = await chat({ chat_template: 'x', return_token_ids: true });
    assert.equal(plain.status, 200);
    assert.ok(plain.body.prompt_token_ids.length < answer.body.prompt_token_ids.length, 'the request template, not the model one, made the prompt');
  });

  test('templates over their memory or time budget answer 400 in time; health never waits and the server survives', async () => {
    for (const [template, budget] of [[HUGE_RANGE, /memory budget/], [LARGE_RANGE, /memory budget/], [NESTED_LOOPS, /time budget/]] as const) {
      const { answer, slowestHealthMs, polls } = await whileHealthPolled(e2e, () => chat({ chat_template: template }));
      assert.equal(answer.status, 400, JSON.stringify(answer.body));
      assert.equal(answer.body.error.param, 'chat_template');
      assert.match(answer.body.error.message, budget);
      assert.ok(answer.ms < 3000, `${template}: answered in ${answer.ms} ms`);
      assert.ok(polls > 0 && slowestHealthMs < 1000, `${template}: health took ${slowestHealthMs} ms`);
    }
    await assertStillServes(chat);
  });

  test('a template that raises or does not compile is a 400 quoting it', async () => {
    const raised = await chat({ chat_template: '{{ raise_exception("roles must alternate") }}' });
    assert.equal(raised.status, 400);
    assert.match(raised.body.error.message, /roles must alternate/);
    const broken = await chat({ chat_template: '{% for' });
    assert.equal(broken.status, 400);
    assert.match(broken.body.error.message, /does not compile/);
  });
});
