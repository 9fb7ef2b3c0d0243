/**
 * What a slow or hostile client may hold: Node's headers, whole-request and keep-alive timeouts, an idle
 * timeout while a request body arrives, and caps on open connections per client address and in total.
 * Once a request is fully received the socket has no timeout of ours: a chat answer or SSE stream waiting in
 * the engine's queue spends the server's time, not the client's, and an upload that keeps sending is never cut.
 */
import { IncomingMessage, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { HttpLimits } from '../config.ts';
import { AppError } from '../errors.ts';
import { clientErrorHandler, errorFamily, rawErrorResponse } from './errors.ts';

/** Path parameters hold artifact names (128) with a version tag and file names (255); longer ones are 414s. */
export const MAX_PARAM_LENGTH = 512;

/** The Fastify constructor options that set Node's timeouts and answer parser errors through the catalogue. */
export function transportOptions(config: HttpLimits) {
  return {
    requestTimeout: config.requestTimeoutMs,
    keepAliveTimeout: config.keepAliveTimeoutMs,
    // Node looks for expired headers and requests this often; the default (30 s) would stretch short timeouts.
    http: {
      headersTimeout: config.headersTimeoutMs,
      connectionsCheckingInterval: Math.min(30_000, Math.ceil(config.headersTimeoutMs / 2)),
    },
    clientErrorHandler,
  };
}

/** The idle timeout while a body arrives (408 and close when it stalls) and the connection caps. */
export function registerTransportLimits(app: FastifyInstance, config: HttpLimits): void {
  app.addHook('onRequest', async (request, reply) => {
    const raw = request.raw;
    // Injected requests (tests) have no socket to time out; a request without a body has nothing to wait for.
    if (!(raw instanceof IncomingMessage) || !hasBody(raw) || raw.complete) return;
    raw.setTimeout(config.bodyIdleTimeoutMs, () => {
      const socket = raw.socket;
      if (reply.raw.headersSent) {
        socket.destroy();
        return;
      }
      const error = new AppError(
        'request_timeout',
        `No part of the request body arrived for ${config.bodyIdleTimeoutMs} ms`,
      );
      socket.end(rawErrorResponse(error, errorFamily(request.url)), () => socket.destroy());
    });
    // A response that finished first (an early 4xx) has armed Node's keep-alive timeout: leave that one be.
    raw.once('end', () => {
      if (!reply.raw.writableFinished) raw.setTimeout(0);
    });
  });
  capConnections(app.server, config);
}

function hasBody(raw: IncomingMessage): boolean {
  return raw.headers['transfer-encoding'] !== undefined || Number(raw.headers['content-length'] ?? 0) > 0;
}

/** Closes a new connection at once when its address, or the server, already holds as many as allowed. */
function capConnections(server: Server, config: HttpLimits): void {
  const perClient = new Map<string, number>();
  let total = 0;
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? '';
    const held = perClient.get(address) ?? 0;
    if (total >= config.maxConnections || held >= config.maxConnectionsPerClient) {
      socket.destroy();
      return;
    }
    total += 1;
    perClient.set(address, held + 1);
    socket.once('close', () => {
      total -= 1;
      const left = (perClient.get(address) ?? 1) - 1;
      if (left === 0) perClient.delete(address);
      else perClient.set(address, left);
    });
  });
}
