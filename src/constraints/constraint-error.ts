/**
 * A constraint the request cannot have, with the request field it comes from (`response_format`,
 * `structured_outputs`, `tools`, `tool_choice`), so the caller can answer a 400 with that `param`.
 */
export class ConstraintRequestError extends Error {
  constructor(
    message: string,
    readonly param: string,
  ) {
    super(message);
  }
}
