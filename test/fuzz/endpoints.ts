/**
 * Every route of the server (from src/http/*-routes.ts) with a generator of valid-ish requests, and the
 * attacks that only make sense on that route (among them each request a hostile-tenant audit found answered with a
 * 500 or a held event loop). The mutator in mutate.ts
 * then breaks these requests in general ways. test/fuzz.test.ts fails, naming them, when a route the app
 * registers is missing here or an entry here matches no route.
 */
import { deepNesting, hugeArray, hugeString, Raw } from './hostile.ts';
import type { Prng } from './prng.ts';
import { adapterUpload } from './tar.ts';
import { graphqlDocument, graphqlRepro, uploadToken } from './wandb.ts';
import { ARTIFACT_NAMES, BASE_MODEL, type Entity, PROJECT, type World } from './world.ts';

export interface Ctx {
  rng: Prng;
  world: World;
  /** The entity whose ids and names the request uses (the fuzzing entity, or the one that must not change). */
  target: Entity;
  /** Sent with the protected entity's key: it may only read. */
  readOnly: boolean;
}

type Body = any;

export interface Endpoint {
  method: string;
  template: string;
  /** Changes data: only the fuzzing entity's key sends it, so the other entity's data must stay as it was. */
  writes: boolean;
  weight: number;
  params?: (c: Ctx) => Record<string, string>;
  query?: (c: Ctx) => Record<string, string | number>;
  body?: (c: Ctx) => Body;
  multipart?: true;
  /** A body of raw bytes (an upload), valid or broken as `hostile` says. */
  bytes?: (c: Ctx, hostile: boolean) => { bytes: Buffer; contentType: string; mustRefuse?: string };
  attacks?: ((c: Ctx, body: Body) => void)[];
  /** Why any 2xx to this request, as finally drawn, is a finding (e.g. a signed value written otherwise); undefined: none. */
  mustRefuse?: (params: Record<string, string>, query: string) => string | undefined;
}

/** Small valid groups by the thousand, as text: the big inputs an audit sent (10,000 groups, ~3.5 MB). */
const manyGroups = (c: Ctx, count: number, tail = '') =>
  new Raw(
    `[${Array(count)
      .fill(JSON.stringify({ trajectories: [trajectory(c), trajectory(c)], exceptions: [] }))
      .join(',')}${tail}]`,
  );
/** `count` token ids of the tiny model's vocabulary, as text. */
const manyTokens = (count: number) => new Raw(`[${Array.from({ length: count }, (_, i) => (i * 7) % 90).join(',')}]`);

const modelParam = (c: Ctx) => ({ model_id: c.rng.pick(c.target.modelIds) });
const jobParam = (c: Ctx) => ({ id: c.rng.pick(c.target.jobIds) });
const pageQuery = (c: Ctx, ids: string[]) => ({
  ...(c.rng.chance(0.5) ? { limit: c.rng.pick([1, 2, 20, 100]) } : {}),
  ...(c.rng.chance(0.3) && ids.length > 0 ? { after: c.rng.pick(ids) } : {}),
});

function trajectory(c: Ctx): Body {
  const content = c.rng.pick(['Hi', 'Say a word.', 'What is 2+2?']);
  return {
    messages_and_choices: [
      { role: 'user', content },
      { role: 'assistant', content: c.rng.word(3) },
    ],
    reward: c.rng.next(),
    metrics: { score: c.rng.int(10) },
    metadata: { note: c.rng.word() },
  };
}

function chatBody(c: Ctx): Body {
  const { rng } = c;
  const body: Body = {
    model:
      c.target.injected.length > 0 && rng.chance(0.1)
        ? rng.pick(c.target.injected)
        : rng.chance(0.7)
          ? c.target.inferenceName
          : BASE_MODEL,
    messages: [{ role: 'user', content: rng.pick(['Hi', 'Say a word.', '', 'Count: 1 2 3']) }],
    max_tokens: 1 + rng.int(6),
    seed: rng.int(1000),
  };
  if (rng.chance(0.3)) body.stream = true;
  if (body.stream && rng.chance(0.5)) body.stream_options = { include_usage: true };
  if (rng.chance(0.3)) Object.assign(body, { logprobs: true, top_logprobs: rng.int(5) });
  if (rng.chance(0.2)) body.n = 1 + rng.int(3);
  if (rng.chance(0.3)) body.temperature = rng.pick([0, 0.7, 1.5]);
  if (rng.chance(0.15))
    body.tools = [
      {
        type: 'function',
        function: {
          name: 'get_time',
          description: 'Time now',
          parameters: { type: 'object', properties: { zone: { type: 'string' } } },
        },
      },
    ];
  if (rng.chance(0.1))
    body.response_format = rng.pick([
      { type: 'json_object' },
      {
        type: 'json_schema',
        json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] } },
      },
    ]);
  if (rng.chance(0.1)) body.structured_outputs = rng.pick([{ choice: ['yes', 'no'] }, { regex: '[a-z]{1,3}' }]);
  if (rng.chance(0.05)) {
    // Text tags (`<fn>`) and tags that are tokens of the vocabulary (`<|im_start|>`) alike.
    const trigger = rng.pick(['<fn>', '<tool_call>', '<|im_start|>']);
    const schema = { type: 'object', properties: { a: { enum: [1, 2] } } };
    body.response_format = {
      type: 'structural_tag',
      triggers: [trigger],
      structures: [{ begin: trigger, schema, end: rng.pick(['</fn>', '', '<|im_end|>']) }],
    };
  }
  if (rng.chance(0.1)) body.messages.unshift({ role: 'system', content: 'Be brief.' });
  return body;
}

