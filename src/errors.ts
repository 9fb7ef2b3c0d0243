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
  engine_unavailable: { status: 503, message: 'The engine is not available' },
  engine_failed: { status: 500, message: 'The engine failed' },
  internal: { status: 500, message: 'Internal server error' },
} as const;

export type ErrorCode = keyof typeof ERROR_CATALOGUE;

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
