/**
 * The Tinker REST API under /api/v1, as the official `tinker` SDK calls it. Thin: parse (JSON, or protobuf for
 * forward_backward), call the Tinker services, shape; `retrieve_future` answers protobuf where the SDK asks.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../errors.ts';
import { queryInteger } from '../http/query.ts';
import type { FutureOutcome } from './futures.ts';
import type { TinkerServices } from './index.ts';
import { decodeForwardBackward, encodeForwardBackwardOutput, encodeSampleResponse } from './proto.ts';
import type { SampleResult } from './sampling.ts';
import {
  ARCHIVE_DOWNLOAD_ROUTE,
  CheckpointTtlBody,
  CLIENT_CONFIG,
  CLIENT_DYNAMIC_CONFIG,
  ClientConfigBody,
  CreateModelBody,
  CreateSamplingSessionBody,
  CreateSessionBody,
  EXTERNAL_FILE_ROUTE,
  ForwardBackwardJsonBody,
  ForwardJsonBody,
  forwardBackwardFromJson,
  LoadWeightsBody,
  ModelIdBody,
  OptimStepBody,
  RetrieveFutureBody,
  SampleBody,
  SaveWeightsBody,
  SaveWeightsExternalBody,
  SessionBody,
  WeightsInfoBody,
} from './schemas.ts';
import type { ForwardBackwardResult } from './training.ts';

const PROTOBUF = 'application/x-protobuf';

export function registerTinkerRoutes(app: FastifyInstance, tinker: TinkerServices): void {
  app.get('/api/v1/healthz', { config: { public: true } }, async () => ({ status: 'ok' }));
  // The SDK fetches this through a one-off client that it drops with its keep-alive connection still open; the
  // garbage collector then closes that client on whichever thread collects it, often the caller's own event loop,
  // which corrupts the SDK loop's socket watch so a later request on a new connection never sees its answer (a 60 s
  // stall, then a retry that may repeat a step). Closing the connection here leaves that client nothing to close.
  app.post<{ Body: ClientConfigBody }>(
    '/api/v1/client/config',
    { schema: { body: ClientConfigBody } },
    async (_request, reply) => {
      reply.header('connection', 'close');
      return CLIENT_CONFIG;
    },
  );
  app.post('/api/v1/client/dynamic_config', async () => CLIENT_DYNAMIC_CONFIG);
  // Telemetry is accepted and dropped: nothing here reads it.
  app.post('/api/v1/telemetry', async () => ({ status: 'accepted' }));
  app.get('/api/v1/get_server_capabilities', async () => tinker.models.capabilities());
  app.post<{ Body: CreateSessionBody }>(
    '/api/v1/create_session',
    { schema: { body: CreateSessionBody } },
    async (request) => tinker.models.createSession(request.principal, request.body),
  );
  app.post<{ Body: SessionBody }>('/api/v1/session_heartbeat', { schema: { body: SessionBody } }, async (request) =>
    tinker.models.heartbeat(request.principal, request.body.session_id),
  );
  app.post<{ Params: { session_id: string } }>('/api/v1/sessions/:session_id/finish', async (request) => {
    await tinker.models.ownedSession(request.principal, request.params.session_id);
    return {};
  });

  registerTrainingRoutes(app, tinker);
  registerSamplingRoutes(app, tinker);
  registerRestRoutes(app, tinker);
  registerCheckpointDownloadRoutes(app, tinker);
}

function registerTrainingRoutes(app: FastifyInstance, tinker: TinkerServices): void {
  app.post<{ Body: CreateModelBody }>(
    '/api/v1/create_model',
    { schema: { body: CreateModelBody } },
    async (request) => {
      return tinker.training.createModel(request.principal, request.body);
    },
  );
  app.post<{ Body: ModelIdBody }>('/api/v1/get_info', { schema: { body: ModelIdBody } }, async (request) =>
    tinker.rest.info(request.principal, request.body.model_id),
  );
  app.post<{ Body: ModelIdBody }>('/api/v1/unload_model', { schema: { body: ModelIdBody } }, async (request) =>
    tinker.training.unload(request.principal, request.body.model_id),
  );
  app.register(async (scope) => {
    // tinker 0.38 sends forward_backward as protobuf (uncompressed: the client config says so); 0.18 sends JSON.
    scope.addContentTypeParser(PROTOBUF, { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
    scope.post(
      '/api/v1/forward_backward',
      { schema: { body: { content: { 'application/json': { schema: ForwardBackwardJsonBody } } } } },
      async (request) => {
        if (!Buffer.isBuffer(request.body)) {
          const body = request.body as ForwardBackwardJsonBody;
          return tinker.training.forwardBackward(
            request.principal,
            forwardBackwardFromJson(body.model_id, body.seq_id, body.forward_backward_input, false),
          );
        }
        if (request.headers['content-encoding'] && request.headers['content-encoding'] !== 'identity')
          throw new AppError('unsupported_media_type', 'forward_backward bodies must not be compressed');
        return tinker.training.forwardBackward(request.principal, decodeForwardBackward(request.body));
      },
    );
  });
  app.post<{ Body: ForwardJsonBody }>('/api/v1/forward', { schema: { body: ForwardJsonBody } }, async (request) =>
    tinker.training.forwardBackward(
      request.principal,
      forwardBackwardFromJson(request.body.model_id, request.body.seq_id, request.body.forward_input, true),
    ),
  );
  app.post<{ Body: OptimStepBody }>('/api/v1/optim_step', { schema: { body: OptimStepBody } }, async (request) =>
    tinker.training.optimStep(request.principal, request.body),
  );
  app.post<{ Body: SaveWeightsBody }>('/api/v1/save_weights', { schema: { body: SaveWeightsBody } }, async (request) =>
    tinker.training.save(request.principal, request.body, false),
  );
  app.post<{ Body: SaveWeightsBody }>(
    '/api/v1/save_weights_for_sampler',
    { schema: { body: SaveWeightsBody } },
    async (request) => tinker.training.save(request.principal, request.body, true),
  );
  app.post<{ Body: LoadWeightsBody }>('/api/v1/load_weights', { schema: { body: LoadWeightsBody } }, async (request) =>
    tinker.training.load(request.principal, request.body),
  );
  app.post<{ Body: SaveWeightsExternalBody }>(
    '/api/v1/save_weights_external',
    { schema: { body: SaveWeightsExternalBody } },
    async (request) => tinker.training.saveExternal(request.principal, request.body),
  );
}

function registerSamplingRoutes(app: FastifyInstance, tinker: TinkerServices): void {
  app.post<{ Body: CreateSamplingSessionBody }>(
    '/api/v1/create_sampling_session',
    { schema: { body: CreateSamplingSessionBody } },
    async (request) => tinker.sampling.createSession(request.principal, request.body),
  );
  app.get<{ Params: { sampler_id: string } }>('/api/v1/samplers/:sampler_id', async (request) =>
    tinker.sampling.describeSession(request.principal, request.params.sampler_id),
  );
  app.post<{ Body: SampleBody }>('/api/v1/asample', { schema: { body: SampleBody } }, async (request) =>
    tinker.sampling.sample(request.principal, request.body),
  );
  app.post<{ Body: RetrieveFutureBody }>(
    '/api/v1/retrieve_future',
    { schema: { body: RetrieveFutureBody } },
    async (request, reply) =>
      answerFuture(request, reply, await tinker.futures.retrieve(request.principal, request.body.request_id)),
  );
}

/** Pending: "try again" (the SDK polls at once, so the service already waited). Failed: the SDK's error shape. */
function answerFuture(request: FastifyRequest, reply: FastifyReply, outcome: FutureOutcome): unknown {
  if (outcome.status === 'pending')
    return { type: 'try_again', request_id: (request.body as RetrieveFutureBody).request_id, queue_state: 'active' };
  if (outcome.status === 'failed') return { error: outcome.error, category: outcome.category };
  const protobuf = (request.headers.accept ?? '').includes(PROTOBUF);
  if (outcome.kind === 'sample') {
    const result = outcome.result as SampleResult;
    if (protobuf)
      return reply
        .type(PROTOBUF)
        .send(
          Buffer.from(
            encodeSampleResponse(result.sequences, result.prompt_logprobs?.map((value) => value ?? Number.NaN) ?? null),
          ),
        );
    return result;
  }
  if (outcome.kind === 'forward' || outcome.kind === 'forward_backward') {
    const result = outcome.result as ForwardBackwardResult;
    const outputs = result.outputs.map((output) => ({
      logprobs: output.logprobs,
      elementwise_loss: output.elementwise_loss,
    }));
    if (protobuf) return reply.type(PROTOBUF).send(Buffer.from(encodeForwardBackwardOutput(outputs, result.metrics)));
    const tensor = (values: number[]) => ({ data: values, dtype: 'float32', shape: [values.length] });
    return {
      loss_fn_output_type: 'ArrayRecord',
      loss_fn_outputs: outputs.map((output) => ({
        logprobs: tensor(output.logprobs),
        elementwise_loss: tensor(output.elementwise_loss),
      })),
      metrics: result.metrics,
    };
  }
  return outcome.result;
}

