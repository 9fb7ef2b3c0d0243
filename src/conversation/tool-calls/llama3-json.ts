/**
 * Llama 3.x JSON tool calls, as vLLM's `llama3_json` parser reads them: the reply is one or more
 * `{"name": …, "parameters": …}` objects separated by `; `, optionally after `<|python_tag|>`.
 * Only a reply that opens with a call is one; `<|python_tag|>` later in the text also starts calls.
 */
import crypto from 'node:crypto';
import { forcedCallGrammar, larkString } from '../../constraints/lark.ts';
import {
  callFromObject,
  jsonValueEnd,
  type ParsedCall,
  parseJson,
  partialMarkerLength,
  type ToolCallFormat,
} from './format.ts';

const PYTHON_TAG = '<|python_tag|>';
const SEPARATOR = '; ';
const ARGUMENT_KEYS = ['parameters', 'arguments'];

function take(toolText: string) {
  const calls: ParsedCall[] = [];
  let at = toolText.startsWith(PYTHON_TAG) ? PYTHON_TAG.length : 0;
  for (;;) {
    while (at < toolText.length && /[\s;]/.test(toolText[at])) at += 1;
    if (toolText[at] !== '{') break;
    const end = jsonValueEnd(toolText, at);
    if (end === -1) break;
    const parsed = parseJson(toolText.slice(at, end));
    const call = parsed && callFromObject(parsed.value, ARGUMENT_KEYS);
    if (!call) break;
    calls.push(call);
    at = end;
  }
  return { calls, rest: calls.length > 0 ? toolText.slice(at) : toolText, content: '' };
}

export const llama3Json: ToolCallFormat = {
  name: 'llama3_json',
  // Llama 3 templates need not mention the tag (calls may be bare JSON); their header tokens tell the family.
  templateMarker: '<|start_header_id|>',
  markers: [PYTHON_TAG],
  start(text, atStart, final) {
    const tagged = text.indexOf(PYTHON_TAG);
    if (atStart) {
      const trimmed = text.trimStart();
      const lead = text.length - trimmed.length;
      if (trimmed.startsWith('{') || trimmed.startsWith(PYTHON_TAG)) return { at: lead, hold: 0 };
      if (!final && PYTHON_TAG.startsWith(trimmed)) return { at: null, hold: text.length };
    }
    if (tagged !== -1) return { at: tagged, hold: 0 };
    return { at: null, hold: final ? 0 : partialMarkerLength(text, [PYTHON_TAG]) };
  },
  take,
  forcedGrammar(calls) {
    return forcedCallGrammar(calls, {
      separator: SEPARATOR,
      call: (name, args) => `${larkString(`{"name": ${JSON.stringify(name)}, "parameters": `)} ${args} "}"`,
    });
  },
  callId: () => `chatcmpl-tool-${crypto.randomBytes(8).toString('hex')}`,
};
