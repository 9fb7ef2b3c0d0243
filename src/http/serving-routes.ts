/**
 * The serving doors over HTTP: chat completions and completions (`data: <json>` SSE ending with `data: [DONE]`, as
 * vLLM frames them), the Responses API (`POST /v1/responses`, `GET`/`DELETE /v1/responses/{id}`) and the Anthropic
 * Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`), whose streams name their events. Thin: a door
 * (src/serving/) answers; this writes it. One in-flight limit for all of them (they share the engine's batch); a
 * client that disconnects cancels its generation, streamed or not; a failure mid-stream is the door's error event.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ChatCompletionBody } from '../api/chat.ts';
import { CompletionBody } from '../api/completions.ts';
import { CountTokens, CountTokensBody, MessagesBody } from '../api/messages.ts';
import { DeletedResponse, ResponseObject, ResponsesBody } from '../api/responses.ts';
import { AppError } from '../errors.ts';
import type { Metrics } from '../metrics.ts';
import type { ChatDoor } from '../serving/chat/door.ts';
import type { CompletionsDoor } from '../serving/completions/door.ts';
import type { DoorAnswer } from '../serving/door.ts';
import type { MessagesDoor } from '../serving/messages/door.ts';
import type { ResponsesDoor } from '../serving/responses/door.ts';
import { anthropicErrorBody, errorFamily, openAiErrorBody, toAppError } from './errors.ts';

export interface ServingDoors {
  chat: ChatDoor;
  completions: CompletionsDoor;
  responses: ResponsesDoor;
  messages: MessagesDoor;
}

/** A door's answer to one request; `disconnected` aborts when the client goes away. */
type Answer = (request: FastifyRequest, disconnected: AbortSignal) => Promise<DoorAnswer<unknown>>;

export function registerServingRoutes(
  app: FastifyInstance,
  doors: ServingDoors,
  maxInFlight: number,
  metrics: Metrics,
): void {
  const serve = servingHandler(inFlightLimit(maxInFlight), metrics);
  const requestId = (request: FastifyRequest) => {
    const header = request.headers['x-request-id'];
    return typeof header === 'string' ? header : undefined;
  };
  const chat = serve((request, gone) =>
    doors.chat.create(request.principal, request.body as ChatCompletionBody, requestId(request), gone),
  );
  const chatOptions = { schema: { body: ChatCompletionBody } };
  app.post('/v1/chat/completions', chatOptions, chat);
  app.post('/v1/chat/completions/', chatOptions, chat);
  const completions = serve((request, gone) =>
    doors.completions.create(request.principal, request.body as CompletionBody, requestId(request), gone),
  );
  const completionOptions = { schema: { body: CompletionBody } };
  app.post('/v1/completions', completionOptions, completions);
  app.post('/v1/completions/', completionOptions, completions);
  registerResponsesRoutes(app, doors.responses, serve, requestId);
  registerMessagesRoutes(app, doors.messages, serve, requestId);
}

type Serve = ReturnType<typeof servingHandler>;
type RequestId = (request: FastifyRequest) => string | undefined;

function registerResponsesRoutes(app: FastifyInstance, door: ResponsesDoor, serve: Serve, requestId: RequestId): void {
  app.post(
    '/v1/responses',
    { schema: { body: ResponsesBody } },
    serve((request, gone) => door.create(request.principal, request.body as ResponsesBody, requestId(request), gone)),
  );
  const byId = { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] } as const;
  app.get<{ Params: { id: string } }>(
    '/v1/responses/:id',
    { schema: { params: byId, response: { 200: ResponseObject } } },
    async (request) => (await door.get(request.principal, request.params.id)).response,
  );
  app.delete<{ Params: { id: string } }>(
    '/v1/responses/:id',
    { schema: { params: byId, response: { 200: DeletedResponse } } },
    async (request) => door.delete(request.principal, request.params.id),
  );
}