const CHAT_ATTACKS: Endpoint['attacks'] = [
  (c, b) =>
    (b.chat_template = c.rng.pick([
      '{{ range(999999999) | length }}',
      '{% for i in range(3000) %}{% for j in range(3000) %}x{% endfor %}{% endfor %}',
      '{{ messages[0].content }}',
    ])),
  (c, b) => (b.structured_outputs = { regex: 'a'.repeat(c.rng.pick([65_536, 262_144, 1_048_576])) }),
  (c, b) =>
    (b.structured_outputs = c.rng.pick([
      { choice: hugeArray(c.rng, 100_000) },
      { json: deepNesting(c.rng) },
      { grammar: hugeString(c.rng) },
      { regex: '(a+)+$' },
      { regex: '[' },
    ])),
  (c, b) =>
    (b.response_format = {
      type: 'json_schema',
      json_schema: { name: 'deep', schema: deepNesting(c.rng, c.rng.pick([1000, 5000])) },
    }),
  (c, b) => (b.tools = [{ type: 'function', function: { name: 'f', parameters: deepNesting(c.rng, 5000) } }]),
  (c, b) =>
    (b.tools = [
      c.rng.pick([
        { type: 'function', function: {} },
        { type: 'function' },
        { function: { name: '' } },
        { type: 'retrieval', function: { name: 'x' } },
      ]),
    ]),
  (c, b) =>
    (b.messages = [
      {
        role: 'user',
        content: [
          {
            type: c.rng.pick(['image_url', 'input_audio', 'file', 'text', 'video_url']),
            image_url: { url: 'http://169.254.169.254/' },
          },
        ],
      },
    ]),
  (c, b) => (b.model = c.rng.pick([hugeString(c.rng), `${c.target.name}/${PROJECT}/nope`, 'local/../../etc', ''])),
  (c, b) =>
    Object.assign(
      b,
      c.rng.pick([
        { n: 1_000_000 },
        { max_tokens: 2 ** 31 },
        { top_logprobs: 1000 },
        { logit_bias: Object.fromEntries(Array.from({ length: 50_000 }, (_, i) => [String(i), 100])) },
      ]),
    ),
  (c, b) =>
    Object.assign(
      b,
      c.rng.pick([
        { stop: hugeArray(c.rng, 100_000) },
        { allowed_token_ids: [99_999_999] },
        { stop_token_ids: [-1] },
        { prompt_logprobs: 5 },
        { echo: true },
        { truncate_prompt_tokens: 3 },
      ]),
    ),
  (c, b) => (b.messages = Array.from({ length: c.rng.pick([1000, 20_000]) }, () => ({ role: 'user', content: 'hi' }))),
  (c, b) =>
    (b.messages = [
      {
        role: c.rng.pick(['tool', 'assistant', 'system', 'function', 'developer', 'root']),
        content: null,
        tool_calls: [{ id: 1, type: 'function', function: { name: 'x', arguments: '{not json' } }],
      },
    ]),
  (_c, b) =>
    Object.assign(b, {
      continue_final_message: true,
      add_generation_prompt: true,
      tool_choice: { type: 'function', function: { name: 'missing' } },
    }),
];

/** Completions: the chat body's sampling fields over a text or token-id prompt (or a list of them). */
function completionBody(c: Ctx): Body {
  const { messages, tools: _tools, logprobs: _logprobs, top_logprobs: _top, ...rest } = chatBody(c);
  const prompt = c.rng.pick<unknown>(['Hi', messages[0].content, [72, 105], ['Hi', 'Yo'], [[72], [105, 33]]]);
  const body: Body = { ...rest, prompt };
  if (c.rng.chance(0.3)) body.logprobs = c.rng.int(4);
  if (c.rng.chance(0.2)) body.echo = true;
  return body;
}

const WEATHER_SCHEMA = { type: 'object', properties: { city: { type: 'string' } } };

