/**
 * The Messages door's answer, from the one response assembly (../generation.ts): the whole Anthropic message (a
 * thinking block for the reasoning, a text block, a tool_use block per call) or its stream of events in Anthropic's
 * order (message_start; per block content_block_start, deltas, content_block_stop; message_delta with the stop
 * reason and usage; message_stop), as api/messages.ts declares them. With evidence on, the message (and the
 * stream's message_start and message_delta) carries the prompt's and the sampled token ids and their logprobs.
 */
import crypto from 'node:crypto';
import type { ChatToolCall } from '../../api/chat.ts';
import type { AnthropicMessage, ContentBlock, MessageStreamEvent, StopReason } from '../../api/messages.ts';
import type { Collected, Step } from '../generation.ts';
import type { ChoiceOutput, OutputDelta } from '../output.ts';
import type { ChatPlan } from '../plan.ts';

/** Anthropic's stop reasons: a stop string is a stop sequence, a call is tool use, the budget is max tokens. */
function stopOf(output: ChoiceOutput): { stop_reason: StopReason; stop_sequence: string | null } {
  if (output.finishReason === 'tool_calls') return { stop_reason: 'tool_use', stop_sequence: null };
  if (output.finishReason === 'length') return { stop_reason: 'max_tokens', stop_sequence: null };
  if (typeof output.stopReason === 'string' && output.finishReason === 'stop')
    return { stop_reason: 'stop_sequence', stop_sequence: output.stopReason };
  return { stop_reason: 'end_turn', stop_sequence: null };
}

/** A call's arguments as the `input` object Anthropic's clients expect (arguments that are not an object: `{}`). */
function toolUse(call: ChatToolCall): Extract<ContentBlock, { type: 'tool_use' }> {
  const input = JSON.parse(call.function.arguments) as unknown;
  const object = input !== null && typeof input === 'object' && !Array.isArray(input);
  return {
    type: 'tool_use',
    id: call.id,
    name: call.function.name,
    input: object ? (input as Record<string, unknown>) : {},
  };
}

/** Anthropic clients check a thinking block's signature exists; ours signs nothing, so it is a fresh opaque token. */
const signature = () => crypto.randomBytes(16).toString('hex');

const usageOf = (plan: ChatPlan, output: ChoiceOutput, cachedTokens: number) => ({
  input_tokens: plan.promptIds.length,
  output_tokens: output.completionTokens,
  cache_creation_input_tokens: 0,
  cache_read_input_tokens: cachedTokens,
});

/** The sampled ids and their logprobs, when the request asked for the evidence. */
function sampledEvidence(plan: ChatPlan, output: ChoiceOutput) {
  if (!plan.request.returnTokenIds) return {};
  return { token_ids: output.tokenIds, logprobs: output.logprobEntries.map((entry) => entry.logprob) };
}

/** The whole message of a finished generation. */
export function message(plan: ChatPlan, output: ChoiceOutput, collected: Collected): AnthropicMessage {
  const { content, reasoning, tool_calls: calls } = output.message();
  const blocks: ContentBlock[] = [];
  if (reasoning !== null) blocks.push({ type: 'thinking', thinking: reasoning, signature: signature() });
  if (content) blocks.push({ type: 'text', text: content });
  blocks.push(...calls.map(toolUse));
  return {
    id: plan.id,
    type: 'message',
    role: 'assistant',
    model: plan.modelName,
    content: blocks,
    ...stopOf(output),
    usage: usageOf(plan, output, collected.cachedTokens),
    ...(plan.request.returnTokenIds ? { prompt_token_ids: plan.promptIds } : {}),
    ...sampledEvidence(plan, output),
  };
}

/** The stream's events, from the generation's steps. */
export async function* messageEvents(
  plan: ChatPlan,
  generation: AsyncIterable<Step>,
): AsyncIterable<MessageStreamEvent> {
  const writer = new EventWriter(plan);
  for await (const step of generation) {
    if (step.type === 'start') yield writer.start();
    else if (step.type === 'tokens') yield* writer.delta(step.delta);
    else if (step.type === 'finish') yield* writer.finish(step.delta, step.output);
  }
}

type BlockType = ContentBlock['type'];

/** Opens and closes content blocks as the output's kinds of text change: thinking, text, one block per tool call. */
class EventWriter {
  private open: { type: BlockType; index: number } | null = null;
  private next = 0;

  constructor(private readonly plan: ChatPlan) {}

  start(): MessageStreamEvent {
    const { plan } = this;
    return {
      type: 'message_start',
      message: {
        id: plan.id,
        type: 'message',
        role: 'assistant',
        model: plan.modelName,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: {
          input_tokens: plan.promptIds.length,
          output_tokens: 0,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: 0,
        },
        ...(plan.request.returnTokenIds ? { prompt_token_ids: plan.promptIds } : {}),
      },
    };
  }

  /** What a step made visible: reasoning and text as deltas of their blocks, each tool call as a block of its own. */
  *delta(delta: OutputDelta): Generator<MessageStreamEvent> {
    if (delta.reasoning) yield* this.into('thinking', { type: 'thinking_delta', thinking: delta.reasoning });
    if (delta.content) yield* this.into('text', { type: 'text_delta', text: delta.content });
    for (const call of delta.tool_calls ?? []) {
      yield* this.close();
      const block = toolUse(call);
      yield* this.begin({ ...block, input: {} });
      yield {
        type: 'content_block_delta',
        index: this.open!.index,
        delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input) },
      };
    }
  }

  /** The last of the output, the open block closed, the stop reason with usage (and evidence), the message's end. */
  *finish(delta: OutputDelta, output: ChoiceOutput): Generator<MessageStreamEvent> {
    yield* this.delta(delta);
    yield* this.close();
    yield {
      type: 'message_delta',
      delta: stopOf(output),
      usage: { input_tokens: this.plan.promptIds.length, output_tokens: output.completionTokens },
      ...sampledEvidence(this.plan, output),
    };
    yield { type: 'message_stop' };
  }

  private *into(
    type: 'thinking' | 'text',
    delta: Extract<MessageStreamEvent, { type: 'content_block_delta' }>['delta'],
  ) {
    if (this.open?.type !== type) {
      yield* this.close();
      yield* this.begin(type === 'text' ? { type, text: '' } : { type, thinking: '', signature: '' });
    }
    yield { type: 'content_block_delta' as const, index: this.open!.index, delta };
  }

  private *begin(block: ContentBlock): Generator<MessageStreamEvent> {
    this.open = { type: block.type, index: this.next };
    this.next += 1;
    yield { type: 'content_block_start', index: this.open.index, content_block: block };
  }

  private *close(): Generator<MessageStreamEvent> {
    if (!this.open) return;
    const { index, type } = this.open;
    if (type === 'thinking')
      yield { type: 'content_block_delta', index, delta: { type: 'signature_delta', signature: signature() } };
    yield { type: 'content_block_stop', index };
    this.open = null;
  }
}
