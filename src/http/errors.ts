/**
 * Maps every failure to the body its endpoint family promises: FastAPI-shaped `{"detail": ...}` for the
 * preview and health endpoints, OpenAI/vLLM-shaped `{"error": {...}}` for the OpenAI-compatible routes (chat
 * completions, completions, Responses, models), Anthropic-shaped `{"type": "error", "error": {...}}` for the
 * Messages API. Never a bare 500 for a client mistake: malformed JSON, wrong content type and oversized bodies get
 * their own 4xx, and so do the framework's and Node's own refusals (bad URL escapes, long parameters, oversized
 * headers, timeouts).
 */
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { ConnectionError, FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import pg from 'pg';
import { EngineError } from '../engine/errors.ts';
import { AppError, ERROR_CATALOGUE, excerpt, type FieldProblem, validationError } from '../errors.ts';

interface AjvError {
  instancePath: string;
  keyword: string;
  params: Record<string, unknown>;
  message?: string;
}

const AJV_TYPE_NAMES: Record<string, string> = {
  number: 'float_type',
  integer: 'int_type',
  string: 'string_type',
  boolean: 'bool_type',
  array: 'list_type',
  object: 'dict_type',
  null: 'none_required',
};

function locOf(context: string, instancePath: string): (string | number)[] {
  const root = context === 'querystring' ? 'query' : context === 'params' ? 'path' : context;
  const parts = instancePath
    .split('/')
    .slice(1)
    .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((part) => (/^\d+$/.test(part) ? Number(part) : part));
  return [root, ...parts];
}

/**
 * Field problems listed in one answer. A million-item array of wrong types is a million ajv errors: listing
 * them all took seconds of the event loop and a 90 MB body, so the rest are summed up in one last item.
 */
export const MAX_LISTED_PROBLEMS = 100;

/** One ajv error as a FastAPI `detail` item at `loc`, in pydantic's words and error types. */
function ajvProblem(error: AjvError, loc: (string | number)[]): FieldProblem {
  const limit = String(error.params.limit);
  switch (error.keyword) {
    case 'required':
      return { loc: [...loc, String(error.params.missingProperty)], msg: 'Field required', type: 'missing' };
    case 'type':
      return {
        loc,
        msg: `Input should be of type ${String(error.params.type)}`,
        type: AJV_TYPE_NAMES[String(error.params.type)] ?? 'type_error',
      };
    case 'additionalProperties':
      return {
        loc: [...loc, String(error.params.additionalProperty)],
        msg: 'Extra inputs are not permitted',
        type: 'extra_forbidden',
      };
    case 'pattern':
      return {
        loc,
        msg: `String should match pattern '${String(error.params.pattern)}'`,
        type: 'string_pattern_mismatch',
      };
    case 'minimum':
      return { loc, msg: `Input should be greater than or equal to ${limit}`, type: 'greater_than_equal' };
    case 'maximum':
      return { loc, msg: `Input should be less than or equal to ${limit}`, type: 'less_than_equal' };
    case 'minLength':
      return { loc, msg: `String should have at least ${limit} characters`, type: 'string_too_short' };
    case 'maxLength':
      return { loc, msg: `String should have at most ${limit} characters`, type: 'string_too_long' };
    case 'minItems':
      return { loc, msg: `List should have at least ${limit} item(s)`, type: 'too_short' };
    case 'enum':
    case 'const':
      return {
        loc,
        msg: `Input should be ${JSON.stringify(error.params.allowedValues ?? error.params.allowedValue)}`,
        type: 'enum',
      };
    case 'anyOf':
      return { loc, msg: 'Input does not match any allowed shape', type: 'union_error' };
    default:
      return { loc, msg: error.message ?? 'Invalid value', type: 'value_error' };
  }
}

/** ajv's errors as FastAPI `detail` items; a union's alternatives collapse to one problem per location. */
export function ajvToProblems(context: string, errors: AjvError[]): FieldProblem[] {
  const problems: FieldProblem[] = [];
  const seen = new Set<string>();
  for (const [index, error] of errors.entries()) {
    // A failed `if`/`then` also reports the `then` branch's own error, which names the field: that one is kept.
    if (error.keyword === 'if') continue;
    if (problems.length === MAX_LISTED_PROBLEMS) {
      problems.push({
        loc: locOf(context, ''),
        msg: `${errors.length - index} more problems are not listed`,
        type: 'too_many_errors',
      });
      break;
    }
    const problem = ajvProblem(error, locOf(context, error.instancePath));
    const key = problem.loc.join('\u0000');
    // A failed union reports every branch; the first problem at a location is the useful one.
    if (seen.has(key)) continue;
    seen.add(key);
    problems.push(problem);
  }
  return problems;
}

const FASTIFY_CODES: Record<string, AppError['code']> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'payload_too_large',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'bad_request',
  FST_ERR_CTP_INVALID_JSON_BODY: 'bad_request',
  FST_ERR_BAD_URL: 'bad_request',
  FST_ERR_MAX_PARAM_LENGTH: 'uri_too_long',
};

