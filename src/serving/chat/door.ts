/**
 * The chat completions door: the request parsed (request.ts), run through the one pipeline (../service.ts), and
 * answered whole or as chunks (response.ts). Errors before the first chunk are thrown; later ones end the stream.
 */
import type { ChatCompletion, ChatCompletionBody, ChatCompletionChunk } from '../../api/chat.ts';
import type { Principal } from '../../services/auth-service.ts';
import { answer, CHAT_STYLE, type DoorAnswer, type DoorEvent } from '../door.ts';
import { completionTokens } from '../openai-parts.ts';
import type { ServingService } from '../service.ts';
import { parseChatRequest } from './request.ts';
import { chunks, completion } from './response.ts';

/** The chunk as an SSE event: its content deltas (text or tool calls) and its usage, for the metrics. */
function chunkEvent(chunk: ChatCompletionChunk): DoorEvent {
  const contentDeltas = chunk.choices.filter(
    (choice) =>
      (choice.delta.content !== undefined && choice.delta.content !== '') || choice.delta.tool_calls !== undefined,
  ).length;
  return { data: chunk, contentDeltas, completionTokens: chunk.usage?.completion_tokens };
}

export class ChatDoor {
  constructor(private readonly serving: ServingService) {}

  /** `disconnected` aborts when the client goes away: a whole (non-streamed) answer then stops generating. */
  async create(
    principal: Principal,
    body: ChatCompletionBody,
    requestIdHeader: string | undefined,
    disconnected?: AbortSignal,
  ): Promise<DoorAnswer<ChatCompletion>> {
    const request = parseChatRequest(body, this.serving.parseOptions(requestIdHeader));
    const generation = await this.serving.chat(principal, request, 'chatcmpl-');
    const { plan, outputs } = generation;
    return answer(generation, request.stream, disconnected, {
      whole: (collected) => ({
        body: completion(plan, outputs, collected),
        completionTokens: completionTokens(outputs),
      }),
      events: async function* (steps) {
        for await (const chunk of chunks(plan, outputs, steps)) yield chunkEvent(chunk);
      },
      framing: CHAT_STYLE,
    });
  }
}
