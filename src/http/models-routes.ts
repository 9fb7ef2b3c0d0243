/** /v1/preview/models: create, delete, checkpoints (list and delete) and trajectory logging. Thin: parse, call, shape. */
import type { FastifyInstance } from 'fastify';
import { listEnvelope, toListPage } from '../api/lists.ts';
import {
  Checkpoint,
  CheckpointDeleteBody,
  CheckpointDeleteResponse,
  LogBody,
  LogResponse,
  ModelCreateBody,
  ModelDeleteResponse,
  ModelResponse,
  toCheckpointResponse,
  toModelResponse,
} from '../api/models.ts';
import type { ModelService } from '../services/model-service.ts';
import type { TrajectoryService } from '../services/trajectory-service.ts';
import { LOG_BODY } from './body-tasks.ts';
import { preparedBody } from './large-body.ts';
import { queryEnum, queryInteger, queryString } from './query.ts';

type Query = Record<string, unknown>;

export function registerModelRoutes(
  app: FastifyInstance,
  services: { models: ModelService; trajectories: TrajectoryService },
): void {
  app.post<{ Body: ModelCreateBody }>(
    '/v1/preview/models',
    { schema: { body: ModelCreateBody, response: { 200: ModelResponse } } },
    async (request) => services.models.create(request.principal, request.body),
  );

  // Beyond the interface: read one model back (the CLI names artifacts after it).
  app.get<{ Params: { model_id: string } }>(
    '/v1/preview/models/:model_id',
    { schema: { response: { 200: ModelResponse } } },
    async (request) => toModelResponse(await services.models.getOwned(request.principal, request.params.model_id)),
  );

  // Names where the CLI and people have them; every other route takes the id this answers.
  app.get<{ Params: { entity: string; project: string; name: string } }>(
    '/v1/preview/models/by-name/:entity/:project/:name',
    { schema: { summary: 'Read one model by its entity/project/name', response: { 200: ModelResponse } } },
    async (request) =>
      toModelResponse(
        await services.models.getOwnedByName(
          request.principal,
          request.params.entity,
          request.params.project,
          request.params.name,
        ),
      ),
  );

  app.delete<{ Params: { model_id: string } }>(
    '/v1/preview/models/:model_id',
    { schema: { response: { 200: ModelDeleteResponse } } },
    async (request) => services.models.delete(request.principal, request.params.model_id),
  );

  app.get<{ Params: { model_id: string }; Querystring: Query }>(
    '/v1/preview/models/:model_id/checkpoints',
    { schema: { response: { 200: listEnvelope(Checkpoint) } } },
    async (request) => {
      const query = {
        after: queryString(request.query, 'after'),
        limit: queryInteger(request.query, 'limit', 20, 1, 100),
        order: queryEnum(request.query, 'order', ['asc', 'desc'] as const, 'asc'),
      };
      const page = await services.models.listCheckpoints(request.principal, request.params.model_id, query);
      return toListPage({ items: page.items.map(toCheckpointResponse), hasMore: page.hasMore });
    },
  );

  app.delete<{ Params: { model_id: string }; Body: CheckpointDeleteBody }>(
    '/v1/preview/models/:model_id/checkpoints',
    { schema: { body: CheckpointDeleteBody, response: { 200: CheckpointDeleteResponse } } },
    async (request) =>
      services.models.deleteCheckpoints(request.principal, request.params.model_id, request.body.steps),
  );

  app.post<{ Params: { model_id: string }; Body: LogBody }>(
    '/v1/preview/models/:model_id/log',
    { schema: { body: LogBody, response: { 200: LogResponse } }, config: { largeBody: true } },
    async (request) =>
      services.trajectories.log(
        request.principal,
        request.params.model_id,
        await preparedBody(request, LOG_BODY, undefined),
      ),
  );
}
