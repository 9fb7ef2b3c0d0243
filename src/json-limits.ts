/**
 * How deeply user JSON may nest. Every walk of a value (JSON.stringify, schema compilers, validators) recurses,
 * and a few thousand levels overflow the stack; so JSON deeper than this is refused before it is parsed,
 * by a scan that does not recurse itself.
 */

/** Far beyond any real request (a tool schema or trajectory metadata nests a dozen levels), far below a stack overflow. */
export const MAX_JSON_DEPTH = 64;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACE = 0x7d;
const CLOSE_BRACKET = 0x5d;

/** Whether the JSON text nests objects and arrays deeper than `limit`; brackets inside strings do not count. */
export function nestsDeeperThan(text: string, limit: number = MAX_JSON_DEPTH): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i += 1) {
    const code = text.charCodeAt(i);
    if (inString) {
      if (code === BACKSLASH) i += 1;
      else if (code === QUOTE) inString = false;
    } else if (code === QUOTE) {
      inString = true;
    } else if (code === OPEN_BRACE || code === OPEN_BRACKET) {
      depth += 1;
      if (depth > limit) return true;
    } else if (code === CLOSE_BRACE || code === CLOSE_BRACKET) {
      depth -= 1;
    }
  }
  return false;
}