/** The Responses API: text or items, function tools, a stored response to continue now and then. */
function responsesBody(c: Ctx): Body {
  const { rng } = c;
  const { model, stream, temperature } = chatBody(c);
  const body: Body = {
    model,
    input: rng.pick<unknown>([
      'Hi',
      [{ role: 'user', content: [{ type: 'input_text', text: 'Say a word.' }] }],
      [
        { role: 'user', content: 'Weather?' },
        { type: 'function_call', call_id: 'c1', name: 'get_weather', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c1', output: 'sunny' },
      ],
    ]),
    max_output_tokens: 1 + rng.int(6),
    ...(stream ? { stream } : {}),
    ...(temperature !== undefined ? { temperature } : {}),
  };
  if (rng.chance(0.3)) body.instructions = 'Be brief.';
  if (rng.chance(0.2)) body.tools = [{ type: 'function', name: 'get_weather', parameters: WEATHER_SCHEMA }];
  if (rng.chance(0.2)) body.store = false;
  if (rng.chance(0.1)) body.text = { format: { type: 'json_schema', name: 'w', schema: WEATHER_SCHEMA } };
  return body;
}

/** The Anthropic Messages API: text or blocks, custom tools. */
function messagesBody(c: Ctx): Body {
  const { rng } = c;
  const { model, stream } = chatBody(c);
  const body: Body = {
    model,
    messages: [{ role: 'user', content: rng.pick<unknown>(['Hi', [{ type: 'text', text: 'Say a word.' }]]) }],
    max_tokens: 1 + rng.int(6),
    ...(stream ? { stream } : {}),
  };
  if (rng.chance(0.3)) body.system = 'Be brief.';
  if (rng.chance(0.2)) body.tools = [{ name: 'get_weather', input_schema: WEATHER_SCHEMA }];
  if (body.tools && rng.chance(0.5)) body.tool_choice = { type: rng.pick(['auto', 'any', 'none']) };
  return body;
}

const DOOR_ATTACKS: Endpoint['attacks'] = [
  (c, b) => (b.input = hugeArray(c.rng, c.rng.pick([10_000, 200_000]))),
  (c, b) => (b.messages = [{ role: 'user', content: hugeArray(c.rng, 100_000) }]),
  (c, b) => (b.prompt = c.rng.pick<unknown>([hugeArray(c.rng, 2000), [[-1]], [[99_999_999]], [], ''])),
  (c, b) => (b.tools = [{ type: 'function', name: 'f', parameters: deepNesting(c.rng, 5000) }]),
  (c, b) => (b.tools = [{ name: 'f', input_schema: deepNesting(c.rng, 5000) }]),
  (c, b) => (b.previous_response_id = c.rng.pick(['resp_nope', hugeString(c.rng), ''])),
  (c, b) =>
    (b.input = [
      c.rng.pick<unknown>([
        { type: 'item_reference', id: 'x' },
        { type: 'function_call' },
        { role: 'user', content: [{ type: 'input_image', image_url: 'http://169.254.169.254/' }] },
        { type: 'reasoning', summary: [{ type: 'summary_text', text: deepNesting(c.rng, 2000) }] },
      ]),
    ]),
  (c, b) =>
    (b.messages = [
      {
        role: c.rng.pick(['user', 'assistant']),
        content: [c.rng.pick<unknown>([{ type: 'image', source: {} }, { type: 'tool_use' }, { type: 'tool_result' }])],
      },
    ]),
  (c, b) =>
    Object.assign(b, c.rng.pick<object>([{ max_tokens: 2 ** 31 }, { max_output_tokens: -1 }, { n: 1_000_000 }])),
];

const responseId = (c: Ctx) => ({ id: c.rng.pick(['resp_nope', `resp_${c.rng.word(24)}`, c.rng.word()]) });

/** Completions, Responses and Messages: the doors beside chat completions. */
function doorEndpoints(): Endpoint[] {
  const post = (template: string, body: (c: Ctx) => Body, writes = false, weight = 3): Endpoint => ({
    method: 'POST',
    template,
    writes,
    weight,
    body,
    attacks: DOOR_ATTACKS,
  });
  return [
    post('/v1/completions', completionBody),
    post('/v1/completions/', completionBody, false, 1),
    post('/v1/responses', responsesBody, true),
    { method: 'GET', template: '/v1/responses/:id', writes: false, weight: 1, params: responseId },
    { method: 'DELETE', template: '/v1/responses/:id', writes: true, weight: 1, params: responseId },
    post('/v1/messages', messagesBody),
    post(
      '/v1/messages/count_tokens',
      (c) => {
        const { max_tokens: _budget, stream: _stream, ...body } = messagesBody(c);
        return body;
      },
      false,
      1,
    ),
  ];
}

function rlBody(c: Ctx): Body {
  const group = c.rng.chance(0.8) ? c.target.group : { trajectories: [trajectory(c), trajectory(c)] };
  return {
    model_id: c.rng.pick(c.target.modelIds),
    trajectory_groups: [structuredClone(group)],
    experimental_config: c.rng.chance(0.5) ? {} : { learning_rate: 1e-4 },
  };
}

const TRAJECTORY_ATTACKS: Endpoint['attacks'] = [
  (c, b) =>
    (b.trajectory_groups[0].trajectories[0].metadata = { deep: deepNesting(c.rng, c.rng.pick([1000, 5000, 20_000])) }),
  (c, b) =>
    (b.trajectory_groups[0].trajectories[0].metrics = c.rng.pick([
      { deep: deepNesting(c.rng, 5000) },
      { s: 'text' },
      { n: new Raw('1e999') },
    ])),
  (c, b) => (b.trajectory_groups[0].metadata = deepNesting(c.rng, 5000)),
  (c, b) => (b.trajectory_groups = hugeArray(c.rng, c.rng.pick([10_000, 200_000]))),
  // The big inputs an audit sent: 10,000 groups (valid for a log; an RL job's last group has no trajectory, so no job
  // trains on 20,000 of them), and one trajectory of 100,000 messages.
  (c, b) => (b.trajectory_groups = manyGroups(c, 10_000, b.model_id ? ',{"trajectories":[]}' : '')),
  (_c, b) =>
    (b.trajectory_groups[0].trajectories[0].messages_and_choices = new Raw(
      `[${Array(100_000).fill('{"role":"user","content":"message"}').join(',')}]`,
    )),
  (c, b) =>
    (b.trajectory_groups[0].trajectories[0].tools = [
      { type: 'function', function: { name: 'f', parameters: deepNesting(c.rng, 5000) } },
    ]),
  (_c, b) =>
    (b.trajectory_groups[0].trajectories[0].messages_and_choices = [
      { role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] },
    ]),
  (c, b) => {
    const choice = b.trajectory_groups[0].trajectories[0].messages_and_choices.at(-1);
    const content = choice?.logprobs?.content;
    if (content?.length)
      content[0].token = c.rng.pick(['token_id:99999999', 'token_id:-1', 'token_id:abc', 'token_id:', '']);
  },
];

function modelEndpoints(): Endpoint[] {
  return [
    {
      method: 'POST',
      template: '/v1/preview/models',
      writes: true,
      weight: 3,
      body: (c) => ({
        project: PROJECT,
        name: c.rng.word(),
        base_model: BASE_MODEL,
        ...(c.rng.chance(0.5) ? { entity: c.target.name } : {}),
        ...(c.rng.chance(0.2) ? { return_existing: true } : {}),
      }),
      attacks: [
        (c, b) =>
          Object.assign(
            b,
            c.rng.pick([
              { name: 'a'.repeat(129) },
              { base_model: '../../etc' },
              { entity: 'fuzz-b' },
              { project: '..' },
            ]),
          ),
      ],
    },
    { method: 'GET', template: '/v1/preview/models/:model_id', writes: false, weight: 2, params: modelParam },
    {
      method: 'DELETE',
      template: '/v1/preview/models/:model_id',
      writes: true,
      weight: 1,
      // The seeded models stay (every model route would answer 404 for the rest of the run): only made ones go, or the other entity's are tried.
      params: (c) => ({
        model_id:
          c.target.disposableModelIds.length > 0
            ? c.rng.pick(c.target.disposableModelIds)
            : c.rng.pick(c.world.b.modelIds),
      }),
    },
    {
      method: 'GET',
      template: '/v1/preview/models/:model_id/checkpoints',
      writes: false,
      weight: 2,
      params: modelParam,
      query: (c) => ({
        ...pageQuery(c, c.target.checkpointIds),
        ...(c.rng.chance(0.3) ? { order: c.rng.pick(['asc', 'desc']) } : {}),
      }),
    },
    {
      method: 'DELETE',
      template: '/v1/preview/models/:model_id/checkpoints',
      writes: true,
      weight: 2,
      params: modelParam,
      body: (c) => ({ steps: [c.rng.int(3)] }),
      attacks: [
        (c, b) =>
          (b.steps = new Raw(`[${Array.from({ length: c.rng.pick([40_000, 100_000]) }, (_, i) => i).join(',')}]`)),
        (_c, b) => (b.steps = [-1, 1.5, 2 ** 60]),
      ],
    },
    {
      method: 'POST',
      template: '/v1/preview/models/:model_id/log',
      writes: true,
      weight: 3,
      params: modelParam,
      body: (c) => ({
        split: c.rng.pick(['train', 'val', c.rng.word()]),
        trajectory_groups: [{ trajectories: [trajectory(c), trajectory(c)] }],
      }),
      attacks: TRAJECTORY_ATTACKS,
    },
  ];
}

