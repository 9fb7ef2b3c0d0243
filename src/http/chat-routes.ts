/**
 * POST /v1/chat/completions (and its trailing-slash twin): JSON, or SSE exactly as vLLM frames it
 * (`data: <json>\n\n` … `data: [DONE]\n\n`). A client that disconnects cancels its generation, streamed or not.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ChatCompletionBody, type ChatCompletionChunk, type ChatUsage } from '../api/chat.ts';
import { AppError } from '../errors.ts';
import type { Metrics } from '../metrics.ts';
import type { ChatResult, ChatService } from '../services/chat-service.ts';
import { chatErrorBody, toAppError } from './errors.ts';

export function registerChatRoutes(
  app: FastifyInstance,
  chat: ChatService,
  maxInFlight: number,
  metrics: Metrics,
): void {
  const admit = inFlightLimit(maxInFlight);
  const handler = async (request: FastifyRequest<{ Body: ChatCompletionBody }>, reply: FastifyReply) => {
    admit(reply);
    const header = request.headers['x-request-id'];
    // A client that goes away before its whole answer is ready cancels the generation in the engine.
    const clientGone = new AbortController();
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) clientGone.abort();
    });
    let result: ChatResult;
    const observation = metrics.chat(request.body.stream === true);
    try {
      result = await chat.create(
        request.principal,
        request.body,
        typeof header === 'string' ? header : undefined,
        clientGone.signal,
      );
    } catch (error) {
      if (clientGone.signal.aborted) return undefined; // nobody is left to answer; Fastify sends nothing to a closed socket
      throw error;
    }
    if (result.kind === 'stream') return writeStream(request, reply, result, observation);
    // Lets a client (and bench/chat-overhead.ts) split latency into engine time and the server's own.
    reply.header('server-timing', `engine;dur=${result.engineMs.toFixed(3)}`);
    observation.finished(completionTokens(result.body.usage));
    return result.body;
  };
  const options = { schema: { body: ChatCompletionBody } };
  app.post('/v1/chat/completions', options, handler);
  app.post('/v1/chat/completions/', options, handler);
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

/** The chunks as SSE; a client that disconnects cancels the generation, and a failure mid-stream is an error event. */
async function writeStream(
  request: FastifyRequest,
  reply: FastifyReply,
  result: Extract<ChatResult, { kind: 'stream' }>,
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
  const tokens = streamedTokens();
  raw.on('close', () => {
    if (raw.writableFinished) return;
    disconnected = true;
    void result.cancel().catch(() => undefined);
  });
  try {
    for await (const chunk of result.chunks) {
      if (disconnected) break;
      if (tokens.count(chunk)) observation.firstToken();
      raw.write(`data: ${JSON.stringify(chunk)}\n\n`);
    }
  } catch (error) {
    if (!disconnected) {
      const appError = toAppError(error as Error);
      if (appError.status >= 500) request.log.error({ err: error }, 'chat stream failed');
      raw.write(`data: ${JSON.stringify(chatErrorBody(appError))}\n\n`);
    }
  }
  observation.finished(tokens.total());
  if (!disconnected) raw.end('data: [DONE]\n\n');
}

function completionTokens(usage: ChatUsage | undefined): number {
  return usage?.completion_tokens ?? 0;
}

/**
 * Completion tokens of a stream: the usage chunk's count when the client asked for one, else one per content
 * delta (close to the token count: a delta holds the text one decode step produced, and steps that decode to
 * nothing yet send none).
 */
function streamedTokens() {
  let deltas = 0;
  let reported: number | undefined;
  return {
    /** Answers whether the chunk carries generated content. */
    count(chunk: ChatCompletionChunk): boolean {
      const { choices, usage } = chunk;
      if (usage) reported = completionTokens(usage);
      const content = choices.filter(
        (choice) =>
          (choice.delta.content !== undefined && choice.delta.content !== '') || choice.delta.tool_calls !== undefined,
      ).length;
      deltas += content;
      return content > 0;
    },
    total: () => reported ?? deltas,
  };
}
