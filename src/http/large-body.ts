/**
 * Request bodies too large to handle on the event loop: a route that may receive megabytes of JSON (trajectory
 * logs, RL jobs, Tinker sampling and forward passes) names a body task, and a body of LARGE_BODY_BYTES or more
 * reaches it unparsed (json-body.ts); its bytes move to a worker thread (offload/worker.ts), which parses them,
 * checks them against the route's schema exactly as Fastify would, and runs the task's `prepare` there. The loop
 * receives what `prepare` answers: strings and typed arrays, cheap to receive, never the parsed tree (a tree costs
 * the loop as much to receive as to parse). Smaller bodies are parsed and validated by Fastify as usual and the
 * same `prepare` runs on the loop, so both sizes share one implementation and one set of error answers.
 */
import type { Static, TSchema } from '@sinclair/typebox';
import type { ValidateFunction } from 'ajv';
import type { FastifyRequest } from 'fastify';
import { AppError, type ErrorCode, type FieldProblem, validationError } from '../errors.ts';
import { threadTask } from '../offload/worker.ts';
import { ajvToProblems } from './errors.ts';
import { LargeJson, parseJsonText } from './json-body.ts';
import { boundedValidatorCompiler } from './validation.ts';

/** How a route's body becomes what its service takes; `Options` come from the loop (a vocabulary size, say). */
export interface BodyTask<Prepared, Options = undefined> {
  /** The module exporting this task under `name`, for the worker thread to import. */
  module: string;
  name: string;
  schema: TSchema;
  prepare(body: never, options: Options): Prepared;
}

export function bodyTask<S extends TSchema, Prepared, Options = undefined>(
  module: string,
  name: string,
  schema: S,
  prepare: (body: Static<S>, options: Options) => Prepared,
): BodyTask<Prepared, Options> {
  return { module, name, schema, prepare };
}

type Outcome<Prepared> =
  | { prepared: Prepared }
  | { error: { code: ErrorCode; message: string; problems: FieldProblem[] } };

const validators = new Map<TSchema, ValidateFunction>();

function validatorOf(schema: TSchema): ValidateFunction {
  let validate = validators.get(schema);
  if (!validate) {
    validate = boundedValidatorCompiler()({ schema, method: 'POST', url: '', httpPart: 'body' }) as ValidateFunction;
    validators.set(schema, validate);
  }
  return validate;
}

/** On the worker thread: parse, check against the schema (ajv's defaults applied, as Fastify does), prepare. */
export async function prepareOnThread(job: {
  module: string;
  name: string;
  bytes: Uint8Array;
  options: unknown;
}): Promise<Outcome<unknown>> {
  const task = ((await import(job.module)) as Record<string, BodyTask<unknown, unknown>>)[job.name];
  try {
    const body = parseJsonText(Buffer.from(job.bytes.buffer, job.bytes.byteOffset, job.bytes.byteLength).toString());
    const validate = validatorOf(task.schema);
    if (!validate(body)) throw validationError(ajvToProblems('body', validate.errors ?? []));
    return { prepared: task.prepare(body as never, job.options) };
  } catch (error) {
    if (!(error instanceof AppError)) throw error;
    return { error: { code: error.code, message: error.message, problems: error.problems } };
  }
}

const PREPARE = threadTask<typeof prepareOnThread>(new URL(import.meta.url), 'prepareOnThread');

/**
 * The request's body as `task` prepares it: on the worker thread for a large body (its bytes stay on the
 * request, so it may be prepared again with other options), on the loop otherwise.
 */
export async function preparedBody<Prepared, Options>(
  request: FastifyRequest,
  task: BodyTask<Prepared, Options>,
  options: Options,
): Promise<Prepared> {
  if (!(request.body instanceof LargeJson)) return task.prepare(request.body as never, options);
  const outcome = (await request.server.bodyWorker.run(PREPARE, {
    module: task.module,
    name: task.name,
    bytes: request.body.bytes,
    options,
  })) as Outcome<Prepared>;
  if ('error' in outcome) throw new AppError(outcome.error.code, outcome.error.message, outcome.error.problems);
  return outcome.prepared;
}