function jobEndpoints(): Endpoint[] {
  return [
    {
      method: 'POST',
      template: '/v1/preview/training-jobs',
      writes: true,
      weight: 2,
      body: rlBody,
      attacks: TRAJECTORY_ATTACKS,
    },
    {
      method: 'POST',
      template: '/v1/preview/sft-training-jobs',
      writes: true,
      weight: 2,
      body: (c) => ({
        model_id: c.rng.pick(c.target.modelIds),
        training_data_url: c.target.artifactUrl,
        config: { batch_size: 1 + c.rng.int(2), learning_rate: 1e-4 },
      }),
      attacks: [
        (c, b) =>
          (b.training_data_url = c.rng.pick([
            'file:///etc/passwd',
            'http://169.254.169.254/latest',
            'wandb-artifact:///fuzz-b/fz/data:v0',
            'wandb-artifact:///local/fz/data:v99999999999999999999',
            'wandb-artifact:///local/../../data:latest',
          ])),
        (c, b) =>
          (b.config = c.rng.pick([
            { batch_size: 0 },
            { batch_size: 'auto' },
            { learning_rate: hugeArray(c.rng, 100_000) },
            { learning_rate: [1e-4, 0] },
          ])),
      ],
    },
    { method: 'GET', template: '/v1/preview/training-jobs/:id', writes: false, weight: 2, params: jobParam },
    { method: 'POST', template: '/v1/preview/training-jobs/:id/cancel', writes: true, weight: 1, params: jobParam },
    {
      method: 'GET',
      template: '/v1/preview/training-jobs/:id/events',
      writes: false,
      weight: 2,
      params: jobParam,
      query: (c) => pageQuery(c, []),
    },
  ];
}

function otherEndpoints(): Endpoint[] {
  const artifact = (c: Ctx) => ({
    entity: c.target.name,
    project: c.rng.chance(0.8) ? PROJECT : 'other',
    name: c.rng.pick(ARTIFACT_NAMES),
  });
  return [
    {
      method: 'POST',
      template: '/v1/chat/completions',
      writes: false,
      weight: 8,
      body: chatBody,
      attacks: CHAT_ATTACKS,
    },
    // Registered as a route of its own (clients that append a slash), so fuzzed as one.
    {
      method: 'POST',
      template: '/v1/chat/completions/',
      writes: false,
      weight: 1,
      body: chatBody,
      attacks: CHAT_ATTACKS,
    },
    {
      method: 'POST',
      template: '/v1/preview/artifacts/:entity/:project/:name',
      writes: true,
      weight: 3,
      params: artifact,
      multipart: true,
    },
    {
      method: 'GET',
      template: '/v1/preview/artifacts/:entity/:project/:name',
      writes: false,
      weight: 1,
      params: artifact,
    },
    {
      method: 'GET',
      template: '/v1/preview/artifacts/:entity/:project/:nameVersion/files/:file',
      writes: false,
      weight: 2,
      params: (c) => ({
        entity: c.target.name,
        project: PROJECT,
        nameVersion: `${c.rng.pick(ARTIFACT_NAMES)}:${c.rng.pick(['v0', 'latest', 'v1', 'v99999999999999999999', 'vx'])}`,
        file: c.rng.pick(['train.jsonl', 'nope', '..', '.']),
      }),
    },
    { method: 'GET', template: '/v1/dashboard/overview', writes: false, weight: 1 },
    {
      method: 'GET',
      template: '/v1/dashboard/models',
      writes: false,
      weight: 1,
      query: (c) => ({ ...pageQuery(c, c.target.modelIds), ...(c.rng.chance(0.3) ? { project: PROJECT } : {}) }),
    },
    { method: 'GET', template: '/v1/dashboard/models/:model_id', writes: false, weight: 1, params: modelParam },
    {
      method: 'GET',
      template: '/v1/dashboard/models/:model_id/metrics',
      writes: false,
      weight: 1,
      params: modelParam,
      query: (c) => pageQuery(c, []),
    },
    {
      method: 'GET',
      template: '/v1/dashboard/models/:model_id/trajectory-steps',
      writes: false,
      weight: 1,
      params: modelParam,
    },
    {
      method: 'GET',
      template: '/v1/dashboard/models/:model_id/trajectories',
      writes: false,
      weight: 2,
      params: modelParam,
      query: (c) => ({
        split: c.rng.pick(['train', 'val', 'nope']),
        ...(c.rng.chance(0.3) ? { step: c.rng.int(3) } : {}),
        ...pageQuery(c, c.target.trajectoryIds),
      }),
    },
    {
      method: 'GET',
      template: '/v1/dashboard/models/:model_id/trajectories/:trajectory_id',
      writes: false,
      weight: 2,
      params: (c) => ({ ...modelParam(c), trajectory_id: c.rng.pick(c.target.trajectoryIds) }),
    },
    {
      method: 'GET',
      template: '/v1/dashboard/jobs',
      writes: false,
      weight: 1,
      query: (c) => ({
        ...pageQuery(c, c.target.jobIds),
        ...(c.rng.chance(0.3) ? { model_id: c.target.modelIds[0] } : {}),
        ...(c.rng.chance(0.3) ? { status: 'COMPLETED,FAILED' } : {}),
      }),
    },
    { method: 'GET', template: '/v1/preview/me', writes: false, weight: 1 },
    { method: 'GET', template: '/v1/health', writes: false, weight: 1 },
    { method: 'GET', template: '/v1/system-check', writes: false, weight: 0.5 },
    { method: 'GET', template: '/', writes: false, weight: 0.5 },
    { method: 'GET', template: '/index.html', writes: false, weight: 0.3 },
    { method: 'GET', template: '/favicon.svg', writes: false, weight: 0.3 },
    {
      method: 'GET',
      template: '/assets/:file',
      writes: false,
      weight: 0.5,
      params: (c) => ({ file: c.rng.pick(['index.js', 'app.css', '..', '%00', 'x'.repeat(300)]) }),
    },
  ];
}

/** A step in a path: real ones, ones no checkpoint has, and ones that are not step numbers. */
const stepParam = (c: Ctx) =>
  c.rng.weighted<string>([
    [6, String(c.rng.int(3))],
    [1, c.rng.pick(['999999999999999', '9999999999999999', '-1', '1.5', '1e3', '0x1', 'latest', '01', ' 1', '１'])],
  ]);
