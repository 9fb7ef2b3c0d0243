/**
 * Hermes tool calls (Qwen2.5, Qwen3, our built-in model): `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`
 * blocks anywhere in the text, as vLLM's `hermes` parser reads them.
 */
import crypto from 'node:crypto';
import { forcedCallGrammar, larkString } from '../../constraints/lark.ts';
import { callFromObject, type ParsedCall, parseJson, partialMarkerLength, type ToolCallFormat } from './format.ts';

const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';

function take(toolText: string, final: boolean) {
  const calls: ParsedCall[] = [];
  let content = '';
  let rest = toolText;
  for (;;) {
    const open = rest.indexOf(OPEN);
    if (open === -1) break;
    const close = rest.indexOf(CLOSE, open);
    if (close === -1 && !final) break;
    const body = rest.slice(open + OPEN.length, close === -1 ? undefined : close);
    const parsed = parseJson(body.trim());
    const call = parsed && callFromObject(parsed.value, ['arguments']);
    if (!call) {
      if (close === -1) break;
      // A closed block that is not a valid call stays text.
      content += rest.slice(0, close + CLOSE.length);
      rest = rest.slice(close + CLOSE.length);
      continue;
    }
    calls.push(call);
    rest = close === -1 ? '' : rest.slice(close + CLOSE.length);
  }
  return { calls, rest, content };
}

export const hermes: ToolCallFormat = {
  name: 'hermes',
  templateMarker: OPEN,
  markers: [OPEN, CLOSE],
  start(text, _atStart, final) {
    const at = text.indexOf(OPEN);
    return { at: at === -1 ? null : at, hold: at !== -1 || final ? 0 : partialMarkerLength(text, [OPEN]) };
  },
  take,
  forcedGrammar(calls, marker) {
    return forcedCallGrammar(calls, {
      separator: '\n',
      call: (name, args) =>
        `${marker(OPEN)} ${larkString(`\n{"name": ${JSON.stringify(name)}, "arguments": `)} ${args} ${larkString('}\n')} ${marker(CLOSE)}`,
    });
  },
  callId: () => `chatcmpl-tool-${crypto.randomBytes(8).toString('hex')}`,
};
