/**
 * Turns a route's valid-ish request into a hostile one: fields replaced by hostile values, dropped or added,
 * the body malformed, emptied or mislabelled, path ids swapped for unknown, foreign or broken ones, queries
 * and headers abused, multipart bodies broken. One request gets a few of these, chosen by the seeded PRNG.
 */
import crypto from 'node:crypto';
import type { Ctx, Endpoint } from './endpoints.ts';
import { hostileValue, Raw, serialize, weirdString } from './hostile.ts';
import type { Draft } from './http.ts';
import type { Prng } from './prng.ts';

type Mutation = (rng: Prng, draft: Draft, c: Ctx) => void;

/** A copy of `value` with one node somewhere inside replaced, dropped or given a hostile sibling. */
function mutateValue(rng: Prng, value: unknown, depth = 0): unknown {
  const container = value !== null && typeof value === 'object' && !(value instanceof Raw);
  if (!container || depth > 5 || rng.chance(0.25)) return hostileValue(rng);
  if (Array.isArray(value)) {
    if (value.length === 0 || rng.chance(0.15)) return [...value, hostileValue(rng)];
    const index = rng.int(value.length);
    return value.map((item, i) => (i === index ? mutateValue(rng, item, depth + 1) : item));
  }
  const copy = { ...(value as Record<string, unknown>) };
  const keys = Object.keys(copy);
  const action = keys.length === 0 ? 'add' : rng.pick(['dive', 'dive', 'dive', 'drop', 'add']);
  if (action === 'add') copy[rng.chance(0.5) ? weirdString(rng) : rng.word()] = hostileValue(rng);
  else if (action === 'drop') delete copy[rng.pick(keys)];
  else {
    const key = rng.pick(keys);
    copy[key] = mutateValue(rng, copy[key], depth + 1);
  }
  return copy;
}

const UNKNOWN_ID = () => crypto.randomUUID();
const BAD_SEGMENTS = [
  '%C0%AF',
  '%',
  '%zz',
  '%00',
  '..',
  '%2e%2e%2f%2e%2e%2fetc',
  '%2F',
  'a%2Fb',
  '%E2%80%AE',
  '%F0%9F%A4%96',
  '%FF%FE',
  '-1',
  '0',
  'null',
  'undefined',
  '__proto__',
  'constructor',
];