const RETENTION_ATTACKS: Endpoint['attacks'] = [
  // The latest checkpoint must survive a policy that keeps nothing.
  (_c, b) => Object.assign(b, { keep_last: 0, keep_best: 0 }),
  (c, b) =>
    Object.assign(b, {
      keep_last: 0,
      keep_best: c.rng.pick([1, 2 ** 53, 2 ** 31]),
      best_metric: c.rng.pick(['loss', 'nope', hugeString(c.rng), '__proto__', 'constructor']),
      best_mode: c.rng.pick(['min', 'max']),
    }),
  (c, b) =>
    Object.assign(
      b,
      c.rng.pick([
        { keep_last: -1 },
        { keep_last: 1.5 },
        { keep_last: new Raw('1e999') },
        { best_mode: 'median' },
        { best_metric: '' },
        { keep_last: '2' },
      ]),
    ),
];

/** Routes added after the suite was first written: export, import, fork, retention, names, config. */
function portabilityEndpoints(): Endpoint[] {
  return [
    {
      method: 'GET',
      template: '/v1/preview/models/:model_id/checkpoints/:step/adapter',
      writes: false,
      weight: 1,
      params: (c) => ({ ...modelParam(c), step: stepParam(c) }),
    },
    {
      method: 'POST',
      template: '/v1/preview/models/import',
      writes: true,
      weight: 1.5,
      query: (c) => ({
        project: PROJECT,
        name: c.rng.word(),
        base_model: BASE_MODEL,
        ...(c.rng.chance(0.3) ? { entity: c.rng.pick([c.target.name, 'fuzz-b', 'local']) } : {}),
      }),
      bytes: (c, hostile) => adapterUpload(c.rng, c.world.a.adapterTar, hostile),
    },
    {
      method: 'POST',
      template: '/v1/preview/models/:model_id/fork',
      writes: true,
      weight: 1,
      params: modelParam,
      body: (c) => ({
        name: c.rng.word(),
        ...(c.rng.chance(0.5) ? { project: PROJECT } : {}),
        ...(c.rng.chance(0.5) ? { step: c.rng.int(3) } : {}),
      }),
      attacks: [
        (c, b) =>
          Object.assign(
            b,
            c.rng.pick([
              { step: 2 ** 53 },
              { step: 999_999 },
              { step: -1 },
              { name: 'main' },
              { name: 'a'.repeat(129) },
              { project: '..' },
              { entity: 'fuzz-b' },
            ]),
          ),
      ],
    },
    {
      method: 'GET',
      template: '/v1/preview/models/:model_id/retention',
      writes: false,
      weight: 0.5,
      params: modelParam,
    },
    {
      method: 'PUT',
      template: '/v1/preview/models/:model_id/retention',
      writes: true,
      weight: 1,
      params: modelParam,
      body: (c) => ({
        keep_last: c.rng.pick([null, 1, 2, 5]),
        ...(c.rng.chance(0.5)
          ? { keep_best: c.rng.pick([null, 0, 1]), best_metric: 'reward', best_mode: c.rng.pick(['max', 'min']) }
          : {}),
      }),
      attacks: RETENTION_ATTACKS,
    },
    {
      method: 'GET',
      template: '/v1/preview/models/by-name/:entity/:project/:name',
      writes: false,
      weight: 1,
      params: (c) => ({
        entity: c.target.name,
        project: c.rng.chance(0.8) ? PROJECT : 'other',
        name: c.rng.pick(['main', 'nope', c.rng.word()]),
      }),
    },
    {
      method: 'GET',
      template: '/v1/dashboard/jobs/:job_id/config',
      writes: false,
      weight: 1,
      params: (c) => ({ job_id: c.rng.pick(c.target.jobIds) }),
    },
  ];
}

/** OpenAI's model list, the API description and its viewer, and Prometheus' scrape. */
function discoveryEndpoints(): Endpoint[] {
  return [
    { method: 'GET', template: '/v1/models', writes: false, weight: 0.5 },
    {
      method: 'GET',
      template: '/v1/models/*',
      writes: false,
      weight: 1,
      params: (c) => ({
        '*': c.rng.pick([
          c.target.inferenceName,
          BASE_MODEL,
          `${c.target.name}/${PROJECT}/nope`,
          `${c.target.inferenceName}/x`,
          'a'.repeat(5000),
        ]),
      }),
    },
    { method: 'GET', template: '/openapi.json', writes: false, weight: 0.3 },
    { method: 'GET', template: '/docs', writes: false, weight: 0.2 },
    {
      method: 'GET',
      template: '/docs/:file',
      writes: false,
      weight: 0.3,
      params: (c) => ({ file: c.rng.pick(['json', 'yaml', 'static', 'uiConfig', 'initOAuth', '..']) }),
    },
    {
      method: 'GET',
      template: '/docs/static/:file',
      writes: false,
      weight: 0.3,
      params: (c) => ({
        file: c.rng.pick([
          'index.html',
          'swagger-ui.css',
          'swagger-ui-bundle.js',
          'swagger-initializer.js',
          '..',
          '%2e%2e%2fpackage.json',
          'nope',
        ]),
      }),
    },
    { method: 'GET', template: '/metrics', writes: false, weight: 0.3 },
  ];
}

/** A `tinker://` path: the target's checkpoints by step or by a name nobody saved, and broken ones. */
const tinkerPathOf = (c: Ctx) =>
  c.rng.weighted<string>([
    [4, `tinker://${c.rng.pick(c.target.modelIds)}/${c.rng.pick(['sampler_weights', 'weights'])}/step${c.rng.int(3)}`],
    [
      1,
      c.rng.pick([
        'tinker://',
        'tinker://x/y',
        `tinker://${c.rng.pick(c.world.b.modelIds)}/sampler_weights/step0`,
        'file:///etc/passwd',
        `tinker://${c.rng.pick(c.target.modelIds)}/sampler_weights/${'a'.repeat(2000)}`,
      ]),
    ],
  ]);