function registerRestRoutes(app: FastifyInstance, tinker: TinkerServices): void {
  app.post<{ Body: WeightsInfoBody }>('/api/v1/weights_info', { schema: { body: WeightsInfoBody } }, async (request) =>
    tinker.rest.weightsInfo(request.principal, request.body.tinker_path),
  );
  app.get<{ Querystring: Record<string, unknown> }>('/api/v1/training_runs', async (request) =>
    tinker.rest.trainingRuns(
      request.principal,
      queryInteger(request.query, 'offset', 0, 0, Number.MAX_SAFE_INTEGER),
      queryInteger(request.query, 'limit', 20, 1, 1000),
    ),
  );
  app.get<{ Querystring: Record<string, unknown> }>('/api/v1/checkpoints', async (request) =>
    tinker.rest.userCheckpoints(
      request.principal,
      queryInteger(request.query, 'offset', 0, 0, Number.MAX_SAFE_INTEGER),
      queryInteger(request.query, 'limit', 100, 1, 1000),
    ),
  );
  app.get<{ Params: { run_id: string } }>('/api/v1/training_runs/:run_id', async (request) =>
    tinker.rest.trainingRun(request.principal, request.params.run_id),
  );
  app.get<{ Params: { run_id: string } }>('/api/v1/training_runs/:run_id/checkpoints', async (request) =>
    tinker.rest.checkpoints(request.principal, request.params.run_id),
  );
  app.delete<{ Params: { run_id: string; '*': string } }>(
    '/api/v1/training_runs/:run_id/checkpoints/*',
    async (request, reply) => {
      await tinker.rest.deleteCheckpoint(request.principal, request.params.run_id, request.params['*']);
      return reply.status(204).send();
    },
  );
}

