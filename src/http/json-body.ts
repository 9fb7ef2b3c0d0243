/**
 * The one JSON body parser, for every route. An empty body is no body: openai-python sends
 * `content-type: application/json` with nothing on bodiless calls (model deletion, job cancel), so routes whose
 * body is optional accept it and the rest fail their schema with "Field required". JSON nested deeper than
 * MAX_JSON_DEPTH is refused before anything walks it. A large body of a route that prepares its body off the event
 * loop (large-body.ts) is left unparsed here, for the worker thread.
 */
import type { FastifyInstance } from 'fastify';
import secureJson from 'secure-json-parse';
import { AppError } from '../errors.ts';
import { MAX_JSON_DEPTH, tooDeepUnder } from '../json-limits.ts';
import type { ThreadWorker } from '../offload/worker.ts';

const BLANK = /^\s*$/;

/** From this size a body of a route with a body task leaves the loop: ~20 ms of parsing and checking on an idle core. */
export const LARGE_BODY_BYTES = 512 * 1024;

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route prepares its body with `preparedBody` (large-body.ts): a large one arrives unparsed, as LargeJson. */
    largeBody?: boolean;
  }
  interface FastifyInstance {
    /** The thread large bodies are parsed on. */
    bodyWorker: ThreadWorker;
  }
}

/** A large body of a route with a body task, as it arrived: parsed on the worker thread. */
export class LargeJson {
  constructor(readonly bytes: Buffer) {}
}

/**
 * JSON text as a value, as Fastify's own parser reads it (refusing `__proto__` and `constructor.prototype` keys),
 * after the depth check; undefined for a blank body. Throws the request's AppError.
 */
export function parseJsonText(text: string): unknown {
  if (BLANK.test(text)) return undefined;
  const field = tooDeepUnder(text);
  if (field !== undefined) {
    // Named like any field problem, so chat answers carry it as `param`.
    const message = `${field === null ? 'The JSON body' : `\`${field}\``} is nested more than ${MAX_JSON_DEPTH} levels deep`;
    throw new AppError(
      'bad_request',
      message,
      field === null ? [] : [{ loc: ['body', field], msg: message, type: 'value_error' }],
    );
  }
  try {
    return secureJson.parse(text, { protoAction: 'error', constructorAction: 'error' });
  } catch {
    throw new AppError('bad_request', "Body is not valid JSON but content-type is set to 'application/json'");
  }
}

export function registerJsonBody(app: FastifyInstance, bodyWorker: ThreadWorker): void {
  app.decorate('bodyWorker', bodyWorker);
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    const bytes = body as Buffer;
    if (bytes.length >= LARGE_BODY_BYTES && request.routeOptions.config?.largeBody) {
      done(null, new LargeJson(bytes));
      return;
    }
    try {
      done(null, parseJsonText(bytes.toString()));
    } catch (error) {
      done(error as Error, undefined);
    }
  });
}
