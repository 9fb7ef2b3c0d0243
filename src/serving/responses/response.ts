/**
 * The Responses door's answer, from the one response assembly (../generation.ts): the response object (a reasoning
 * item, a message item with the output text, a function_call item per call; `incomplete` when the budget ran out)
 * or its stream of events in OpenAI's order (response.created, response.in_progress; per item output_item.added,
 * its deltas and dones, output_item.done; response.completed, whatever the status), as api/responses.ts declares
 * them. With evidence on, the response carries `token_generations`: the prompt's ids, the sampled ids and their
 * logprobs, over every output item.
 */
import crypto from 'node:crypto';
import type { ChatLogprob, ChatToolCall } from '../../api/chat.ts';
import type { OutputItem, ResponseObject, ResponsesBody } from '../../api/responses.ts';
import type { Collected, Step } from '../generation.ts';
import type { ChoiceOutput, OutputDelta } from '../output.ts';
import type { ChatPlan } from '../plan.ts';
import type { ResponsesRequest } from './request.ts';

/** What shapes a response: the request as sent and as read, and its plan. */
export interface ResponseShape {
  body: ResponsesBody;
  request: ResponsesRequest;
  plan: ChatPlan;
}

const itemId = (prefix: string) => `${prefix}_${crypto.randomBytes(12).toString('hex')}`;

/** OpenAI's logprob entries carry bytes always. */
const responseLogprobs = (entries: readonly ChatLogprob[]) =>
  entries.map((entry) => ({
    ...entry,
    bytes: entry.bytes ?? [],
    top_logprobs: entry.top_logprobs.map((top) => ({ ...top, bytes: top.bytes ?? [] })),
  }));

function messageItem(id: string, text: string, logprobs: ChatLogprob[] | null, status: OutputItem['status']) {
  return {
    type: 'message' as const,
    id,
    status,
    role: 'assistant' as const,
    content: [
      {
        type: 'output_text' as const,
        text,
        annotations: [],
        ...(logprobs ? { logprobs: responseLogprobs(logprobs) } : {}),
      },
    ],
  };
}

function callItem(id: string, call: ChatToolCall, status: OutputItem['status']) {
  const { name, arguments: args } = call.function;
  return { type: 'function_call' as const, id, call_id: call.id, name, arguments: args, status };
}

function reasoningItem(id: string, text: string, status: OutputItem['status']) {
  return { type: 'reasoning' as const, id, summary: [], content: [{ type: 'reasoning_text' as const, text }], status };
}

/** The output items of a finished choice: reasoning, the text (always, when there is no call), each call. */
function outputItems(shape: ResponseShape, output: ChoiceOutput): OutputItem[] {
  const { content, reasoning, tool_calls: calls } = output.message();
  const status = output.finishReason === 'length' ? 'incomplete' : 'completed';
  const items: OutputItem[] = [];
  if (reasoning !== null) items.push(reasoningItem(itemId('rs'), reasoning, status));
  if (content || calls.length === 0)
    items.push(
      messageItem(itemId('msg'), content ?? '', shape.request.outputLogprobs ? output.logprobEntries : null, status),
    );
  items.push(...calls.map((call) => callItem(itemId('fc'), call, 'completed')));
  return items;
}

/** The response object around its output: the request's settings echoed, usage, the evidence when asked. */
function responseObject(
  shape: ResponseShape,
  output: ChoiceOutput | null,
  items: OutputItem[],
  cachedTokens: number,
): ResponseObject {
  const { body, plan, request } = shape;
  const incomplete = output?.finishReason === 'length';
  const prompt = plan.promptIds.length;
  const completion = output?.completionTokens ?? 0;
  return {
    id: plan.id,
    object: 'response',
    created_at: plan.created,
    status: output === null ? 'in_progress' : incomplete ? 'incomplete' : 'completed',
    error: null,
    incomplete_details: incomplete ? { reason: 'max_output_tokens' } : null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    model: plan.modelName,
    output: items,
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: body.previous_response_id ?? null,
    reasoning: { effort: body.reasoning?.effort ?? null, summary: body.reasoning?.summary ?? null },
    store: body.store ?? true,
    temperature: body.temperature ?? null,
    top_p: body.top_p ?? null,
    text: { format: body.text?.format ?? { type: 'text' } },
    tool_choice: body.tool_choice ?? 'auto',
    tools: body.tools ?? [],
    truncation: 'disabled',
    usage:
      output === null
        ? null
        : {
            input_tokens: prompt,
            input_tokens_details: { cached_tokens: cachedTokens, cache_write_tokens: 0 },
            output_tokens: completion,
            output_tokens_details: { reasoning_tokens: 0 },
            total_tokens: prompt + completion,
          },
    user: body.user ?? null,
    metadata: body.metadata ?? {},
    ...(output !== null && request.evidence ? { token_generations: [tokenGeneration(plan, output, items)] } : {}),
  };
}

/** ART's exact-token evidence: one generation that produced every output item. */
function tokenGeneration(plan: ChatPlan, output: ChoiceOutput, items: OutputItem[]) {
  return {
    prompt_token_ids: plan.promptIds,
    output_indices: items.map((_, index) => index),
    token_ids: output.tokenIds,
    compact_logprobs: output.logprobEntries.map((entry) => entry.logprob),
  };
}

/** The whole response of a finished generation. */
export function response(shape: ResponseShape, output: ChoiceOutput, collected: Collected): ResponseObject {
  return responseObject(shape, output, outputItems(shape, output), collected.cachedTokens);
}

type Event = { type: string; sequence_number: number } & Record<string, unknown>;