const bodyMutations: Mutation[] = [
  (rng, d) => (d.body = mutateValue(rng, d.body)),
  (rng, d) => (d.body = mutateValue(rng, mutateValue(rng, d.body))),
  (rng, d) => (d.body = hostileValue(rng)),
  (rng, d) => {
    const text = serialize(d.body);
    d.bytes = Buffer.from(
      rng.pick([
        text.slice(0, rng.int(text.length)),
        `${text},`,
        `\ufeff${text}`,
        `${text}${text}`,
        text.replace(/"/, "'"),
        '',
        ' ',
        'null',
        '{"a":',
        '\u0000',
        `${'['.repeat(100_000)}`,
        text.replace(/:/, ':\\x'),
      ]),
    );
  },
  (rng, d) =>
    (d.bytes = Buffer.from(
      rng.pick([
        [0xff, 0xfe, 0xc0, 0xaf],
        [0x7b, 0x22, 0xc3, 0x28, 0x22, 0x3a, 0x31, 0x7d],
        [0xef, 0xbb, 0xbf, 0x7b, 0x7d],
      ]),
    )),
  (rng, d) =>
    (d.headers['content-type'] = rng.pick([
      'text/plain',
      'application/json; charset=utf-16',
      'application/x-www-form-urlencoded',
      'multipart/form-data',
      'multipart/form-data; boundary=x',
      '',
      'application/json, text/plain',
      ';;;',
      `application/${'x'.repeat(5000)}`,
      'application/vnd.api+json',
      'APPLICATION/JSON',
    ])),
  (_rng, d) => delete d.headers['content-type'],
  (_rng, d) => {
    d.body = undefined;
    d.bytes = undefined;
  },
];

const pathMutations: Mutation[] = [
  (rng, d, c) => {
    const names = Object.keys(d.params);
    if (names.length === 0) return;
    const name = rng.pick(names);
    const choice = rng.weighted<() => [string, boolean]>([
      [3, () => [UNKNOWN_ID(), false]],
      [3, () => [otherId(rng, c, name), false]],
      [3, () => [rng.pick(BAD_SEGMENTS), true]],
      [1, () => ['a'.repeat(rng.pick([300, 5000, 100_000])), true]],
      [1, () => [weirdString(rng), false]],
    ])();
    d.params[name] = choice[0];
    if (choice[1]) d.rawParams.add(name);
  },
  (rng, d) =>
    (d.template = rng.pick([
      `${d.template}/`,
      `${d.template}//x`,
      `/${d.template}`,
      `${d.template}/%C0%AF`,
      '/v1/nope',
      '/v1/preview/models/x/y/z',
      `${d.template}#frag`,
      '/v1/preview/../preview/me',
      '*',
    ])),
  // The protected entity's own key must not turn a read of its data into a write of it. No DELETE: the routes that
  // have one fuzz it, and a read turned into it deleted the seeded model early, leaving every model route a 404.
  (rng, d, c) =>
    (d.method = rng.pick(
      c.readOnly ? ['GET', 'OPTIONS', 'HEAD', 'TRACE'] : ['PUT', 'PATCH', 'GET', 'POST', 'OPTIONS', 'HEAD', 'TRACE'],
    )),
];

/** Another entity's id of the same kind as the path parameter, for cross-entity probes. */
function otherId(rng: Prng, c: Ctx, name: string): string {
  const other = c.target === c.world.a ? c.world.b : c.world.a;
  if (name === 'id' || name === 'job_id') return rng.pick(other.jobIds);
  if (name === '*') return other.inferenceName;
  if (name === 'trajectory_id') return rng.pick(other.trajectoryIds);
  if (name === 'entity') return other.name;
  return rng.pick(other.modelIds);
}

const queryMutations: Mutation[] = [
  (rng, d) => {
    const name = rng.pick(['limit', 'after', 'order', 'split', 'step', 'status', 'model_id', 'project', 'x']);
    const value = rng.pick([
      '-1',
      '0',
      'abc',
      '1e309',
      '',
      '1.5',
      '99999999999999999999',
      '%zz',
      '%00',
      'a'.repeat(20_000),
      'NaN',
      '[]',
      'COMPLETED,'.repeat(2000),
    ]);
    d.query = [d.query, `${name}=${value}`].filter(Boolean).join('&');
  },
  (rng, d) =>
    (d.query = [
      d.query,
      rng.pick([
        'limit=1&limit=2',
        'after[]=x',
        'after[a]=b',
        '&&&',
        '=',
        'limit',
        '__proto__[x]=1',
        'split=train&split=val',
      ]),
    ]
      .filter(Boolean)
      .join('&')),
];

const headerMutations: Mutation[] = [
  (rng, d, c) => {
    const choice = rng.pick([
      'none',
      'Bearer',
      'Bearer sk-wrongwrongwrongwrongwrong',
      'Basic YTpi',
      `Bearer ${'k'.repeat(10_000)}`,
      'bearer',
      `Bearer  ${c.world.a.key}`,
      `Bearer ${c.world.a.key.toUpperCase()}`,
    ]);
    if (choice === 'none') delete d.headers.authorization;
    else d.headers.authorization = choice;
  },
  (rng, d) =>
    (d.headers[rng.pick(['x-request-id', 'x-big', 'accept-encoding', 'accept', 'cookie'])] = 'y'.repeat(
      rng.pick([10, 8000, 20_000, 70_000]),
    )),
  (rng, d) => {
    for (let i = 0; i < rng.pick([50, 200]); i += 1) d.headers[`x-h-${i}`] = 'v';
  },
  (_rng, d) => (d.headers['transfer-encoding'] = 'chunked'),
];

/** A multipart body built by hand, as valid as the PRNG decides. */
export function multipart(rng: Prng, draft: Draft, hostile: boolean): void {
  const boundary = `----fuzz${rng.word(12)}`;
  const file = (name: string, content: string) =>
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${name}"\r\nContent-Type: application/octet-stream\r\n\r\n${content}\r\n`;
  let parts = [
    file('train.jsonl', '{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]}\n'),
  ];
  let contentType = `multipart/form-data; boundary=${boundary}`;
  let close = `--${boundary}--\r\n`;
  if (hostile) {
    rng.pick<() => void>([
      () => (contentType = 'multipart/form-data'),
      () =>
        parts.push(
          `--${boundary}\r\nContent-Disposition: form-data; name="note"\r\nContent-Type: text/plain\r\n\r\nhello\r\n`,
        ),
      () => parts.push(`--${boundary}\r\nContent-Disposition: form-data; name="note"\r\n\r\nhello\r\n`),
      () =>
        (parts = [
          file(rng.pick(['../../x', '', 'a/b', '.', '..', 'x'.repeat(300), 'nul\u0000l', '%2e%2e', 'é.txt']), 'x'),
        ]),
      () => (parts = Array.from({ length: 70 }, (_, i) => file(`f${i}`, 'x'))),
      () =>
        (parts = Array.from(
          { length: 20 },
          (_, i) => `--${boundary}\r\nContent-Disposition: form-data; name="f${i}"\r\n\r\nv\r\n`,
        )),
      () => (close = ''),
      () => (close = `--${boundary}`),
      () => (parts = [file('big.bin', 'z'.repeat(2_000_000))]),
      () => (parts = [file('train.jsonl', 'x'), file('train.jsonl', 'y')]),
      () => (contentType = 'multipart/form-data; boundary=other'),
      () => (parts = []),
      () => (parts = [`--${boundary}\r\nContent-Disposition: attachment\r\n\r\nx\r\n`]),
    ])();
  }
  draft.headers['content-type'] = contentType;
  draft.bytes = Buffer.from(parts.join('') + close, 'utf8');
}

/** The valid-ish request of a route for a target entity, broken by a few mutations unless `clean`. */
export function buildDraft(endpoint: Endpoint, c: Ctx, key: string, clean: boolean): Draft {
  const { rng } = c;
  const query = endpoint.query?.(c) ?? {};
  const draft: Draft = {
    label: `${endpoint.method} ${endpoint.template}`,
    method: endpoint.method,
    template: endpoint.template,
    params: endpoint.params?.(c) ?? {},
    rawParams: new Set(),
    query: Object.entries(query)
      .map(([name, value]) => `${name}=${encodeURIComponent(String(value))}`)
      .join('&'),
    headers: { authorization: `Bearer ${key}` },
  };
  if (endpoint.body) {
    draft.body = endpoint.body(c);
    draft.headers['content-type'] = 'application/json';
    if (endpoint.attacks && rng.chance(clean ? 0.1 : 0.35)) rng.pick(endpoint.attacks)(c, draft.body);
  }
  if (endpoint.multipart) multipart(rng, draft, !clean && rng.chance(0.6));
  if (endpoint.bytes) {
    const { bytes, contentType, mustRefuse } = endpoint.bytes(c, !clean && rng.chance(0.6));
    draft.bytes = bytes;
    draft.headers['content-type'] = contentType;
    draft.mustRefuse = mustRefuse;
  }
  const refusal = () => endpoint.mustRefuse?.(draft.params, draft.query) ?? draft.mustRefuse;
  if (clean) {
    draft.mustRefuse = refusal();
    return draft;
  }
  const count = 1 + rng.int(2);
  for (let i = 0; i < count; i += 1) {
    const family = rng.weighted<Mutation[]>([
      [endpoint.body || endpoint.bytes ? 6 : 1, bodyMutations],
      [Object.keys(draft.params).length > 0 ? 4 : 1, pathMutations],
      [2, queryMutations],
      [2, headerMutations],
    ]);
    rng.pick(family)(rng, draft, c);
  }
  draft.mustRefuse = refusal();
  return draft;
}
