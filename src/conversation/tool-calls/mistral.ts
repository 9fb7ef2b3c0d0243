/**
 * Mistral tool calls, as vLLM's `mistral` parser reads them: `[TOOL_CALLS]` followed by a JSON array of
 * `{"name": …, "arguments": …}` objects (or, in newer tokenizers, `name[ARGS]{…}` / `name{…}` per call).
 * Mistral's templates require call ids of nine alphanumeric characters, so ours are.
 */
import crypto from 'node:crypto';
import { forcedCallGrammar, larkString } from '../../constraints/lark.ts';
import {
  callFromObject,
  jsonValueEnd,
  type ParsedCall,
  parseJson,
  partialMarkerLength,
  type TakenCalls,
  type ToolCallFormat,
} from './format.ts';

const TOOL_CALLS = '[TOOL_CALLS]';
const ALPHANUMERIC = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** `[{…}, …]` right after the marker; null while the array is open or when it is not calls. */
function arrayCalls(body: string): { calls: ParsedCall[]; end: number } | null {
  const end = jsonValueEnd(body, 0);
  const parsed = end === -1 ? null : parseJson(body.slice(0, end));
  if (!parsed || !Array.isArray(parsed.value)) return null;
  const calls = parsed.value.map((item) => callFromObject(item, ['arguments', 'parameters']));
  return calls.every((call) => call !== null) ? { calls: calls as ParsedCall[], end } : null;
}

/** `name[ARGS]{…}` or `name{…}`; null while the arguments are open or when it is not a call. */
function namedCall(body: string): { calls: ParsedCall[]; end: number } | null {
  const match = /^([A-Za-z0-9_.-]+)(\[ARGS\])?\{/.exec(body);
  if (!match) return null;
  const from = match[0].length - 1;
  const end = jsonValueEnd(body, from);
  const parsed = end === -1 ? null : parseJson(body.slice(from, end));
  return parsed ? { calls: [{ name: match[1], arguments: JSON.stringify(parsed.value) }], end } : null;
}

function take(toolText: string): TakenCalls {
  const calls: ParsedCall[] = [];
  let rest = toolText;
  while (rest.startsWith(TOOL_CALLS)) {
    const body = rest.slice(TOOL_CALLS.length).trimStart();
    if (body === '') break;
    const found = body.startsWith('[') ? arrayCalls(body) : namedCall(body);
    if (!found) break;
    calls.push(...found.calls);
    rest = body.slice(found.end).trimStart();
  }
  return { calls, rest, content: '' };
}

export const mistral: ToolCallFormat = {
  name: 'mistral',
  templateMarker: TOOL_CALLS,
  markers: [TOOL_CALLS],
  start(text, _atStart, final) {
    const at = text.indexOf(TOOL_CALLS);
    return { at: at === -1 ? null : at, hold: at !== -1 || final ? 0 : partialMarkerLength(text, [TOOL_CALLS]) };
  },
  take,
  forcedGrammar(calls, marker) {
    return forcedCallGrammar(calls, {
      separator: ', ',
      call: (name, args) => `${larkString(`{"name": ${JSON.stringify(name)}, "arguments": `)} ${args} "}"`,
      around: (callsRule) => `${marker(TOOL_CALLS)} "[" ${callsRule} "]"`,
    });
  },
  callId: () => Array.from(crypto.randomBytes(9), (byte) => ALPHANUMERIC[byte % ALPHANUMERIC.length]).join(''),
};
