/**
 * Hostile chat requests: each answers a prompt 4xx naming its cause, `/v1/health` keeps
 * answering within a second while it runs, and the server serves a normal completion afterwards.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { refFanOut } from './helpers/hostile-schemas.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';

const HUGE_RANGE = '{{ range(999999999) | length }}';
const LARGE_RANGE = '{{ range(10**8) | length }}';
const NESTED_LOOPS = '{% for i in range(3000) %}{% for j in range(3000) %}x{% endfor %}{% endfor %}';

type Answer = { status: number; body: any; ms: number };

/**
 * "Prompt" for an answer: the refusals take tens to hundreds of milliseconds (bench/constraint-limits.ts)
 * where they used to take minutes; the bound is loose because test machines are shared and busy.
 */
const PROMPT_MS = 5000;

/** Calls chat completions with `extra` fields; a string is spliced in as JSON text (too deep for JSON.stringify). */
function chatCaller(e2e: () => E2eServer) {
  return async (extra: Record<string, unknown> | string): Promise<Answer> => {
    const base = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    const text =
      typeof extra === 'string' ? `${base.slice(0, -1)},${extra}}` : JSON.stringify({ ...JSON.parse(base), ...extra });
    const started = performance.now();
    const response = await fetch(`${e2e().url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e2e().key}`, 'content-type': 'application/json' },
      body: text,
    });
    const body = await response.json();
    return { status: response.status, body, ms: performance.now() - started };
  };
}

/** Runs `hostile` while polling health every 50 ms; answers its result and the slowest health answer. */
async function whileHealthPolled(
  e2e: E2eServer,
  hostile: () => Promise<Answer>,
): Promise<{ answer: Answer; slowestHealthMs: number; polls: number }> {
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

/** `{"type":"array","items":…}` nested `depth` deep, as JSON text. */
const nestedArraySchema = (depth: number) =>
  `${'{"type":"array","items":'.repeat(depth - 1)}{"type":"string"}${'}'.repeat(depth - 1)}`;

/** The server a describe's tests share: started before them, closed after; `chat` calls it. */
function sharedServer(options: Parameters<typeof startE2eServer>[0] = {}): {
  server: () => E2eServer;
  chat: ReturnType<typeof chatCaller>;
} {
  let e2e: E2eServer | undefined;
  const server = () => e2e ?? assert.fail('the server has not started');
  before(async () => {
    e2e = await startE2eServer(options);
  });
  after(async () => {
    await e2e?.close();
  });
  return { server, chat: chatCaller(server) };
}

describe('hostile chat requests, request templates not trusted (the default)', () => {
  const { server, chat } = sharedServer();

  test('a request chat_template is refused with a 400 naming the setting, before anything renders', async () => {
    for (const template of [HUGE_RANGE, NESTED_LOOPS, '{{ messages[0].content }}']) {
      const { answer, slowestHealthMs } = await whileHealthPolled(server(), () => chat({ chat_template: template }));
      assert.equal(answer.status, 400);
      assert.equal(answer.body.error.param, 'chat_template');
      assert.match(answer.body.error.message, /TRUST_REQUEST_CHAT_TEMPLATE=on/);
      assert.ok(answer.ms < PROMPT_MS, `answered in ${answer.ms} ms`);
      assert.ok(slowestHealthMs < 1000, `health took ${slowestHealthMs} ms`);
    }
    await assertStillServes(chat);
  });

  describe('hostile constraints and content', () => {
    /** Each hostile request: a 400 naming `param` (and matching `message`) promptly, health answering within 1 s meanwhile. */
    async function expectRefused(
      extra: Record<string, unknown> | string,
      param: string,
      message: RegExp,
    ): Promise<void> {
      const { answer, slowestHealthMs } = await whileHealthPolled(server(), () => chat(extra));
      assert.equal(answer.status, 400, JSON.stringify(answer.body).slice(0, 300));
      assert.equal(answer.body.error.param, param);
      assert.match(answer.body.error.message, message);
      assert.ok(answer.ms < PROMPT_MS, `answered in ${answer.ms} ms`);
      assert.ok(slowestHealthMs < 1000, `health took ${slowestHealthMs} ms`);
    }

    test('regexes too long for the cap are refused before compiling, whatever their size', async () => {
      for (const length of [65_536, 262_144, 1_048_576]) {
        await expectRefused(
          { structured_outputs: { regex: 'a'.repeat(length) } },
          'structured_outputs',
          new RegExp(`more than \\d+ characters \\(this one has ${length}\\)`),
        );
      }
      await assertStillServes(chat);
    });

    test("regexes within the cap that exhaust llguidance's fuel are refused before any token; lazily huge ones are served", async () => {
      for (const regex of ['((((a{100}){100}){100}){100})', '(a{1000}){1000}']) {
        await expectRefused({ structured_outputs: { regex } }, 'structured_outputs', /too many expressions|fuel|limit/);
      }
      // Automata that used to explode when built whole cost llguidance nothing: it derives only what it visits.
      for (const regex of ['(.{0,30}x){20}', '(a|b)*a(a|b){24}']) {
        const { answer, slowestHealthMs } = await whileHealthPolled(server(), () =>
          chat({ structured_outputs: { regex } }),
        );
        assert.equal(answer.status, 200, JSON.stringify(answer.body).slice(0, 300));
        assert.ok(answer.ms < PROMPT_MS, `answered in ${answer.ms} ms`);
        assert.ok(slowestHealthMs < 1000, `health took ${slowestHealthMs} ms`);
      }
      await assertStillServes(chat);
    });

    test('deeply nested schemas and template data are a 400 naming the field', async () => {
      await expectRefused(
        `"response_format":{"type":"json_schema","json_schema":{"name":"deep","schema":${nestedArraySchema(1000)}}}`,
        'response_format',
        /nested more than \d+ levels/,
      );
      const tool = `{"type":"function","function":{"name":"deep","parameters":{"type":"object","properties":{"a":${nestedArraySchema(5000)}}}}}`;
      await expectRefused(`"tools":[${tool}],"tool_choice":"required"`, 'tools', /nested more than \d+ levels/);
      // Data the model's own (trusted) template renders is bounded too, with the field named.
      await expectRefused(`"tools":[${tool}]`, 'tools', /nested more than \d+ levels/);
      await expectRefused(
        `"chat_template_kwargs":{"x":${nestedArraySchema(5000)}}`,
        'chat_template_kwargs',
        /nested more than \d+ levels/,
      );
      const call = `{"id":"c","type":"function","function":{"name":"f","arguments":${JSON.stringify(nestedArraySchema(5000))}}}`;
      await expectRefused(
        `"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[${call}]},{"role":"user","content":"and?"}]`,
        'messages',
        /nested more than \d+ levels/,
      );
      await assertStillServes(chat);
    });

    test('a $ref fan-out whose expansion is astronomically large is served: recursion stays a grammar, never unrolled', async () => {
      const { answer, slowestHealthMs } = await whileHealthPolled(server(), () =>
        chat({
          response_format: {
            type: 'json_schema',
            json_schema: { name: 'fan', schema: refFanOut() },
          },
        }),
      );
      assert.equal(answer.status, 200, JSON.stringify(answer.body).slice(0, 300));
      assert.ok(answer.body.choices[0].message.content.startsWith('{'));
      assert.ok(answer.ms < PROMPT_MS, `answered in ${answer.ms} ms`);
      assert.ok(slowestHealthMs < 1000, `health took ${slowestHealthMs} ms`);
    });

    test('too many choices, or too many tools for a forced call, are refused before compiling', async () => {
      await expectRefused(
        { structured_outputs: { choice: Array.from({ length: 5000 }, (_, i) => `c${i}`) } },
        'structured_outputs',
        /more than \d+ choices/,
      );
      const tools = Array.from({ length: 129 }, (_, i) => ({ type: 'function', function: { name: `f${i}` } }));
      await expectRefused({ tools, tool_choice: 'required' }, 'tools', /more than 128 tools/);
    });

    test('a tool without function.name, and content parts the model cannot honour, are 400s naming the part', async () => {
      const nameless = await chat({ tools: [{ type: 'function', function: { parameters: { type: 'object' } } }] });
      assert.equal(nameless.status, 400);
      assert.equal(nameless.body.error.param, 'tools.0.function.name');
      for (const part of [
        { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } },
        { type: 'input_audio', input_audio: { data: '', format: 'wav' } },
        { type: 'file', file: {} },
      ]) {
        const answer = await chat({ messages: [{ role: 'user', content: [{ type: 'text', text: 'look' }, part] }] });
        assert.equal(answer.status, 400, JSON.stringify(answer.body));
        assert.equal(answer.body.error.param, 'messages.0.content.1');
        assert.match(answer.body.error.message, new RegExp(`"${part.type}" are not supported`));
      }
      const textless = await chat({ messages: [{ role: 'user', content: [{ type: 'text' }] }] });
      assert.equal(textless.status, 400);
      assert.equal(textless.body.error.param, 'messages.0.content.0');
      // Text parts keep working.
      const parts = await chat({
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'Once' },
              { type: 'text', text: ' upon' },
            ],
          },
        ],
      });
      assert.equal(parts.status, 200, JSON.stringify(parts.body));
      // One rule for what renders (chat/messages.ts): the Responses-style text parts and bare strings count as text here too.
      const textLike = await chat({
        messages: [
          { role: 'user', content: [{ type: 'input_text', text: 'Once' }, ' upon'] },
          { role: 'assistant', content: [{ type: 'refusal', refusal: 'No.' }] },
          { role: 'user', content: 'Go on' },
        ],
      });
      assert.equal(textLike.status, 200, JSON.stringify(textLike.body));
    });
  });
});

