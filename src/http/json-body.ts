/**
 * The one JSON body parser, for every route. An empty body is no body: openai-python sends
 * `content-type: application/json` with nothing on bodiless calls (model deletion, job cancel), so routes whose
 * body is optional accept it and the rest fail their schema with "Field required". JSON nested deeper than
 * MAX_JSON_DEPTH is refused before anything walks it.
 */
import type { FastifyInstance } from 'fastify';
import { AppError } from '../errors.ts';
import { MAX_JSON_DEPTH, tooDeepUnder } from '../json-limits.ts';

const BLANK = /^\s*$/;

export function registerJsonBody(app: FastifyInstance): void {
  // Fastify's own parser keeps its refusal of `__proto__` and `constructor.prototype` keys.
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body as string;
    if (BLANK.test(text)) {
      done(null, undefined);
      return;
    }
    const field = tooDeepUnder(text);
    if (field !== undefined) {
      // Named like any field problem, so chat answers carry it as `param`.
      const message = `${field === null ? 'The JSON body' : `\`${field}\``} is nested more than ${MAX_JSON_DEPTH} levels deep`;
      done(
        new AppError(
          'bad_request',
          message,
          field === null ? [] : [{ loc: ['body', field], msg: message, type: 'value_error' }],
        ),
        undefined,
      );
      return;
    }
    parse(request, text, done);
  });
}
