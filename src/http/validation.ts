/**
 * Request schema validation with a bounded cost. Every problem of a bad request is reported at once (ajv's
 * allErrors), but allErrors makes one error object per bad item: a body of ten million wrong-typed items is
 * ten million objects, seconds of a blocked event loop and then an out-of-memory crash. So a request is first
 * checked up to its first problem; only a request small enough for its error list to be small is then checked
 * in full, and a larger one is answered with its first problem alone. A large body left unparsed for the worker
 * thread (large-body.ts) is checked there, with a validator this compiler makes.
 */
import { Ajv, type ValidateFunction } from 'ajv';
import type { FastifySchemaCompiler } from 'fastify';
import { LargeJson } from './json-body.ts';

/** JSON values (objects, arrays, scalars) in a request beyond which only its first problem is reported. */
export const FULL_REPORT_MAX_VALUES = 20_000;

const OPTIONS = { coerceTypes: false, useDefaults: true, removeAdditional: false, addUsedSchema: false } as const;

/** Whether `data` holds more than `limit` JSON values; stops counting there, so it costs at most `limit` steps. */
function moreValuesThan(data: unknown, limit: number): boolean {
  const stack: unknown[] = [data];
  let seen = 0;
  while (stack.length > 0) {
    const value = stack.pop();
    seen += 1;
    if (seen > limit) return true;
    const children = Array.isArray(value)
      ? value
      : value !== null && typeof value === 'object'
        ? Object.values(value)
        : [];
    for (const child of children.slice(0, limit)) stack.push(child);
  }
  return false;
}

export function boundedValidatorCompiler(): FastifySchemaCompiler<unknown> {
  const firstProblem = new Ajv({ ...OPTIONS, allErrors: false });
  const everyProblem = new Ajv({ ...OPTIONS, allErrors: true });
  return ({ schema }) => {
    const quick = firstProblem.compile(schema as object);
    const full = everyProblem.compile(schema as object);
    const validate = ((data: unknown) => {
      // Checked against this same schema on the worker thread, where it is parsed (large-body.ts).
      if (data instanceof LargeJson) return true;
      if (quick(data)) return true;
      if (moreValuesThan(data, FULL_REPORT_MAX_VALUES)) {
        validate.errors = quick.errors;
        return false;
      }
      const valid = full(data);
      validate.errors = full.errors;
      return valid;
    }) as ValidateFunction;
    return validate;
  };
}
