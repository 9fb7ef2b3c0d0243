/**
 * The Responses door: the request read into the one internal chat request (request.ts) after the stored
 * conversation it continues (`previous_response_id`, its entity's only: another's is not found), run through the one
 * pipeline, and answered as a response object or its event stream (response.ts). A stored response (`store`, the
 * default) keeps the answer and its conversation, the output read back into chat messages by the same conversion
 * input items go through, so a continuation renders exactly what a client re-sending the items would.
 */
import type { ResponseObject, ResponsesBody } from '../../api/responses.ts';
import type { ChatMessage } from '../../conversation/chat-shapes.ts';
import { itemMessages } from '../../conversation/responses-items.ts';
import { notFound } from '../../errors.ts';
import type { Principal } from '../../services/auth-service.ts';
import type { ResponseRepository } from '../../store/response-repository.ts';
import { answer, type DoorAnswer } from '../door.ts';
import type { ServingService } from '../service.ts';
import { parseResponsesRequest } from './request.ts';
import { type ResponseShape, response, responseEvents } from './response.ts';

const CONTENT_EVENTS = new Set([
  'response.output_text.delta',
  'response.reasoning_text.delta',
  'response.function_call_arguments.delta',
]);

export class ResponsesDoor {
  constructor(
    private readonly serving: ServingService,
    private readonly stored: ResponseRepository,
    private readonly now: () => Date,
  ) {}

  /** `disconnected` aborts when the client goes away: a whole (non-streamed) answer then stops generating. */
  async create(
    principal: Principal,
    body: ResponsesBody,
    requestIdHeader: string | undefined,
    disconnected?: AbortSignal,
  ): Promise<DoorAnswer<ResponseObject>> {
    const previous = body.previous_response_id ? await this.get(principal, body.previous_response_id) : null;
    const request = parseResponsesRequest(
      body,
      previous?.conversation ?? null,
      this.serving.parseOptions(requestIdHeader),
    );
    const generation = await this.serving.chat(principal, request.chat, 'resp_');
    const { plan, outputs } = generation;
    const shape: ResponseShape = { body, request, plan };
    const keep = (response: ResponseObject) => this.keep(principal, shape, response);
    let sequence = 0;
    return answer(generation, request.chat.stream, disconnected, {
      whole: async (collected) => {
        const whole = response(shape, outputs[0], collected);
        await keep(whole);
        return { body: whole, completionTokens: outputs[0].completionTokens };
      },
      events: async function* (steps) {
        for await (const event of responseEvents(shape, steps, keep)) {
          sequence = event.sequence_number + 1;
          const completionTokens = event.type === 'response.completed' ? outputs[0].completionTokens : undefined;
          yield {
            event: event.type,
            data: event,
            contentDeltas: CONTENT_EVENTS.has(event.type) ? 1 : 0,
            completionTokens,
          };
        }
      },
      framing: {
        // The error event continues the stream's numbering.
        errorEvent: ({ error }) => ({
          event: 'error',
          data: {
            type: 'error',
            code: error.type,
            message: error.message,
            param: error.param,
            sequence_number: sequence,
          },
        }),
      },
    });
  }

  /** A stored response of the key's entity; any other id (another entity's included) is a 404. */
  async get(principal: Principal, id: string): Promise<{ response: ResponseObject; conversation: ChatMessage[] }> {
    const found = await this.stored.find(principal.entityId, id);
    if (!found) throw notFound(`Response with id '${id}'`);
    return found;
  }

  async delete(principal: Principal, id: string): Promise<{ id: string; object: 'response'; deleted: true }> {
    if (!(await this.stored.delete(principal.entityId, id))) throw notFound(`Response with id '${id}'`);
    return { id, object: 'response', deleted: true };
  }

  /** Stores the answer with its conversation (the output as chat messages) when the request asked to. */
  private async keep(principal: Principal, shape: ResponseShape, answer: ResponseObject): Promise<void> {
    if (shape.body.store === false) return;
    const conversation = [...shape.request.conversation, ...itemMessages(answer.output, 'output')];
    await this.stored.save(principal.entityId, { response: answer, conversation }, this.now().toISOString());
  }
}
