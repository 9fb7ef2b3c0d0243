/** /v1/preview/artifacts: multipart upload of a new version, version listing, file download. */
import type { FastifyInstance } from 'fastify';
import { ArtifactVersion, ArtifactVersionList } from '../api/artifacts.ts';
import { AppError, validationError } from '../errors.ts';
import type { ArtifactService } from '../services/artifact-service.ts';
import { multipartFiles } from './multipart-files.ts';

type Target = { entity: string; project: string; name: string };

const MULTIPART_BOUNDARY = /;\s*boundary=\S/i;

export function registerArtifactRoutes(app: FastifyInstance, artifacts: ArtifactService): void {
  app.post<{ Params: Target }>(
    '/v1/preview/artifacts/:entity/:project/:name',
    { schema: { response: { 200: ArtifactVersion } } },
    async (request) => {
      if (!request.isMultipart()) throw new AppError('unsupported_media_type', 'Upload files as multipart/form-data');
      if (!MULTIPART_BOUNDARY.test(request.headers['content-type'] ?? '')) {
        throw new AppError(
          'bad_request',
          'The multipart/form-data content type has no boundary parameter (content-type: multipart/form-data; boundary=...)',
        );
      }
      return artifacts.upload(request.principal, request.params, multipartFiles(request));
    },
  );

  app.get<{ Params: Target }>(
    '/v1/preview/artifacts/:entity/:project/:name',
    { schema: { response: { 200: ArtifactVersionList } } },
    async (request) => ({
      object: 'list',
      data: await artifacts.versions(request.principal, request.params),
    }),
  );

  app.get<{ Params: { entity: string; project: string; nameVersion: string; file: string } }>(
    '/v1/preview/artifacts/:entity/:project/:nameVersion/files/:file',
    async (request, reply) => {
      const match = /^(.+):(v(\d+)|latest)$/.exec(request.params.nameVersion);
      if (!match)
        throw validationError([
          { loc: ['path', 'name'], msg: 'expected {name}:v{K} or {name}:latest', type: 'value_error' },
        ]);
      const { stream, size } = await artifacts.download(request.principal, {
        entity: request.params.entity,
        project: request.params.project,
        name: match[1],
        version: match[3] === undefined ? 'latest' : Number(match[3]),
        file: request.params.file,
      });
      reply.header('content-type', 'application/octet-stream').header('content-length', size);
      return reply.send(stream);
    },
  );
}
