/**
 * One choice's output, token by token: incremental detokenization that never splits a UTF-8 character,
 * stop strings (held back while they could still match), reasoning (reasoning.ts), tool calls in the base
 * model's format (tool-calls/), repetition detection, and OpenAI-shaped logprob entries. Used alike by
 * streaming and whole responses.
 */

import type { ChatDelta, ChatLogprob, ChatToolCall } from '../api/chat.ts';
import { reasoningBody, reasoningStart } from '../conversation/reasoning.ts';
import type { ChatTokenizer } from '../conversation/tokenizer.ts';
import { partialMarkerLength } from '../conversation/tool-calls/format.ts';
import type { ToolCallFormat } from '../conversation/tool-calls/index.ts';
import type { TopLogprob } from '../engine/protocol.ts';

/** What one step of the output makes visible: a stream chunk's delta without its role. */
export type OutputDelta = Omit<ChatDelta, 'role'>;

export interface OutputOptions {
  tokenizer: ChatTokenizer;
  stop: string[];
  includeStopStr: boolean;
  skipSpecialTokens: boolean;
  /** Token ids that end generation (EOS and stop_token_ids): their text is not part of the output. */
  stopTokenIds: Set<number>;
  parseTools: boolean;
  /** The base model's tool-call format (Hermes, Llama 3 JSON, Mistral). */
  toolFormat: ToolCallFormat;
  parseReasoning: boolean;
  includeReasoning: boolean;
  logprobs: { top: number; asTokenIds: boolean } | null;
  repetitionDetection: { minPatternSize: number; maxPatternSize: number; minCount: number } | null;
}

const LOGPROB_FLOOR = -9999;

export class ChoiceOutput {
  readonly tokenIds: number[] = [];
  readonly logprobEntries: ChatLogprob[] = [];
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
  private readonly toolCalls: ChatToolCall[] = [];
  private content = '';
  private reasoning = '';
  /** Just past the reasoning block: the newlines that follow are the template's blank line, not content. */
  private afterThink = false;
  /** The format's marker tokens (`<|python_tag|>`, `[TOOL_CALLS]`): the parser must see them even when special. */
  private readonly markerIds: ReadonlySet<number>;

  constructor(private readonly options: OutputOptions) {
    if (!options.parseReasoning) this.phase = 'content';
    const markerIds = options.parseTools
      ? options.toolFormat.markers.map((marker) => options.tokenizer.tokenId(marker))
      : [];
    this.markerIds = new Set(markerIds.filter((id) => id !== undefined));
  }

  get done(): boolean {
    return this.stopped;
  }

  get completionTokens(): number {
    return this.tokenIds.length;
  }

  /** Feeds tokens (with logprobs when requested); answers what became visible. Ignores tokens after a stop. */
  push(
    tokens: number[],
    logprobs?: (number | null)[],
    tops?: TopLogprob[][],
  ): { delta: OutputDelta; logprobs: ChatLogprob[] } {
    const entries: ChatLogprob[] = [];
    for (const [position, id] of tokens.entries()) {
      if (this.stopped) break;
      this.tokenIds.push(id);
      if (this.options.logprobs) {
        const entry = this.logprobEntry(id, logprobs?.[position] ?? null, tops?.[position] ?? []);
        this.logprobEntries.push(entry);
        entries.push(entry);
      }
      const isStopToken = this.options.stopTokenIds.has(id);
      const skipped =
        this.options.skipSpecialTokens && this.options.tokenizer.specialTokenIds.has(id) && !this.markerIds.has(id);
      const hidden = (isStopToken && !this.options.includeStopStr) || skipped;
      if (!hidden)
        this.text += this.decoder.decode(this.options.tokenizer.tokenBytes(id) ?? new Uint8Array(), { stream: true });
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
      this.stopReason =
        reason === 'stop' && stopTokenId !== null && stopTokenId !== this.options.tokenizer.eosTokenId
          ? stopTokenId
          : null;
    }
    this.text += this.decoder.decode();
    return this.advance(true);
  }

  /** The whole message, as a non-streaming response reports it. */
  message(): { content: string | null; reasoning: string | null; tool_calls: ChatToolCall[] } {
    const hasCalls = this.toolCalls.length > 0;
    return {
      content: hasCalls && this.content.trim() === '' ? null : this.content,
      reasoning: this.options.includeReasoning && this.reasoning !== '' ? this.reasoning : null,
      tool_calls: this.toolCalls,
    };
  }

