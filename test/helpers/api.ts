/**
 * The one JSON client tests call a running service with over real HTTP, and the model every training test
 * creates first. In-process apps (helpers/app.ts `call`) have the same shape, so helpers here take either.
 */
import assert from 'node:assert/strict';
import { BUILTIN_BASE_MODEL } from '../../src/config.ts';

/** A JSON call: method, route, optional body and a key for this call alone; the status and the parsed body. */
export type Api = (
  method: string,
  route: string,
  body?: unknown,
  key?: string,
) => Promise<{ status: number; body: any }>;

/** How a key travels: our API and OpenAI's take a bearer token, Tinker's SDK sends `x-api-key: tml-<key>`. */
export const bearerKey = (key: string): Record<string, string> => ({ authorization: `Bearer ${key}` });
export const tinkerKey = (key: string): Record<string, string> => ({ 'x-api-key': `tml-${key}` });

/** Calls `url` with `key` (the key given per call wins); JSON in and out, an empty answer is null. */
export function httpApi(url: string, key: string, auth: (key: string) => Record<string, string> = bearerKey): Api {
  return async (method, route, body, useKey = key) => {
    const response = await fetch(`${url}${route}`, {
      method,
      headers: { ...auth(useKey), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : null };
  };
}

/** The `data:` payloads of a server-sent-event stream as they arrive, `[DONE]` included. */
export async function* ssePayloads(response: Response): AsyncGenerator<string> {
  let buffered = '';
  for await (const piece of response.body!.pipeThrough(new TextDecoderStream())) {
    buffered += piece;
    const events = buffered.split('\n\n');
    buffered = events.pop()!;
    for (const event of events) yield event.slice('data: '.length);
  }
}

/** A streamed chat completion's data payloads in order, `[DONE]` included; `onFirstChunk` runs as the first arrives. */
export async function streamChat(
  url: string,
  key: string,
  body: Record<string, unknown>,
  onFirstChunk?: () => void,
): Promise<string[]> {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...bearerKey(key), 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
  });
  assert.equal(response.status, 200, `a stream answers 200 (${response.status})`);
  const payloads: string[] = [];
  for await (const payload of ssePayloads(response)) {
    if (payloads.length === 0) onFirstChunk?.();
    payloads.push(payload);
  }
  return payloads;
}

/** Creates a model (on the built-in tiny model unless told) and answers its body; any other status fails the test. */
export async function createModel(
  api: Api,
  project: string,
  name: string,
  options: { base?: string; entity?: string; key?: string } = {},
): Promise<{ id: string; run_id: string; entity: string; [field: string]: any }> {
  const fields = {
    project,
    name,
    base_model: options.base ?? BUILTIN_BASE_MODEL.id,
    ...(options.entity ? { entity: options.entity } : {}),
  };
  const created = await api('POST', '/v1/preview/models', fields, options.key);
  assert.equal(created.status, 200, JSON.stringify(created.body));
  return created.body;
}

/** The choices of one chat completion for one user message; any status but 200 fails the test. */
export async function chatChoices(
  api: Api,
  model: string,
  question: string,
  options: Record<string, unknown> = {},
): Promise<Record<string, any>[]> {
  const response = await api('POST', '/v1/chat/completions', {
    model,
    messages: [{ role: 'user', content: question }],
    ...options,
  });
  assert.equal(response.status, 200, JSON.stringify(response.body));
  return response.body.choices;
}