/** A forward_backward body as the SDK sends it: protobuf, here either a small valid-looking message or noise. */
function protobufBody(c: Ctx, hostile: boolean): { bytes: Buffer; contentType: string } {
  const varint = (value: number) => {
    const bytes: number[] = [];
    for (let rest = value; ; rest = Math.floor(rest / 128)) {
      if (rest < 128) return Buffer.from([...bytes, rest]);
      bytes.push((rest % 128) | 0x80);
    }
  };
  const field = (number: number, payload: Buffer) =>
    Buffer.concat([varint((number << 3) | 2), varint(payload.length), payload]);
  // 200,000 token ids in one chunk: once spread into a call's arguments, they overflowed the stack (a 500).
  const count = hostile && c.rng.chance(0.2) ? 200_000 : 3;
  const tokens = Buffer.from(Int32Array.from({ length: count }, (_, i) => 1 + (i % 3)).buffer);
  const chunk = field(1, field(1, tokens));
  const tensor = Buffer.concat([
    field(1, Buffer.from(BigInt64Array.from({ length: count }, (_, i) => BigInt(2 + (i % 3))).buffer)),
    Buffer.from([3 << 3, 2]),
  ]);
  const datum = Buffer.concat([
    field(1, chunk),
    field(2, Buffer.concat([field(1, Buffer.from('target_tokens')), field(2, tensor)])),
  ]);
  const valid = Buffer.concat([
    field(1, Buffer.from(c.rng.word())),
    field(3, datum),
    field(4, Buffer.from(c.rng.pick(['cross_entropy', 'ppo', 'nope']))),
  ]);
  const noise = Buffer.from(Array.from({ length: c.rng.pick([0, 1, 7, 300]) }, () => c.rng.int(256)));
  return {
    bytes: hostile
      ? c.rng.pick([
          valid,
          noise,
          valid.subarray(0, c.rng.int(valid.length)),
          Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
        ])
      : valid,
    contentType: 'application/x-protobuf',
  };
}

