/**
 * Maps every failure to the body its endpoint family promises: FastAPI-shaped `{"detail": ...}` for the
 * preview and health endpoints, OpenAI/vLLM-shaped `{"error": {...}}` for chat completions. Never a bare 500
 * for a client mistake: malformed JSON, wrong content type and oversized bodies get their own 4xx.
 */
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, ERROR_CATALOGUE, type FieldProblem } from '../errors.ts';
import { EngineError } from '../engine/errors.ts';

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

/** ajv's errors as FastAPI `detail` items; a union's alternatives collapse to one problem per location. */
export function ajvToProblems(context: string, errors: AjvError[]): FieldProblem[] {
  const problems: FieldProblem[] = [];
  const seen = new Set<string>();
  for (const [index, error] of errors.entries()) {
    if (problems.length === MAX_LISTED_PROBLEMS) {
      problems.push({ loc: locOf(context, ''), msg: `${errors.length - index} more problems are not listed`, type: 'too_many_errors' });
      break;
    }
    const loc = locOf(context, error.instancePath);
    let problem: FieldProblem;
    switch (error.keyword) {
      case 'required':
        problem = { loc: [...loc, String(error.params.missingProperty)], msg: 'Field required', type: 'missing' };
        break;
      case 'type':
        problem = { loc, msg: `Input should be of type ${String(error.params.type)}`, type: AJV_TYPE_NAMES[String(error.params.type)] ?? 'type_error' };
        break;
      case 'additionalProperties':
        problem = { loc: [...loc, String(error.params.additionalProperty)], msg: 'Extra inputs are not permitted', type: 'extra_forbidden' };
        break;
      case 'pattern':
        problem = { loc, msg: `String should match pattern '${String(error.params.pattern)}'`, type: 'string_pattern_mismatch' };
        break;
      case 'minimum':
        problem = { loc, msg: `Input should be greater than or equal to ${String(error.params.limit)}`, type: 'greater_than_equal' };
        break;
      case 'maximum':
        problem = { loc, msg: `Input should be less than or equal to ${String(error.params.limit)}`, type: 'less_than_equal' };
        break;
      case 'minLength':
        problem = { loc, msg: `String should have at least ${String(error.params.limit)} characters`, type: 'string_too_short' };
        break;
      case 'maxLength':
        problem = { loc, msg: `String should have at most ${String(error.params.limit)} characters`, type: 'string_too_long' };
        break;
      case 'enum':
      case 'const':
        problem = { loc, msg: `Input should be ${JSON.stringify(error.params.allowedValues ?? error.params.allowedValue)}`, type: 'enum' };
        break;
      case 'anyOf':
        problem = { loc, msg: 'Input does not match any allowed shape', type: 'union_error' };
        break;
      default:
        problem = { loc, msg: error.message ?? 'Invalid value', type: 'value_error' };
    }
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
  FST_ERR_CTP_EMPTY_JSON_BODY: 'bad_request',
  FST_ERR_CTP_INVALID_JSON_BODY: 'bad_request',
};

/** Any thrown value as an AppError (with field problems for schema failures). */
export function toAppError(error: FastifyError | AppError | Error): AppError {
  if (error instanceof AppError) return error;
  if (error instanceof EngineError) {
    if (error.code === 'bad_request') return new AppError('bad_request', error.message);
    if (error.code === 'engine_unavailable') return new AppError('engine_unavailable', error.message);
    return new AppError('engine_failed', `The engine failed: ${error.message}`);
  }
  const fastifyError = error as FastifyError & { validation?: AjvError[]; validationContext?: string };
  if (fastifyError.validation) {
    const problems = ajvToProblems(fastifyError.validationContext ?? 'body', fastifyError.validation);
    return new AppError('validation_failed', problems.map((p) => `${p.loc.join('.')}: ${p.msg}`).join('; '), problems);
  }
  const mapped = fastifyError.code ? FASTIFY_CODES[fastifyError.code] : undefined;
  if (mapped) return new AppError(mapped, fastifyError.message);
  if (error instanceof SyntaxError || fastifyError.statusCode === 400) return new AppError('bad_request', `Malformed request body: ${error.message}`);
  if (fastifyError.statusCode === 413) return new AppError('payload_too_large', error.message);
  if (fastifyError.statusCode === 415 || fastifyError.statusCode === 406) return new AppError('unsupported_media_type', error.message);
  return new AppError('internal');
}

function isChatRoute(request: FastifyRequest): boolean {
  return request.url.startsWith('/v1/chat/');
}

/** The OpenAI/vLLM error object of a chat completion failure (also sent as an SSE event mid-stream). */
export function chatErrorBody(error: AppError) {
  const status = error.code === 'validation_failed' ? 400 : error.status;
  const param = error.problems[0]?.loc.slice(1).join('.') || null;
  return { error: { message: error.message, type: chatErrorType(status), param, code: status } };
}

export function sendError(request: FastifyRequest, reply: FastifyReply, error: AppError): FastifyReply {
  if (error.status >= 500) request.log.error({ err: error }, 'request failed');
  if (error.code === 'unauthorized') reply.header('WWW-Authenticate', 'Bearer');
  if (error.code === 'too_many_requests') reply.header('retry-after', '1');
  const chat = isChatRoute(request);
  // vLLM answers every request validation failure of chat completions with 400, never 422.
  reply.status(chat && error.code === 'validation_failed' ? 400 : error.status);
  if (chat) {
    return reply.send(chatErrorBody(error));
  }
  if (error.code === 'validation_failed') return reply.send({ detail: error.problems });
  return reply.send({ detail: error.message });
}

function chatErrorType(status: number): string {
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

export function errorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const appError = toAppError(error);
  if (appError.code === 'internal') request.log.error({ err: error }, 'unhandled error');
  return sendError(request, reply, appError);
}

export { ERROR_CATALOGUE };
