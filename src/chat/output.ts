/**
 * One choice's output, token by token: incremental detokenization that never splits a UTF-8 character,
 * stop strings (held back while they could still match), `<think>` reasoning and Hermes tool calls,
 * repetition detection, and OpenAI-shaped logprob entries. Used alike by streaming and whole responses.
 */
import crypto from 'node:crypto';
import type { ChatTokenizer } from './tokenizer.ts';
import type { TopLogprob } from '../engine/protocol.ts';

export interface LogprobEntry {
  token: string;
  logprob: number;
  bytes: number[] | null;
  top_logprobs: { token: string; logprob: number; bytes: number[] | null }[];
}

export interface ToolCallDelta {
  index: number;
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface OutputDelta {
  content?: string;
  reasoning?: string;
  tool_calls?: ToolCallDelta[];
}

export interface OutputOptions {
  tokenizer: ChatTokenizer;
  stop: string[];
  includeStopStr: boolean;
  skipSpecialTokens: boolean;
  /** Token ids that end generation (EOS and stop_token_ids): their text is not part of the output. */
  stopTokenIds: Set<number>;
  parseTools: boolean;
  parseReasoning: boolean;
  includeReasoning: boolean;
  logprobs: { top: number; asTokenIds: boolean } | null;
  repetitionDetection: { minPatternSize: number; maxPatternSize: number; minCount: number } | null;
}

const TOOL_OPEN = '<tool_call>';
const TOOL_CLOSE = '</tool_call>';
const THINK_OPEN = '<think>';
const THINK_CLOSE = '</think>';
const LOGPROB_FLOOR = -9999;

/** Length of the longest suffix of `text` that is a proper prefix of one of `markers`. */
function partialMarkerLength(text: string, markers: string[]): number {
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

export function toolCallId(): string {
  return `chatcmpl-tool-${crypto.randomBytes(8).toString('hex')}`;
}

/** Hermes bodies: `{"name": …, "arguments": …}`; arguments come back re-serialised as a JSON string. */
function parseToolCallBody(body: string): { name: string; arguments: string } | null {
  try {
    const parsed = JSON.parse(body.trim()) as { name?: unknown; arguments?: unknown };
    if (typeof parsed.name !== 'string') return null;
    return { name: parsed.name, arguments: JSON.stringify(parsed.arguments ?? {}) };
  } catch {
    return null;
  }
}

export class ChoiceOutput {
  readonly tokenIds: number[] = [];
  readonly logprobEntries: LogprobEntry[] = [];
  finishReason: 'stop' | 'length' | 'tool_calls' | 'repetition' | null = null;
  stopReason: string | number | null = null;

  private readonly decoder = new TextDecoder('utf-8');
  /** Visible text decoded so far (stop strings already cut). */
  private text = '';
  /** How much of `text` has passed the stop-string hold-back and gone to the parsers. */
  private released = 0;
  private stopped = false;
  // Parser state over the released text.
  private phase: 'start' | 'reasoning' | 'content' | 'tools' = 'start';
  private parsed = 0;
  private toolText = '';
  private readonly toolCalls: ToolCallDelta[] = [];
  private content = '';
  private reasoning = '';
  /** Just past `</think>`: the newlines that follow are the template's blank line, not content. */
  private afterThink = false;

  constructor(private readonly options: OutputOptions) {
    if (!options.parseReasoning) this.phase = 'content';
  }

  get done(): boolean {
    return this.stopped;
  }

  get completionTokens(): number {
    return this.tokenIds.length;
  }

  /** Feeds tokens (with logprobs when requested); answers what became visible. Ignores tokens after a stop. */
  push(tokens: number[], logprobs?: (number | null)[], tops?: TopLogprob[][]): { delta: OutputDelta; logprobs: LogprobEntry[] } {
    const entries: LogprobEntry[] = [];
    for (const [position, id] of tokens.entries()) {
      if (this.stopped) break;
      this.tokenIds.push(id);
      if (this.options.logprobs) {
        const entry = this.logprobEntry(id, logprobs?.[position] ?? null, tops?.[position] ?? []);
        this.logprobEntries.push(entry);
        entries.push(entry);
      }
      const isStopToken = this.options.stopTokenIds.has(id);
      const hidden = (isStopToken && !this.options.includeStopStr) || (this.options.skipSpecialTokens && this.options.tokenizer.specialTokenIds.has(id));
      if (!hidden) this.text += this.decoder.decode(this.options.tokenizer.tokenBytes(id) ?? new Uint8Array(), { stream: true });
      this.checkStopStrings();
      if (!this.stopped) this.checkRepetition();
    }
    return { delta: this.advance(false), logprobs: entries };
  }

  /** The engine finished this sequence; flushes everything held back. */
  finish(reason: 'stop' | 'length', stopTokenId: number | null): OutputDelta {
    if (!this.stopped) {
      this.stopped = true;
      this.finishReason = reason;
      this.stopReason = reason === 'stop' && stopTokenId !== null && stopTokenId !== this.options.tokenizer.eosTokenId ? stopTokenId : null;
    }
    this.text += this.decoder.decode();
    return this.advance(true);
  }

  /** The whole message, as a non-streaming response reports it. */
  message(): { content: string | null; reasoning: string | null; tool_calls: ToolCallDelta[] } {
    const hasCalls = this.toolCalls.length > 0;
    return {
      content: hasCalls && this.content.trim() === '' ? null : this.content,
      reasoning: this.options.includeReasoning && this.reasoning !== '' ? this.reasoning : null,
      tool_calls: this.toolCalls,
    };
  }

  private logprobEntry(id: number, logprob: number | null, top: TopLogprob[]): LogprobEntry {
    const { tokenizer, logprobs } = this.options;
    const describe = (tokenId: number, value: number | null) => {
      const bytes = tokenizer.tokenBytes(tokenId);
      const text = bytes ? new TextDecoder().decode(bytes) : '';
      const token = logprobs!.asTokenIds ? `token_id:${tokenId}` : text;
      return { token, logprob: Math.max(LOGPROB_FLOOR, value ?? LOGPROB_FLOOR), bytes: bytes ? Array.from(bytes) : null };
    };
    return { ...describe(id, logprob), top_logprobs: top.slice(0, logprobs!.top).map(([tokenId, value]) => describe(tokenId, value)) };
  }

  private checkStopStrings(): void {
    if (this.options.stop.length === 0) return;
    const longest = Math.max(...this.options.stop.map((stop) => stop.length));
    const from = Math.max(0, this.released - longest);
    let best: { at: number; stop: string } | null = null;
    for (const stop of this.options.stop) {
      const at = this.text.indexOf(stop, from);
      if (at !== -1 && (best === null || at < best.at)) best = { at, stop };
    }
    if (!best) return;
    this.text = this.text.slice(0, this.options.includeStopStr ? best.at + best.stop.length : best.at);
    this.stopped = true;
    this.finishReason = 'stop';
    this.stopReason = best.stop;
  }

  private checkRepetition(): void {
    const rule = this.options.repetitionDetection;
    if (!rule) return;
    const ids = this.tokenIds;
    for (let size = rule.minPatternSize; size <= rule.maxPatternSize; size += 1) {
      const span = size * rule.minCount;
      if (ids.length < span) break;
      const tail = ids.slice(ids.length - span);
      if (tail.every((id, i) => id === tail[i % size])) {
        this.stopped = true;
        this.finishReason = 'repetition';
        this.stopReason = 'repetition_detected';
        return;
      }
    }
  }

  /** Moves text past the hold-back into the parsers and answers the new delta. */
  private advance(final: boolean): OutputDelta {
    let end = this.text.length;
    if (!final && !this.stopped && !this.options.includeStopStr && this.options.stop.length > 0) {
      end -= partialMarkerLength(this.text.slice(this.released), this.options.stop);
    }
    this.released = Math.max(this.released, end);
    return this.parse(final);
  }

  private parse(final: boolean): OutputDelta {
    const delta: OutputDelta = {};
    const add = (key: 'content' | 'reasoning', piece: string) => {
      if (piece === '') return;
      if (key === 'reasoning') {
        this.reasoning += piece;
        if (this.options.includeReasoning) delta.reasoning = (delta.reasoning ?? '') + piece;
      } else {
        this.content += piece;
        delta.content = (delta.content ?? '') + piece;
      }
    };
    const available = this.text.slice(0, this.released);
    while (this.parsed < available.length) {
      const rest = available.slice(this.parsed);
      if (this.phase === 'start') {
        const trimmed = rest.trimStart();
        if (trimmed.startsWith(THINK_OPEN)) {
          this.parsed += rest.length - trimmed.length + THINK_OPEN.length;
          this.phase = 'reasoning';
        } else if (!final && THINK_OPEN.startsWith(trimmed)) {
          break; // could still become <think>
        } else {
          this.phase = 'content';
        }
      } else if (this.phase === 'reasoning') {
        const close = rest.indexOf(THINK_CLOSE);
        if (close !== -1) {
          add('reasoning', rest.slice(0, close));
          this.parsed += close + THINK_CLOSE.length;
          // The template puts a blank line after </think>; it is not content. While streaming it may not
          // have arrived yet, so the content phase drops the newlines that open it.
          this.afterThink = true;
          this.phase = 'content';
        } else {
          const hold = final ? 0 : partialMarkerLength(rest, [THINK_CLOSE]);
          add('reasoning', rest.slice(0, rest.length - hold));
          this.parsed += rest.length - hold;
          break;
        }
      } else if (this.phase === 'content') {
        if (this.afterThink) {
          const blank = rest.length - rest.replace(/^\n+/, '').length;
          this.parsed += blank;
          if (blank === rest.length) break; // only newlines so far: more may follow
          this.afterThink = false;
          continue;
        }
        const open = this.options.parseTools ? rest.indexOf(TOOL_OPEN) : -1;
        if (open !== -1) {
          add('content', rest.slice(0, open));
          this.parsed += open;
          this.phase = 'tools';
        } else {
          const hold = final || !this.options.parseTools ? 0 : partialMarkerLength(rest, [TOOL_OPEN]);
          add('content', rest.slice(0, rest.length - hold));
          this.parsed += rest.length - hold;
          break;
        }
      } else {
        this.toolText += rest;
        this.parsed += rest.length;
      }
    }
    if (this.phase === 'tools') {
      const calls = this.completeToolCalls(final, (text) => add('content', text));
      if (calls.length > 0) delta.tool_calls = calls;
      if (final && this.toolCalls.length > 0 && this.finishReason === 'stop') this.finishReason = 'tool_calls';
      if (final && this.toolCalls.length === 0 && this.toolText !== '') {
        // Nothing parsed: the text was not a tool call after all, so it is content.
        add('content', this.toolText);
        this.toolText = '';
      }
    }
    return delta;
  }

  /** Emits each `<tool_call>…</tool_call>` block once it is closed (or at the end, an unclosed last one). */
  private completeToolCalls(final: boolean, addContent: (text: string) => void): ToolCallDelta[] {
    const emitted: ToolCallDelta[] = [];
    for (;;) {
      const open = this.toolText.indexOf(TOOL_OPEN);
      if (open === -1) break;
      const close = this.toolText.indexOf(TOOL_CLOSE, open);
      if (close === -1 && !final) break;
      const body = this.toolText.slice(open + TOOL_OPEN.length, close === -1 ? undefined : close);
      const parsed = parseToolCallBody(body);
      if (!parsed) {
        if (final) break;
        // A closed block that is not valid JSON: keep it as text (in the delta too, so streams see it).
        addContent(this.toolText.slice(open, close + TOOL_CLOSE.length));
        this.toolText = this.toolText.slice(close + TOOL_CLOSE.length);
        continue;
      }
      this.toolText = close === -1 ? '' : this.toolText.slice(close + TOOL_CLOSE.length);
      const call: ToolCallDelta = { index: this.toolCalls.length, id: toolCallId(), type: 'function', function: parsed };
      this.toolCalls.push(call);
      emitted.push(call);
    }
    return emitted;
  }
}