/** The Tinker SDK's routes: ids the fuzzer cannot know are made up, so most answers are 4xx. */
function tinkerEndpoints(): Endpoint[] {
  const modelId = (c: Ctx) => c.rng.pick([`${c.rng.word()}:train:0`, c.rng.pick(c.target.modelIds), hugeString(c.rng)]);
  const sampling = (c: Ctx): Body => ({
    max_tokens: 1 + c.rng.int(4),
    temperature: c.rng.pick([0, 1]),
    seed: c.rng.int(100),
    ...(c.rng.chance(0.3) ? { stop: c.rng.pick([['.'], [1, 2], [], '\n']) } : {}),
  });
  return [
    { method: 'GET', template: '/api/v1/healthz', writes: false, weight: 0.2 },
    {
      method: 'POST',
      template: '/api/v1/client/config',
      writes: false,
      weight: 0.2,
      body: () => ({ sdk_version: '0.38.0' }),
    },
    { method: 'POST', template: '/api/v1/client/dynamic_config', writes: false, weight: 0.2, body: () => ({}) },
    {
      method: 'POST',
      template: '/api/v1/telemetry',
      writes: false,
      weight: 0.2,
      body: (c) => ({ events: [{ x: c.rng.word() }] }),
    },
    { method: 'GET', template: '/api/v1/get_server_capabilities', writes: false, weight: 0.3 },
    {
      method: 'POST',
      template: '/api/v1/create_session',
      writes: true,
      weight: 0.5,
      body: () => ({ sdk_version: '0.38.0', tags: [], user_metadata: null }),
    },
    {
      method: 'POST',
      template: '/api/v1/session_heartbeat',
      writes: true,
      weight: 0.3,
      body: (c) => ({ session_id: c.rng.word() }),
    },
    {
      method: 'POST',
      template: '/api/v1/sessions/:session_id/finish',
      writes: true,
      weight: 0.2,
      params: (c) => ({ session_id: c.rng.word() }),
      body: () => ({}),
    },
    {
      method: 'POST',
      template: '/api/v1/create_model',
      writes: true,
      weight: 0.5,
      body: (c) => ({
        session_id: c.rng.word(),
        model_seq_id: c.rng.int(3),
        base_model: BASE_MODEL,
        lora_config: { rank: c.rng.pick([1, 4, 8]), seed: c.rng.int(10) },
      }),
      attacks: [
        (c, b) =>
          (b.lora_config = c.rng.pick([
            { rank: 0 },
            { rank: 2 ** 40 },
            { rank: 8, train_attn: false, train_mlp: false },
            null,
          ])),
      ],
    },
    {
      method: 'POST',
      template: '/api/v1/get_info',
      writes: false,
      weight: 0.3,
      body: (c) => ({ model_id: modelId(c) }),
    },
    {
      method: 'POST',
      template: '/api/v1/unload_model',
      writes: true,
      weight: 0.2,
      body: (c) => ({ model_id: modelId(c) }),
    },
    { method: 'POST', template: '/api/v1/forward_backward', writes: true, weight: 1, bytes: protobufBody },
    {
      // tinker 0.18's JSON forward (newer SDKs send forward_only in the protobuf forward_backward).
      method: 'POST',
      template: '/api/v1/forward',
      writes: false,
      weight: 0.5,
      body: (c) => ({
        model_id: modelId(c),
        seq_id: c.rng.pick([1, null, 2 ** 40]),
        forward_input: {
          data: [
            {
              model_input: {
                chunks: [
                  c.rng.pick([
                    { type: 'encoded_text', tokens: [1, 2, 3] },
                    { type: 'image', data: 'x' },
                  ]),
                ],
              },
              loss_fn_inputs: {
                target_tokens: { data: [2, 3, 4], dtype: c.rng.pick(['int64', 'float32', 'int8']), shape: [3] },
              },
            },
          ],
          loss_fn: c.rng.pick(['cross_entropy', 'nope']),
        },
      }),
      attacks: [
        // One chunk of ~130,000 token ids: once spread into a call's arguments, they overflowed the stack (a 500).
        (c, b) => {
          const count = c.rng.pick([130_000, 200_000]);
          b.forward_input.data[0].model_input.chunks = [{ type: 'encoded_text', tokens: manyTokens(count) }];
          b.forward_input.data[0].loss_fn_inputs.target_tokens = { data: manyTokens(count), dtype: 'int64' };
        },
      ],
    },
    {
      method: 'POST',
      template: '/api/v1/optim_step',
      writes: true,
      weight: 0.5,
      body: (c) => ({
        model_id: modelId(c),
        adam_params: { learning_rate: 1e-4, beta1: 0.9, beta2: 0.95, eps: 1e-12 },
      }),
    },
    {
      method: 'POST',
      template: '/api/v1/save_weights',
      writes: true,
      weight: 0.3,
      body: (c) => ({ model_id: modelId(c), path: c.rng.word() }),
    },
    {
      method: 'POST',
      template: '/api/v1/save_weights_for_sampler',
      writes: true,
      weight: 0.3,
      body: (c) => ({ model_id: modelId(c), path: c.rng.pick([c.rng.word(), '../x', null]) }),
    },
    {
      method: 'POST',
      template: '/api/v1/save_weights_external',
      writes: true,
      weight: 0.3,
      body: (c) => ({
        model_id: modelId(c),
        seq_id: c.rng.pick([1, null]),
        path: c.rng.pick([c.rng.word(), '../x', '']),
        ...(c.rng.chance(0.3) ? { ttl_seconds: c.rng.pick([3600, 1, null, 2 ** 40]) } : {}),
        ...(c.rng.chance(0.2) ? { age_encryption_recipients: c.rng.pick([['age1x'], [], null]) } : {}),
      }),
    },
    {
      method: 'PUT',
      template: '/api/v1/training_runs/:run_id/checkpoints/*',
      writes: true,
      weight: 0.3,
      params: (c) => ({
        run_id: c.rng.pick([...c.world.b.modelIds, c.rng.pick(c.target.modelIds)]),
        '*': c.rng.pick([
          'sampler_weights/step1/ttl',
          'weights/x/ttl',
          'external_weights/x/ttl',
          'sampler_weights/step1',
        ]),
      }),
      body: (c) => ({ ttl_seconds: c.rng.pick([3600, null, 1, 2 ** 40]) }),
    },
    {
      // A signed file of an export nobody signed: refused whatever the parameters.
      method: 'GET',
      template: '/api/v1/external_weights/:model_id/:step/:file',
      writes: false,
      weight: 0.2,
      params: (c) => ({
        model_id: c.rng.pick([...c.world.b.modelIds, c.rng.pick(c.target.modelIds)]),
        step: c.rng.pick(['1', '01', '0', 'x']),
        file: c.rng.pick(['adapter_config.json', 'adapter_model.safetensors', '../x']),
      }),
      query: (c) => ({
        expires: c.rng.pick([0, 9_999_999_999, 'soon']),
        signature: c.rng.pick(['0'.repeat(64), 'zz', hugeString(c.rng)]),
      }),
    },
    {
      method: 'POST',
      template: '/api/v1/load_weights',
      writes: true,
      weight: 0.3,
      body: (c) => ({ model_id: modelId(c), path: tinkerPathOf(c), optimizer: c.rng.chance(0.5) }),
    },
    {
      method: 'POST',
      template: '/api/v1/create_sampling_session',
      writes: true,
      weight: 0.3,
      body: (c) => ({ session_id: c.rng.word(), sampling_session_seq_id: 0, model_path: tinkerPathOf(c) }),
    },
    {
      method: 'GET',
      template: '/api/v1/samplers/:sampler_id',
      writes: false,
      weight: 0.2,
      params: (c) => ({ sampler_id: c.rng.word() }),
    },
    {
      method: 'POST',
      template: '/api/v1/asample',
      writes: false,
      weight: 1.5,
      body: (c) => ({
        prompt: { chunks: [{ type: 'encoded_text', tokens: [1, 2, 3].slice(0, 1 + c.rng.int(3)) }] },
        sampling_params: sampling(c),
        num_samples: 1 + c.rng.int(2),
        ...(c.rng.chance(0.5) ? { model_path: tinkerPathOf(c) } : { base_model: BASE_MODEL }),
        ...(c.rng.chance(0.2) ? { prompt_logprobs: true } : {}),
      }),
      attacks: [
        (c, b) => (b.prompt.chunks[0].tokens = c.rng.pick([[], [99_999_999], [-1], hugeArray(c.rng, 100_000)])),
        (c, b) => (b.prompt.chunks[0].tokens = manyTokens(c.rng.pick([200_000, 900_000]))),
        (c, b) =>
          Object.assign(
            b,
            c.rng.pick([
              { num_samples: 1_000_000 },
              { sampling_params: { max_tokens: 2 ** 31 } },
              { sampling_params: { stop: [99_999_999] } },
              { sampling_session_id: 'nope' },
            ]),
          ),
      ],
    },
    {
      method: 'POST',
      template: '/api/v1/retrieve_future',
      writes: false,
      weight: 1,
      body: (c) => ({ request_id: c.rng.pick([c.rng.word(), '', hugeString(c.rng)]), allow_metadata_only: true }),
    },
    {
      method: 'POST',
      template: '/api/v1/weights_info',
      writes: false,
      weight: 0.3,
      body: (c) => ({ tinker_path: tinkerPathOf(c) }),
    },
    {
      method: 'GET',
      template: '/api/v1/training_runs',
      writes: false,
      weight: 0.5,
      query: (c) => ({ limit: c.rng.pick([1, 20, 0, 5000]), offset: c.rng.pick([0, 1, 2 ** 53]) }),
    },
    {
      method: 'GET',
      template: '/api/v1/checkpoints',
      writes: false,
      weight: 0.3,
      query: (c) => ({ limit: c.rng.pick([1, 100, 0]), offset: c.rng.pick([0, 3, -1]) }),
    },
    {
      method: 'GET',
      template: '/api/v1/training_runs/:run_id',
      writes: false,
      weight: 0.5,
      params: (c) => ({ run_id: c.rng.pick([...c.target.modelIds, ...c.world.b.modelIds, 'nope']) }),
    },
    {
      method: 'GET',
      template: '/api/v1/training_runs/:run_id/checkpoints',
      writes: false,
      weight: 0.5,
      params: (c) => ({ run_id: c.rng.pick([...c.target.modelIds, 'nope']) }),
    },
    {
      method: 'GET',
      template: '/api/v1/training_runs/:run_id/checkpoints/*',
      writes: false,
      weight: 0.3,
      params: (c) => ({
        run_id: c.rng.pick([...c.world.b.modelIds, c.rng.pick(c.target.modelIds), 'nope']),
        '*': c.rng.pick(['sampler_weights/step1/archive', 'weights/x/archive', 'sampler_weights/step0', '../archive']),
      }),
    },
    {
      // A signed download nobody signed: refused whatever the parameters.
      method: 'GET',
      template: '/api/v1/checkpoint_archives/:model_id/:step',
      writes: false,
      weight: 0.3,
      params: (c) =>
        c.rng.chance(0.4)
          ? { model_id: c.target.archive.modelId, step: c.rng.pick(['', '0', '00']) + c.target.archive.step }
          : {
              model_id: c.rng.pick([...c.world.b.modelIds, c.rng.pick(c.target.modelIds)]),
              step: c.rng.pick(['1', '0', '-1', 'x']),
            },
      // A real signature over values written otherwise (step=01, a zero-padded expiry): a URL nobody signed.
      query: (c) =>
        c.rng.chance(0.5)
          ? { expires: `${c.rng.pick(['0', '00'])}${c.target.archive.expires}`, signature: c.target.archive.signature }
          : c.rng.chance(0.3)
            ? { expires: c.target.archive.expires, signature: c.target.archive.signature }
            : {
                expires: c.rng.pick([0, 9_999_999_999, 'soon']),
                signature: c.rng.pick(['0'.repeat(64), 'zz', hugeString(c.rng)]),
              },
      mustRefuse: (params, query) =>
        /^0\d/.test(params.step ?? '') || /(^|&)expires=0\d/.test(query)
          ? 'a signed archive URL with a value written otherwise than it was signed'
          : undefined,
    },
    {
      method: 'DELETE',
      template: '/api/v1/training_runs/:run_id/checkpoints/*',
      writes: true,
      weight: 0.3,
      // Step 0 is the model's own start and is never named here: what is deleted is a name nobody saved, or another entity's.
      params: (c) => ({
        run_id: c.rng.pick([...c.world.b.modelIds, c.rng.pick(c.target.modelIds)]),
        '*': c.rng.pick(['sampler_weights/nope', 'weights/x', 'sampler_weights/step999', '..']),
      }),
    },
  ];
}

