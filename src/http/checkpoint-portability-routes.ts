/**
 * Checkpoints that travel and are kept on purpose: export as a PEFT adapter tar, import one as a new model, fork a
 * model from a checkpoint, and each model's retention policy. Thin: parse, call, shape.
 */
import type { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import {
  AdapterArchive,
  ModelForkBody,
  ModelImportQuery,
  ModelResponse,
  RetentionBody,
  RetentionResponse,
} from '../api/models.ts';
import { AppError, validationError } from '../errors.ts';
import type { AdapterImporter } from '../services/adapter-import.ts';
import type { CheckpointExporter } from '../services/checkpoint-export.ts';
import type { ModelLineage } from '../services/model-lineage.ts';
import type { RetentionService } from '../services/retention.ts';
import { KEEP_EVERYTHING } from '../services/retention-policy.ts';

export interface PortabilityServices {
  exports: CheckpointExporter;
  lineage: ModelLineage;
  imports: AdapterImporter;
  retention: RetentionService;
}

export function registerPortabilityRoutes(app: FastifyInstance, services: PortabilityServices): void {
  app.get<{ Params: { model_id: string; step: string } }>(
    '/v1/preview/models/:model_id/checkpoints/:step/adapter',
    {
      schema: {
        summary: 'Download a checkpoint as a PEFT adapter (tar: adapter_config.json, adapter_model.safetensors)',
        response: { 200: AdapterArchive },
      },
    },
    async (request, reply) => {
      const { step } = request.params;
      if (!/^\d{1,15}$/.test(step))
        throw validationError([
          { loc: ['path', 'step'], msg: 'must be a step number (0, 1, 2, …)', type: 'int_parsing' },
        ]);
      const { fileName, size, archive } = await services.exports.adapterArchive(
        request.principal,
        request.params.model_id,
        Number(step),
      );
      reply
        .type('application/x-tar')
        .header('content-length', size)
        .header('content-disposition', `attachment; filename="${fileName}"`);
      return reply.send(archive);
    },
  );

  app.post<{ Params: { model_id: string }; Body: ModelForkBody }>(
    '/v1/preview/models/:model_id/fork',
    {
      schema: {
        summary: 'A new model starting from a checkpoint of this one (latest unless step is given)',
        body: ModelForkBody,
        response: { 200: ModelResponse },
      },
    },
    async (request) => services.lineage.fork(request.principal, request.params.model_id, request.body),
  );

  registerImportRoute(app, services.imports);

  app.get<{ Params: { model_id: string } }>(
    '/v1/preview/models/:model_id/retention',
    { schema: { response: { 200: RetentionResponse } } },
    async (request) => services.retention.get(request.principal, request.params.model_id),
  );
  app.put<{ Params: { model_id: string }; Body: RetentionBody }>(
    '/v1/preview/models/:model_id/retention',
    {
      schema: {
        summary: 'Set the checkpoint retention policy and apply it now (the latest checkpoint is always kept)',
        body: RetentionBody,
        response: { 200: RetentionResponse },
      },
    },
    async (request) =>
      services.retention.set(request.principal, request.params.model_id, { ...KEEP_EVERYTHING, ...request.body }),
  );
}

/**
 * The archive arrives as the raw body and is streamed to disk by the service, never buffered here; the parser
 * lives in a scope of its own so that other routes still refuse these content types with a 415.
 */
function registerImportRoute(app: FastifyInstance, imports: AdapterImporter): void {
  app.register(async (scope) => {
    scope.addContentTypeParser(['application/x-tar', 'application/octet-stream'], (_request, payload, done) =>
      done(null, payload),
    );
    scope.post<{ Querystring: ModelImportQuery; Body: Readable }>(
      '/v1/preview/models/import',
      {
        schema: {
          summary: 'Create a model from a PEFT adapter tar (the request body, application/x-tar)',
          querystring: ModelImportQuery,
          response: { 200: ModelResponse },
        },
      },
      async (request) => {
        if (typeof (request.body as Readable | undefined)?.pipe !== 'function')
          throw new AppError(
            'unsupported_media_type',
            'Send the adapter archive as the body with content-type: application/x-tar',
          );
        return imports.import(request.principal, request.query, request.body);
      },
    );
  });
}
