/**
 * The one error catalogue. Services throw `AppError` with a stable code; the HTTP layer maps
 * the code to a status and a body shape. Nothing else decides statuses.
 */
export const ERROR_CATALOGUE = {
  unauthorized: { status: 401, message: 'Invalid or missing API key' },
  forbidden: { status: 403, message: 'This API key may not act for that entity' },
  not_found: { status: 404, message: 'Not found' },
  conflict: { status: 409, message: 'Already exists' },
  validation_failed: { status: 422, message: 'Validation failed' },
  bad_request: { status: 400, message: 'Bad request' },
  request_timeout: { status: 408, message: 'The request was not received in time' },
  payload_too_large: { status: 413, message: 'Request body is too large' },
  uri_too_long: { status: 414, message: 'The request URL is too long' },
  headers_too_large: { status: 431, message: 'The request headers are too large' },
  too_many_requests: { status: 429, message: 'Too many requests in flight; retry shortly' },
  unsupported_media_type: { status: 415, message: 'Unsupported content type' },
  non_finite_weights: {
    status: 422,
    message: "The model cannot be used: its weights are not finite or exceed the engine's bound (engine/bounds.json)",
  },
  training_diverged: {
    status: 422,
    message: 'Training diverged: the step produced a non-finite loss, gradient or weight and was not applied',
  },
  engine_unavailable: { status: 503, message: 'The engine is not available' },
  engine_failed: { status: 500, message: 'The engine failed' },
  internal: { status: 500, message: 'Internal server error' },
} as const;

export type ErrorCode = keyof typeof ERROR_CATALOGUE;

/**
 * How a training job can fail: the `error.code` of a FAILED or CANCELLED job, with the message it carries when
 * the failure has nothing more specific to say. These never become HTTP statuses: the job resource reports them.
 */
export const JOB_ERROR_CATALOGUE = {
  cancelled: { message: 'Training job was cancelled' },
  worker_lost: {
    message: 'The server running this job stopped before it finished; no checkpoint was written. Submit the job again.',
  },
  model_deleted: { message: 'The model was deleted before its job ran' },
  no_chat_template: { message: 'The base model has no chat template to render the training data with' },
  bad_trajectory: { message: 'A trajectory cannot be tokenized' },
  bad_training_data: { message: 'The training data cannot be read' },
  bad_learning_rate: { message: 'The learning-rate schedule does not match the number of batches' },
  kl_reference_missing: { message: 'The KL reference step has no checkpoint' },
  unreadable_payload: { message: "The job's stored request matches no payload version this server reads" },
  training_diverged: {
    message:
      'Training diverged: a step produced a non-finite loss, gradient or weight (an absurd learning rate?); no checkpoint was written and the model keeps its latest one',
  },
  internal: { message: 'Internal error while training' },
} as const;

export type JobErrorCode = keyof typeof JOB_ERROR_CATALOGUE;

/** A job failure the runner can explain; anything else thrown while training fails the job as `internal`. */
export class JobError extends Error {
  constructor(
    readonly code: JobErrorCode,
    message?: string,
  ) {
    super(message ?? JOB_ERROR_CATALOGUE[code].message);
  }
}

/** One field problem, FastAPI-shaped: `loc` is the path into the request, e.g. ["body", "trajectory_groups", 0, "reward"]. */
export interface FieldProblem {
  loc: (string | number)[];
  msg: string;
  type: string;
}

export class AppError extends Error {
  constructor(
    readonly code: ErrorCode,
    message?: string,
    readonly problems: FieldProblem[] = [],
  ) {
    super(message ?? ERROR_CATALOGUE[code].message);
  }

  get status(): number {
    return ERROR_CATALOGUE[this.code].status;
  }
}

/** A 400 naming the request field at fault (FastAPI's `loc`), as vLLM answers a request it refuses. */
export function badRequest(message: string, param: string | null = null): AppError {
  return new AppError(
    'bad_request',
    message,
    param === null ? [] : [{ loc: ['body', param], msg: message, type: 'value_error' }],
  );
}

export function validationError(problems: FieldProblem[]): AppError {
  return new AppError('validation_failed', problems.map((p) => `${p.loc.join('.')}: ${p.msg}`).join('; '), problems);
}

/** Longest piece of user input an error message repeats: a 20 MB model name is not echoed back whole. */
const ECHO_LIMIT = 200;

/** User input as an error message quotes it: cut to a short prefix with an ellipsis. */
export function excerpt(input: string): string {
  return input.length <= ECHO_LIMIT ? input : `${input.slice(0, ECHO_LIMIT)}…`;
}

export function notFound(what: string): AppError {
  return new AppError('not_found', `${what} not found`);
}
