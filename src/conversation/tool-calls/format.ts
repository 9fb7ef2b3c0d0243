/**
 * What every family's tool-call format provides (training-rows.md §2): where tool-call text starts in
 * generated text, how complete calls are taken out of it (streaming: as soon as each is whole), the
 * grammar a forced call is constrained to, and the id a call gets. One module per family implements it.
 */
import type { ForcedCalls, MarkerSyntax } from '../../constraints/lark.ts';

export type ToolParserName = 'hermes' | 'llama3_json' | 'mistral';

export interface ParsedCall {
  name: string;
  /** JSON text of the arguments object, as OpenAI's `function.arguments` carries it. */
  arguments: string;
}

export interface TakenCalls {
  calls: ParsedCall[];
  /** Tool text not consumed: an incomplete call waiting for more tokens, or (at the end) not a call. */
  rest: string;
  /** Text that turned out not to be a call while more calls may follow: it is content. */
  content: string;
}

export interface ToolTextStart {
  at: number | null;
  hold: number;
}

export interface ToolCallFormat {
  name: ToolParserName;
  /** Text whose presence in a chat template says the model writes calls in this format. */
  templateMarker: string;
  /** Tokens that open tool-call text; they reach the parser even when special tokens are skipped. */
  markers: readonly string[];
  /**
   * Where tool-call text starts in `text` (released content not yet parsed), or null; `hold`: how many
   * characters at the end must wait because they could still become the start. `atStart`: no content yet.
   */
  start(text: string, atStart: boolean, final: boolean): ToolTextStart;
  /** Complete calls taken from the front of the tool text; `final`: no more text comes (an unclosed call may count). */
  take(toolText: string, final: boolean): TakenCalls;
  /** The Lark grammar of a forced call: one call of one of `calls.tools`, or (`multiple`) one or more; `marker` writes this tokenizer's markers. */
  forcedGrammar(calls: ForcedCalls, marker: MarkerSyntax): string;
  callId(): string;
}

/** Length of the longest suffix of `text` that is a proper prefix of one of `markers`. */
export function partialMarkerLength(text: string, markers: readonly string[]): number {
  let longest = 0;
  for (const marker of markers) {
    for (let length = Math.min(marker.length - 1, text.length); length > longest; length -= 1) {
      if (text.endsWith(marker.slice(0, length))) {
        longest = length;
        break;
      }
    }
  }
  return longest;
}

/**
 * The end (exclusive) of the JSON object or array that starts at `from`, by bracket balance outside
 * strings; -1 while it is still open. Only the brackets are checked here: JSON.parse judges the rest.
 */
export function jsonValueEnd(text: string, from: number): number {
  let depth = 0;
  let inString = false;
  for (let at = from; at < text.length; at += 1) {
    const character = text[at];
    if (inString) {
      if (character === '\\') at += 1;
      else if (character === '"') inString = false;
    } else if (character === '"') {
      inString = true;
    } else if (character === '{' || character === '[') {
      depth += 1;
    } else if (character === '}' || character === ']') {
      depth -= 1;
      if (depth === 0) return at + 1;
    }
  }
  return -1;
}

/** A call object's name and arguments (under `argumentsKeys`, first present wins), or null when it is not one. */
export function callFromObject(value: unknown, argumentsKeys: readonly string[]): ParsedCall | null {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return null;
  const record = value as Record<string, unknown>;
  if (typeof record.name !== 'string') return null;
  const key = argumentsKeys.find((candidate) => candidate in record);
  return { name: record.name, arguments: JSON.stringify(key === undefined ? {} : (record[key] ?? {})) };
}

export function parseJson(text: string): { value: unknown } | null {
  try {
    return { value: JSON.parse(text) };
  } catch {
    return null;
  }
}