/** W&B's API as the wandb SDK calls it: GraphQL documents with their variables, the run's file stream, upload URLs. */
function wandbEndpoints(): Endpoint[] {
  const digest = (c: Ctx) => c.rng.pick(['0'.repeat(32), c.rng.word(), hugeString(c.rng)]);
  const documents: ((c: Ctx) => Body)[] = [
    () => ({ query: 'query Viewer { viewer { id entity username teams { edges { node { name } } } } }' }),
    (c) => ({
      query:
        'query P($e: String, $p: String) { project(name: $p, entityName: $e) { id artifact(name: "x:latest") { id digest artifactType { name } } } }',
      variables: { e: c.target.name, p: PROJECT },
    }),
    (c) => ({
      query: 'mutation C($input: CreateArtifactInput!) { createArtifact(input: $input) { artifact { id state } } }',
      variables: {
        input: {
          artifactTypeName: 'dataset',
          artifactCollectionName: c.rng.pick(ARTIFACT_NAMES),
          entityName: c.target.name,
          projectName: PROJECT,
          digest: digest(c),
          enableDigestDeduplication: c.rng.chance(0.5),
        },
      },
    }),
    (c) => ({
      query:
        'mutation F($input: CreateArtifactFilesInput!) { createArtifactFiles(input: $input) { files { edges { node { uploadUrl } } } } }',
      variables: {
        input: {
          artifactFiles: [{ artifactID: c.rng.word(), name: 'train.jsonl', md5: digest(c) }],
          storageLayout: 'V2',
        },
      },
    }),
    (c) => ({
      query: 'mutation M($id: ID!) { commitArtifact(input: {artifactID: $id}) { artifact { id } } }',
      variables: { id: c.rng.pick([c.rng.word(), Buffer.from(`Artifact:${c.rng.word()}`).toString('base64')]) },
    }),
    (c) => ({
      query: 'query A($id: ID!) { artifact(id: $id) { id state size } }',
      variables: { id: c.rng.pick([c.rng.word(), hugeString(c.rng)]) },
    }),
    (c) => ({
      query: c.rng.pick([
        '{',
        'query { nope }',
        `{ viewer { ${'teams { edges { node { name } } } '.repeat(50)} } }`,
        'subscription { x }',
      ]),
    }),
  ];
  return [
    {
      method: 'POST',
      template: '/graphql',
      writes: true,
      weight: 1.5,
      body: (c) =>
        c.rng.weighted<(c: Ctx) => Body>([
          [3, (c) => c.rng.pick(documents)(c)],
          [3, graphqlDocument],
          [1, graphqlRepro],
        ])(c),
      attacks: [
        (c, b) => (b.query = c.rng.pick([hugeString(c.rng), `{ ${'viewer { '.repeat(5000)}`, 42, null])),
        (c, b) => (b.variables = c.rng.pick([deepNesting(c.rng), hugeArray(c.rng), 'x'])),
      ],
    },
    {
      method: 'POST',
      template: '/files/:entity/:project/:run/file_stream',
      writes: false,
      weight: 0.3,
      params: (c) => ({ entity: c.target.name, project: PROJECT, run: c.rng.word() }),
      body: (c) => ({ files: { 'output.log': { offset: 0, content: [c.rng.word()] } }, complete: c.rng.chance(0.5) }),
    },
    {
      method: 'PUT',
      template: '/wandb/uploads/:token',
      writes: true,
      weight: 0.5,
      params: (c) => ({ token: uploadToken(c).token }),
      bytes: (c, hostile) => ({
        bytes: hostile
          ? c.rng.pick([Buffer.from(c.rng.word()), Buffer.alloc(c.rng.pick([0, 1_100_000]), 'z')])
          : Buffer.from(c.target.uploads.length > 0 ? c.rng.pick(c.target.uploads).body : c.rng.word()),
        contentType: c.rng.pick(['application/octet-stream', 'application/json', '']),
      }),
    },
    { method: 'POST', template: '/sdk/otel/*', writes: false, weight: 0.1, params: () => ({ '*': 'v1/metrics' }) },
  ];
}

export const ENDPOINTS: Endpoint[] = [
  ...modelEndpoints(),
  ...doorEndpoints(),
  ...jobEndpoints(),
  ...otherEndpoints(),
  ...portabilityEndpoints(),
  ...discoveryEndpoints(),
  ...tinkerEndpoints(),
  ...wandbEndpoints(),
];