describe('hostile chat requests, request templates trusted', () => {
  const { server, chat } = sharedServer({ env: { TRUST_REQUEST_CHAT_TEMPLATE: 'on' } });

  test('a benign request template renders the prompt the model continues', async () => {
    const template =
      '{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}';
    const answer = await chat({
      chat_template: template,
      return_token_ids: true,
      messages: [{ role: 'user', content: 'hello there' }],
    });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.ok(answer.body.prompt_token_ids.length > 0);
    const plain = await chat({ chat_template: 'x', return_token_ids: true });
    assert.equal(plain.status, 200);
    assert.ok(
      plain.body.prompt_token_ids.length < answer.body.prompt_token_ids.length,
      'the request template, not the model one, made the prompt',
    );
  });

  test('templates over their memory or time budget answer 400 in time; health never waits and the server survives', async () => {
    // A huge range overflows the heap, or on a busy machine may run out of time first: either budget stops it.
    for (const [template, budget] of [
      [HUGE_RANGE, /memory budget|time budget/],
      [LARGE_RANGE, /memory budget|time budget/],
      [NESTED_LOOPS, /time budget/],
    ] as const) {
      const { answer, slowestHealthMs, polls } = await whileHealthPolled(server(), () =>
        chat({ chat_template: template }),
      );
      assert.equal(answer.status, 400, JSON.stringify(answer.body));
      assert.equal(answer.body.error.param, 'chat_template');
      assert.match(answer.body.error.message, budget);
      assert.ok(answer.ms < PROMPT_MS, `${template}: answered in ${answer.ms} ms`);
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
