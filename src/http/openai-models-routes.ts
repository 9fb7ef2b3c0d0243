/** GET /v1/models and GET /v1/models/{name} (names contain slashes), as the OpenAI SDKs' `models.list()`/`retrieve()` call them. */
import type { FastifyInstance } from 'fastify';
import { ModelCard, ModelCardList } from '../api/openai-models.ts';
import type { ServedModelsService } from '../services/served-models-service.ts';

export function registerOpenAiModelRoutes(app: FastifyInstance, served: ServedModelsService): void {
  app.get('/v1/models', { schema: { response: { 200: ModelCardList } } }, async (request) => ({
    object: 'list',
    data: await served.list(request.principal),
  }));
  // Fastify has already percent-decoded the wildcard: decoding it again turned `%25` into a malformed URI (a 500).
  app.get<{ Params: { '*': string } }>('/v1/models/*', { schema: { response: { 200: ModelCard } } }, async (request) =>
    served.retrieve(request.principal, request.params['*']),
  );
}
