/**
 * The Anthropic Messages door: the request read into the one internal chat request (request.ts), run through the
 * one pipeline, and answered as an Anthropic message or its event stream (response.ts); `count_tokens` renders the
 * conversation as a generation would and counts its tokens. Errors before the stream are thrown (the route answers
 * them in Anthropic's shape); a failure mid-stream is an `error` event.
 */
import type { AnthropicMessage, CountTokensBody, MessagesBody } from '../../api/messages.ts';
import type { Principal } from '../../services/auth-service.ts';
import { answer, type DoorAnswer } from '../door.ts';
import type { ServingService } from '../service.ts';
import { parseCountTokensRequest, parseMessagesRequest } from './request.ts';
import { message, messageEvents } from './response.ts';

export class MessagesDoor {
  constructor(private readonly serving: ServingService) {}

  /** `disconnected` aborts when the client goes away: a whole (non-streamed) answer then stops generating. */
  async create(
    principal: Principal,
    body: MessagesBody,
    requestIdHeader: string | undefined,
    disconnected?: AbortSignal,
  ): Promise<DoorAnswer<AnthropicMessage>> {
    const request = parseMessagesRequest(body, this.serving.parseOptions(requestIdHeader));
    const generation = await this.serving.chat(principal, request, 'msg_');
    const { plan, outputs } = generation;
    return answer(generation, request.stream, disconnected, {
      whole: (collected) => ({
        body: message(plan, outputs[0], collected),
        completionTokens: outputs[0].completionTokens,
      }),
      events: async function* (steps) {
        for await (const event of messageEvents(plan, steps)) {
          const contentDeltas = event.type === 'content_block_delta' && event.delta.type !== 'signature_delta' ? 1 : 0;
          const completionTokens = event.type === 'message_delta' ? event.usage.output_tokens : undefined;
          yield { event: event.type, data: event, contentDeltas, completionTokens };
        }
      },
      framing: { errorEvent: (error) => ({ event: 'error', data: error }) },
    });
  }

  /** The tokens of the request's prompt on its model, as `count_tokens` answers them. */
  async countTokens(
    principal: Principal,
    body: CountTokensBody,
    requestIdHeader: string | undefined,
  ): Promise<{ input_tokens: number }> {
    const request = parseCountTokensRequest(body, this.serving.parseOptions(requestIdHeader));
    return { input_tokens: await this.serving.countChatTokens(principal, request) };
  }
}