  private logprobEntry(id: number, logprob: number | null, top: TopLogprob[]): ChatLogprob {
    const { tokenizer, logprobs } = this.options;
    const describe = (tokenId: number, value: number | null) => {
      const bytes = tokenizer.tokenBytes(tokenId);
      const text = bytes ? new TextDecoder().decode(bytes) : '';
      const token = logprobs!.asTokenIds ? `token_id:${tokenId}` : text;
      return {
        token,
        logprob: Math.max(LOGPROB_FLOOR, value ?? LOGPROB_FLOOR),
        bytes: bytes ? Array.from(bytes) : null,
      };
    };
    return {
      ...describe(id, logprob),
      top_logprobs: top.slice(0, logprobs!.top).map(([tokenId, value]) => describe(tokenId, value)),
    };
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
    const available = this.text.slice(0, this.released);
    let more = true;
    while (more && this.parsed < available.length) more = this.step(available.slice(this.parsed), final, delta);
    if (this.phase === 'tools') this.parseToolText(final, delta);
    return delta;
  }

  /** Adds a piece of content or reasoning to the message and to the delta (reasoning only when it is shown). */
  private emit(delta: OutputDelta, key: 'content' | 'reasoning', piece: string): void {
    if (piece === '') return;
    if (key === 'reasoning') {
      this.reasoning += piece;
      if (this.options.includeReasoning) delta.reasoning = (delta.reasoning ?? '') + piece;
    } else {
      this.content += piece;
      delta.content = (delta.content ?? '') + piece;
    }
  }

  /** Parses the front of `rest` (released text not yet parsed) in the current phase; false to wait for more text. */
  private step(rest: string, final: boolean, delta: OutputDelta): boolean {
    switch (this.phase) {
      case 'start': {
        const start = reasoningStart(rest, final);
        if (start.kind === 'wait') return false;
        if (start.kind === 'open') this.parsed += start.length;
        this.phase = start.kind === 'open' ? 'reasoning' : 'content';
        return true;
      }
      case 'reasoning': {
        const body = reasoningBody(rest, final);
        this.emit(delta, 'reasoning', body.reasoning);
        this.parsed += body.consumed;
        if (!body.closed) return false;
        // The template puts a blank line after the block; it is not content. While streaming it may not
        // have arrived yet, so the content phase drops the newlines that open it.
        this.afterThink = true;
        this.phase = 'content';
        return true;
      }
      case 'content':
        return this.stepContent(rest, final, delta);
      case 'tools':
        this.toolText += rest;
        this.parsed += rest.length;
        return true;
    }
  }

  private stepContent(rest: string, final: boolean, delta: OutputDelta): boolean {
    if (this.afterThink) {
      const blank = rest.length - rest.replace(/^\n+/, '').length;
      this.parsed += blank;
      if (blank === rest.length) return false; // only newlines so far: more may follow
      this.afterThink = false;
      return true;
    }
    const start = this.options.parseTools
      ? this.options.toolFormat.start(rest, this.content === '', final)
      : { at: null, hold: 0 };
    if (start.at === null) {
      this.emit(delta, 'content', rest.slice(0, rest.length - start.hold));
      this.parsed += rest.length - start.hold;
      return false;
    }
    this.emit(delta, 'content', rest.slice(0, start.at));
    this.parsed += start.at;
    this.phase = 'tools';
    return true;
  }

  private parseToolText(final: boolean, delta: OutputDelta): void {
    const calls = this.takeToolCalls(final, (text) => this.emit(delta, 'content', text));
    if (calls.length > 0) delta.tool_calls = calls;
    if (final && this.toolCalls.length > 0 && this.finishReason === 'stop') this.finishReason = 'tool_calls';
    if (final && this.toolCalls.length === 0 && this.toolText !== '') {
      // Nothing parsed: the text was not a tool call after all, so it is content. After calls, it is dropped, as vLLM does.
      this.emit(delta, 'content', this.toolText);
    }
    if (final) this.toolText = '';
  }

  /** Emits each call once the format sees it whole; at the end, what is not a call becomes content. */
  private takeToolCalls(final: boolean, addContent: (text: string) => void): ChatToolCall[] {
    const taken = this.options.toolFormat.take(this.toolText, final);
    this.toolText = taken.rest;
    addContent(taken.content);
    return taken.calls.map((parsed) => {
      const call: ChatToolCall = {
        index: this.toolCalls.length,
        id: this.options.toolFormat.callId(),
        type: 'function',
        function: parsed,
      };
      this.toolCalls.push(call);
      return call;
    });
  }
}