/** A checkpoint's downloads (the archive, an export's files, their signed URLs) and its TTL. */
function registerCheckpointDownloadRoutes(app: FastifyInstance, tinker: TinkerServices): void {
  // Checkpoint ids hold a slash: `sampler_weights/<name>`, `weights/<name>`, `external_weights/<name>`. The archive
  // call ends in `/archive` and is answered with a redirect to a signed download (the SDK reads the URL from Location
  // and its expiry from Expires); an export's per-file URLs end in `/external_weights_urls`.
  app.get<{ Params: { run_id: string; '*': string } }>(
    '/api/v1/training_runs/:run_id/checkpoints/*',
    async (request, reply) => {
      const [, checkpointId, call] = request.params['*'].match(/^(.+)\/(archive|external_weights_urls)$/) ?? [];
      if (!checkpointId) throw new AppError('not_found', `No such route: GET ${request.url.split('?')[0]}`);
      const origin = `${request.protocol}://${request.host}`;
      const runId = request.params.run_id;
      if (call === 'external_weights_urls') {
        const { urls, expires } = await tinker.archives.externalUrls(request.principal, runId, checkpointId, origin);
        return { urls, expires: expires.toISOString() };
      }
      const signed = await tinker.archives.signedUrl(request.principal, runId, checkpointId, origin);
      return reply.code(302).header('location', signed.url).header('expires', signed.expires.toUTCString()).send();
    },
  );
  app.put<{ Params: { run_id: string; '*': string }; Body: CheckpointTtlBody }>(
    '/api/v1/training_runs/:run_id/checkpoints/*',
    { schema: { body: CheckpointTtlBody } },
    async (request, reply) => {
      const checkpointId = request.params['*'].match(/^(.+)\/ttl$/)?.[1];
      if (!checkpointId) throw new AppError('not_found', `No such route: PUT ${request.url.split('?')[0]}`);
      await tinker.rest.setTtl(request.principal, request.params.run_id, checkpointId);
      return reply.status(204).send();
    },
  );
  app.get<{ Params: { model_id: string; step: string; file: string }; Querystring: Record<string, unknown> }>(
    EXTERNAL_FILE_ROUTE,
    { config: { public: true } },
    async (request, reply) => {
      const { model_id: modelId, step, file } = request.params;
      const { size, body } = await tinker.archives.openExternal(
        modelId,
        step,
        file,
        request.query.expires,
        request.query.signature,
      );
      reply
        .type(file.endsWith('.json') ? 'application/json' : 'application/octet-stream')
        .header('content-length', size);
      return reply.send(body);
    },
  );
  app.get<{ Params: { model_id: string; step: string }; Querystring: Record<string, unknown> }>(
    ARCHIVE_DOWNLOAD_ROUTE,
    { config: { public: true } },
    async (request, reply) => {
      const { fileName, size, archive } = await tinker.archives.open(
        request.params.model_id,
        request.params.step,
        request.query.expires,
        request.query.signature,
      );
      reply
        .type('application/x-tar')
        .header('content-length', size)
        .header('content-disposition', `attachment; filename="${fileName}"`);
      return reply.send(archive);
    },
  );
}