/** Any thrown value as an AppError (with field problems for schema failures). */
export function toAppError(error: FastifyError | AppError | Error): AppError {
  if (error instanceof AppError) return error;
  if (error instanceof EngineError) {
    if (error.code === 'bad_request') return new AppError('bad_request', error.message);
    if (error.code === 'engine_unavailable') return new AppError('engine_unavailable', error.message);
    if (error.code === 'non_finite') return new AppError('non_finite_weights', error.message);
    if (error.code === 'diverged') return new AppError('training_diverged', error.message);
    return new AppError('engine_failed', `The engine failed: ${error.message}`);
  }
  if (error instanceof pg.DatabaseError) {
    // PostgreSQL refuses values that SQLite stores or simply matches nothing with (a NUL character, an integer past
    // its column): a data exception (SQLSTATE class 22) comes from the request's values, so it is the client's 400.
    if (error.code?.startsWith('22'))
      return new AppError('bad_request', `A value in the request cannot be used: ${error.message}`);
    // A foreign key violation: what the request refers to (a model, say) was deleted while it ran. SQLite
    // serialises writes and answers the same race with the plain 404 of a lookup.
    if (error.code === '23503')
      return new AppError('not_found', 'What this request refers to was deleted while it ran');
  }
  const fastifyError = error as FastifyError & { validation?: AjvError[]; validationContext?: string };
  if (fastifyError.validation) {
    const problems = ajvToProblems(fastifyError.validationContext ?? 'body', fastifyError.validation);
    return new AppError('validation_failed', problems.map((p) => `${p.loc.join('.')}: ${p.msg}`).join('; '), problems);
  }
  // @fastify/static (the /docs viewer's files) refuses a path that leaves its folder: for the client, no such file.
  if (fastifyError.code === 'FST_STATIC_FORBIDDEN_PATH') return new AppError('not_found', 'No such file');
  const mapped = fastifyError.code ? FASTIFY_CODES[fastifyError.code] : undefined;
  // Framework messages quote the URL, which may be 16 KB long.
  if (mapped) return new AppError(mapped, excerpt(fastifyError.message));
  if (error instanceof SyntaxError || fastifyError.statusCode === 400)
    return new AppError('bad_request', `Malformed request body: ${error.message}`);
  if (fastifyError.statusCode === 413) return new AppError('payload_too_large', error.message);
  if (fastifyError.statusCode === 415 || fastifyError.statusCode === 406)
    return new AppError('unsupported_media_type', error.message);
  return new AppError('internal');
}

/** Which error shape a route answers: OpenAI's (its compatible APIs), Anthropic's (the Messages API), or FastAPI's. */
export type ErrorFamily = 'openai' | 'anthropic' | 'fastapi';

const OPENAI_PATHS = ['/v1/chat/', '/v1/completions', '/v1/responses', '/v1/models'];

/** The error family of a request URL (or of the path that starts a request line). */
export function errorFamily(url: string): ErrorFamily {
  const path = url.split(/[?\s]/, 1)[0];
  if (path === '/v1/messages' || path.startsWith('/v1/messages/')) return 'anthropic';
  return OPENAI_PATHS.some((prefix) => path === prefix || path.startsWith(prefix.endsWith('/') ? prefix : `${prefix}/`))
    ? 'openai'
    : 'fastapi';
}

/** The field an error names, as a dotted path without the `body` root; null when it names none. */
function paramOf(error: AppError): string | null {
  return error.problems[0]?.loc.slice(1).join('.') || null;
}

/** vLLM answers every request validation failure of its OpenAI and Anthropic routes with 400, never 422. */
function statusOf(error: AppError, family: ErrorFamily): number {
  return family !== 'fastapi' && error.code === 'validation_failed' ? 400 : error.status;
}

/** The OpenAI/vLLM error object (also sent as an SSE event mid-stream). */
export function openAiErrorBody(error: AppError) {
  const status = statusOf(error, 'openai');
  return { error: { message: error.message, type: openAiErrorType(status), param: paramOf(error), code: status } };
}

