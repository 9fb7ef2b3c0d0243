/**
 * A constraint the server cannot compile: `invalid` (the request is wrong: a bad regex or schema) or
 * `unsupported` (valid, but a feature this compiler refuses rather than decode unconstrained).
 */
export class ConstraintError extends Error {
  constructor(
    readonly reason: 'invalid' | 'unsupported',
    message: string,
  ) {
    super(message);
  }
}

export const unsupported = (feature: string): ConstraintError => new ConstraintError('unsupported', `${feature} is not supported in constrained decoding`);
export const invalid = (message: string): ConstraintError => new ConstraintError('invalid', message);
