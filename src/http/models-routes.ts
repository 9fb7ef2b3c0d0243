/** /v1/preview/models: create, delete, checkpoints (list and delete) and trajectory logging. Thin: parse, call, shape. */
import type { FastifyInstance } from 'fastify';
import {
  AdapterArchive,
  Checkpoint,
  CheckpointDeleteBody,
  CheckpointDeleteResponse,
  LogBody,
  ModelForkBody,
  ModelImportQuery,
  LogResponse,
  ModelCreateBody,
  ModelDeleteResponse,
  ModelResponse,
  listEnvelope,
} from '../api/models.ts';
import type { CheckpointRecord } from '../store/model-repository.ts';
import { toModelView, type ModelService } from '../services/model-service.ts';
import type { TrajectoryService } from '../services/trajectory-service.ts';
import { queryEnum, queryInteger, queryString } from './query.ts';
import type { CheckpointExporter } from '../services/checkpoint-export.ts';
import type { ModelLineage } from '../services/model-lineage.ts';
import type { AdapterImporter } from '../services/adapter-import.ts';
import type { Readable } from 'node:stream';
import { AppError, validationError } from '../errors.ts';

type Query = Record<string, unknown>;

export function toCheckpointView(checkpoint: CheckpointRecord) {
  return { id: checkpoint.id, step: checkpoint.step, metrics: checkpoint.metrics, created_at: checkpoint.createdAt };
}

export function registerModelRoutes(app: FastifyInstance, services: { models: ModelService; trajectories: TrajectoryService; exports: CheckpointExporter; lineage: ModelLineage; imports: AdapterImporter }): void {
  app.post<{ Body: ModelCreateBody }>(
    '/v1/preview/models',
    { schema: { body: ModelCreateBody, response: { 200: ModelResponse } } },
    async (request) => services.models.create(request.principal, request.body),
  );

  // Beyond the interface: read one model back (the CLI names artifacts after it).
  app.get<{ Params: { model_id: string } }>(
    '/v1/preview/models/:model_id',
    { schema: { response: { 200: ModelResponse } } },
    async (request) => toModelView(await services.models.getOwned(request.principal, request.params.model_id)),
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
      const data = page.items.map(toCheckpointView);
      return { object: 'list', data, has_more: page.hasMore, first_id: data[0]?.id ?? '', last_id: data.at(-1)?.id ?? '' };
    },
  );

  app.delete<{ Params: { model_id: string }; Body: CheckpointDeleteBody }>(
    '/v1/preview/models/:model_id/checkpoints',
    { schema: { body: CheckpointDeleteBody, response: { 200: CheckpointDeleteResponse } } },
    async (request) => services.models.deleteCheckpoints(request.principal, request.params.model_id, request.body.steps),
  );

  app.get<{ Params: { model_id: string; step: string } }>(
    '/v1/preview/models/:model_id/checkpoints/:step/adapter',
    { schema: { summary: 'Download a checkpoint as a PEFT adapter (tar: adapter_config.json, adapter_model.safetensors)', response: { 200: AdapterArchive } } },
    async (request, reply) => {
      const { step } = request.params;
      if (!/^\d{1,15}$/.test(step)) throw validationError([{ loc: ['path', 'step'], msg: 'must be a step number (0, 1, 2, …)', type: 'int_parsing' }]);
      const { fileName, size, archive } = await services.exports.adapterArchive(request.principal, request.params.model_id, Number(step));
      reply.type('application/x-tar').header('content-length', size).header('content-disposition', `attachment; filename="${fileName}"`);
      return reply.send(archive);
    },
  );

  app.post<{ Params: { model_id: string }; Body: ModelForkBody }>(
    '/v1/preview/models/:model_id/fork',
    { schema: { summary: 'A new model starting from a checkpoint of this one (latest unless step is given)', body: ModelForkBody, response: { 200: ModelResponse } } },
    async (request) => services.lineage.fork(request.principal, request.params.model_id, request.body),
  );

  // The archive arrives as the raw body and is streamed to disk by the service, never buffered here.
  app.addContentTypeParser(['application/x-tar', 'application/octet-stream'], (_request, payload, done) => done(null, payload));
  app.post<{ Querystring: ModelImportQuery; Body: Readable }>(
    '/v1/preview/models/import',
    { schema: { summary: 'Create a model from a PEFT adapter tar (the request body, application/x-tar)', querystring: ModelImportQuery, response: { 200: ModelResponse } } },
    async (request) => {
      if (typeof (request.body as Readable | undefined)?.pipe !== 'function') throw new AppError('unsupported_media_type', 'Send the adapter archive as the body with content-type: application/x-tar');
      return services.imports.import(request.principal, request.query, request.body);
    },
  );

  app.post<{ Params: { model_id: string }; Body: LogBody }>(
    '/v1/preview/models/:model_id/log',
    { schema: { body: LogBody, response: { 200: LogResponse } } },
    async (request) => services.trajectories.log(request.principal, request.params.model_id, request.body),
  );
}