/** Anthropic's error object, its message naming the field at fault (the shape has no `param`). */
export function anthropicErrorBody(error: AppError) {
  const problems = error.problems.map((problem) => `${problem.loc.slice(1).join('.') || 'body'}: ${problem.msg}`);
  const param = paramOf(error);
  const message =
    error.code === 'validation_failed' && problems.length > 0
      ? problems.join('; ')
      : param !== null && !error.message.includes(param)
        ? `${param}: ${error.message}`
        : error.message;
  return { type: 'error', error: { type: anthropicErrorType(statusOf(error, 'anthropic')), message } };
}

export function sendError(request: FastifyRequest, reply: FastifyReply, error: AppError): FastifyReply {
  if (error.status >= 500) request.log.error({ err: error }, 'request failed');
  if (error.code === 'unauthorized') reply.header('WWW-Authenticate', 'Bearer');
  if (error.code === 'too_many_requests') reply.header('retry-after', '1');
  const family = errorFamily(request.url);
  reply.status(statusOf(error, family));
  return reply.send(errorBody(error, family));
}

function errorBody(error: AppError, family: ErrorFamily): object {
  if (family === 'openai') return openAiErrorBody(error);
  if (family === 'anthropic') return anthropicErrorBody(error);
  if (error.code === 'validation_failed') return { detail: error.problems };
  return { detail: error.message };
}

function openAiErrorType(status: number): string {
  switch (status) {
    case 400:
    case 422:
      return 'BadRequestError';
    case 401:
      return 'AuthenticationError';
    case 403:
      return 'PermissionDeniedError';
    case 404:
      return 'NotFoundError';
    case 429:
      return 'RateLimitError';
    default:
      return status >= 500 ? 'InternalServerError' : 'BadRequestError';
  }
}

/** Anthropic's error types by status (its API reference's list). */
function anthropicErrorType(status: number): string {
  switch (status) {
    case 401:
      return 'authentication_error';
    case 403:
      return 'permission_error';
    case 404:
      return 'not_found_error';
    case 413:
      return 'request_too_large';
    case 429:
      return 'rate_limit_error';
    case 503:
      return 'overloaded_error';
    default:
      return status >= 500 ? 'api_error' : 'invalid_request_error';
  }
}

export function errorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  // An empty body reaches the schema as undefined (see json-body.ts): say it is missing, as FastAPI does.
  if (request.body === undefined && (error as { validationContext?: string }).validationContext === 'body') {
    return sendError(request, reply, validationError([{ loc: ['body'], msg: 'Field required', type: 'missing' }]));
  }
  const appError = toAppError(error);
  if (appError.code === 'internal') request.log.error({ err: error }, 'unhandled error');
  return sendError(request, reply, appError);
}

/** A request line this long is what overflowed Node's 16 KiB of headers: the URL is too long. */
const LONG_REQUEST_LINE = 8 * 1024;

/** Node's parser errors (before any route exists) as the catalogue's code: the request line alone overflowing is a long URL. */
function clientErrorOf(error: ConnectionError, packet: Buffer | undefined): AppError {
  if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') return new AppError('request_timeout');
  if (error.code === 'HPE_HEADER_OVERFLOW') {
    const lineEnd = packet?.indexOf('\n') ?? -1;
    const lineLength = lineEnd === -1 ? (packet?.length ?? 0) : lineEnd;
    return new AppError(lineLength > LONG_REQUEST_LINE ? 'uri_too_long' : 'headers_too_large');
  }
  return new AppError('bad_request', `Malformed HTTP request (${error.code || error.message})`);
}

/**
 * Fastify's `clientErrorHandler`: errors Node raises while parsing a request, answered on the raw socket in
 * the catalogue's shapes (the route family is read off the request line, when the packet holds it).
 */
export function clientErrorHandler(error: ConnectionError, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  // Node hands the packet being parsed as a Buffer (Fastify's type says otherwise).
  const packet = Buffer.isBuffer(error.rawPacket) ? error.rawPacket : undefined;
  const requestLine = packet?.toString('latin1', 0, 64) ?? '';
  if (socket.writable)
    socket.write(
      rawErrorResponse(clientErrorOf(error, packet), errorFamily(requestLine.slice(requestLine.indexOf(' ') + 1))),
    );
  socket.destroy();
}

/** A whole HTTP/1.1 error response for a socket no Fastify reply owns; the connection closes after it. */
export function rawErrorResponse(error: AppError, family: ErrorFamily): string {
  const status = statusOf(error, family);
  const body = JSON.stringify(errorBody(error, family));
  return `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
}

export { ERROR_CATALOGUE };