function registerMessagesRoutes(app: FastifyInstance, door: MessagesDoor, serve: Serve, requestId: RequestId): void {
  app.post(
    '/v1/messages',
    { schema: { body: MessagesBody } },
    serve((request, gone) => door.create(request.principal, request.body as MessagesBody, requestId(request), gone)),
  );
  app.post(
    '/v1/messages/count_tokens',
    { schema: { body: CountTokensBody, response: { 200: CountTokens } } },
    async (request) => door.countTokens(request.principal, request.body as CountTokensBody, requestId(request)),
  );
}

/** The handler of a generating route: admitted, answered whole or streamed, observed by the metrics. */
function servingHandler(admit: (reply: FastifyReply) => void, metrics: Metrics) {
  return (answer: Answer) => async (request: FastifyRequest, reply: FastifyReply) => {
    admit(reply);
    // A client that goes away before its whole answer is ready cancels the generation in the engine.
    const clientGone = new AbortController();
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) clientGone.abort();
    });
    const stream = (request.body as { stream?: unknown } | undefined)?.stream === true;
    const observation = metrics.chat(stream);
    let result: DoorAnswer<unknown>;
    try {
      result = await answer(request, clientGone.signal);
    } catch (error) {
      if (clientGone.signal.aborted) return undefined; // nobody is left to answer; Fastify sends nothing to a closed socket
      throw error;
    }
    if (result.kind === 'stream') return writeStream(request, reply, result, observation);
    // Lets a client (and bench/chat-overhead.ts) split latency into engine time and the server's own.
    reply.header('server-timing', `engine;dur=${result.engineMs.toFixed(3)}`);
    observation.finished(result.completionTokens);
    return result.body;
  };
}

/**
 * Admits a request while fewer than `maxInFlight` are unfinished (released when its response ends or its socket
 * closes): beyond that the engine's batch is full enough, so 429 instead of queueing without bound.
 */
function inFlightLimit(maxInFlight: number): (reply: FastifyReply) => void {
  let inFlight = 0;
  return (reply) => {
    if (inFlight >= maxInFlight)
      throw new AppError(
        'too_many_requests',
        `${inFlight} chat requests are in flight (the limit is ${maxInFlight}); retry shortly`,
      );
    inFlight += 1;
    let released = false;
    const release = () => {
      if (!released) inFlight -= 1;
      released = true;
    };
    reply.raw.once('close', release);
    reply.raw.once('finish', release);
  };
}

/** The error body of a failure, in the shape of the route's API family. */
function familyErrorBody(request: FastifyRequest, error: AppError) {
  return errorFamily(request.url) === 'anthropic' ? anthropicErrorBody(error) : openAiErrorBody(error);
}

/**
 * The events as SSE (`event:` when the door names them); a client that disconnects cancels the generation, and a
 * failure mid-stream is the door's error event. Completion tokens: the last count an event reports, else one per
 * content delta (close to the token count: a delta holds the text one decode step produced).
 */
async function writeStream(
  request: FastifyRequest,
  reply: FastifyReply,
  result: Extract<DoorAnswer<unknown>, { kind: 'stream' }>,
  observation: ReturnType<Metrics['chat']>,
): Promise<void> {
  reply.hijack();
  const raw = reply.raw;
  raw.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
    'x-request-id': request.id,
  });
  let disconnected = false;
  let deltas = 0;
  let reported: number | undefined;
  raw.on('close', () => {
    if (raw.writableFinished) return;
    disconnected = true;
    void result.cancel().catch(() => undefined);
  });
  const write = (event: { event?: string; data: unknown }) =>
    raw.write(`${event.event ? `event: ${event.event}\n` : ''}data: ${JSON.stringify(event.data)}\n\n`);
  try {
    for await (const event of result.events) {
      if (disconnected) break;
      if ((event.contentDeltas ?? 0) > 0) observation.firstToken();
      deltas += event.contentDeltas ?? 0;
      reported = event.completionTokens ?? reported;
      write(event);
    }
  } catch (error) {
    if (!disconnected) {
      const appError = toAppError(error as Error);
      if (appError.status >= 500) request.log.error({ err: error }, 'stream failed');
      write(result.errorEvent(familyErrorBody(request, appError)));
    }
  }
  observation.finished(reported ?? deltas);
  if (!disconnected) raw.end(result.trailer ?? '');
}