/** The stream's events, from the generation's steps; `onDone` gets the final response before its last event. */
export async function* responseEvents(
  shape: ResponseShape,
  generation: AsyncIterable<Step>,
  onDone: (response: ResponseObject) => Promise<void>,
): AsyncGenerator<Event> {
  const writer = new EventWriter(shape);
  for await (const step of generation) {
    if (step.type === 'start') yield* writer.start();
    else if (step.type === 'cached') writer.cached = step.cachedTokens;
    else if (step.type === 'tokens') yield* writer.delta(step.delta, step.logprobs);
    else if (step.type === 'finish') {
      yield* writer.delta(step.delta, []);
      const done = writer.finish(step.output);
      await onDone(done.response);
      yield* done.events;
    }
  }
}

/** An output item being streamed: its index, and what it has accumulated. */
interface OpenItem {
  kind: 'reasoning' | 'message';
  id: string;
  index: number;
  text: string;
  logprobs: ChatLogprob[];
}

/** Opens and closes output items as the output's kinds of text change; numbers every event. */
class EventWriter {
  cached = 0;
  private sequence = 0;
  private readonly items: OutputItem[] = [];
  private open: OpenItem | null = null;

  constructor(private readonly shape: ResponseShape) {}

  private event(type: string, fields: Record<string, unknown>): Event {
    return { type, sequence_number: this.sequence++, ...fields };
  }

  *start(): Generator<Event> {
    const snapshot = responseObject(this.shape, null, [], 0);
    yield this.event('response.created', { response: snapshot });
    yield this.event('response.in_progress', { response: snapshot });
  }

  /** What a step made visible: reasoning and text as deltas of their items, each tool call as an item of its own. */
  *delta(delta: OutputDelta, logprobs: ChatLogprob[]): Generator<Event> {
    if (delta.reasoning) yield* this.text('reasoning', delta.reasoning, []);
    if (delta.content) yield* this.text('message', delta.content, this.shape.request.outputLogprobs ? logprobs : []);
    for (const call of delta.tool_calls ?? []) {
      yield* this.close('completed');
      const id = itemId('fc');
      const index = this.items.length;
      const item = callItem(id, call, 'completed');
      yield this.event('response.output_item.added', {
        output_index: index,
        item: { ...item, arguments: '', status: 'in_progress' },
      });
      yield this.event('response.function_call_arguments.delta', {
        item_id: id,
        output_index: index,
        delta: item.arguments,
      });
      yield this.event('response.function_call_arguments.done', {
        item_id: id,
        output_index: index,
        arguments: item.arguments,
        name: item.name,
      });
      yield this.event('response.output_item.done', { output_index: index, item });
      this.items.push(item);
    }
  }

  /** The open item closed (an empty message when nothing came), and the final response with its last event. */
  finish(output: ChoiceOutput): { response: ResponseObject; events: Event[] } {
    const status = output.finishReason === 'length' ? 'incomplete' : 'completed';
    const events = [...this.close(status)];
    if (this.items.length === 0) {
      events.push(...this.text('message', '', []), ...this.close(status));
    }
    const final = responseObject(this.shape, output, this.items, this.cached);
    // Always response.completed, its response `incomplete` when the budget ran out, as vLLM streams it: ART's capture
    // reads a stream's response from response.completed alone, so a truncated rollout is still trainable.
    events.push(this.event('response.completed', { response: final }));
    return { response: final, events };
  }

  private *text(kind: OpenItem['kind'], text: string, logprobs: ChatLogprob[]): Generator<Event> {
    if (this.open?.kind !== kind) {
      yield* this.close('completed');
      yield* this.begin(kind);
    }
    const open = this.open!;
    open.text += text;
    open.logprobs.push(...logprobs);
    const at = { item_id: open.id, output_index: open.index, content_index: 0 };
    if (kind === 'reasoning') yield this.event('response.reasoning_text.delta', { ...at, delta: text });
    else yield this.event('response.output_text.delta', { ...at, delta: text, logprobs: responseLogprobs(logprobs) });
  }

  private *begin(kind: OpenItem['kind']): Generator<Event> {
    const id = itemId(kind === 'reasoning' ? 'rs' : 'msg');
    this.open = { kind, id, index: this.items.length, text: '', logprobs: [] };
    const item =
      kind === 'reasoning'
        ? { ...reasoningItem(id, '', 'in_progress'), content: [] }
        : { ...messageItem(id, '', null, 'in_progress'), content: [] };
    yield this.event('response.output_item.added', { output_index: this.open.index, item });
    const part =
      kind === 'message'
        ? { type: 'output_text', text: '', annotations: [], logprobs: [] }
        : { type: 'reasoning_text', text: '' };
    yield this.event('response.content_part.added', {
      item_id: id,
      output_index: this.open.index,
      content_index: 0,
      part,
    });
  }

  private *close(status: OutputItem['status']): Generator<Event> {
    const open = this.open;
    if (!open) return;
    this.open = null;
    const at = { item_id: open.id, output_index: open.index, content_index: 0 };
    const logprobs = this.shape.request.outputLogprobs ? open.logprobs : null;
    const item =
      open.kind === 'reasoning'
        ? reasoningItem(open.id, open.text, status)
        : messageItem(open.id, open.text, logprobs, status);
    if (open.kind === 'reasoning') yield this.event('response.reasoning_text.done', { ...at, text: open.text });
    else
      yield this.event('response.output_text.done', {
        ...at,
        text: open.text,
        logprobs: responseLogprobs(open.logprobs),
      });
    yield this.event('response.content_part.done', { ...at, part: item.content[0] });
    yield this.event('response.output_item.done', { output_index: open.index, item });
    this.items.push(item);
  }
}
