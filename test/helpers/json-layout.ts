/**
 * The whitespace rule constrained JSON follows unless a request asks otherwise (docs/structured-outputs.md):
 * outside strings, exactly one space after each `,` and `:` and no other whitespace. Checked on the text as
 * written (a prefix, when the budget cut it), so any whitespace the model slipped in is found.
 */

/** Where `text` breaks the rule, as short descriptions (empty when it keeps it). */
export function layoutBreaks(text: string): string[] {
  const breaks: string[] = [];
  let inString = false;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i += 1;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    else if (/\s/.test(c) && !(c === ' ' && (text[i - 1] === ',' || text[i - 1] === ':')))
      breaks.push(`${JSON.stringify(c)} at ${i} after ${JSON.stringify(text.slice(Math.max(0, i - 12), i))}`);
  }
  return breaks;
}
