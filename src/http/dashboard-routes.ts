/**
 * The dashboard: its static page and assets at `/` (no key needed: the page holds no data and asks for a
 * key), and the read-only `/v1/dashboard/...` endpoints it reads beside the public API, behind the same
 * bearer auth. Thin: parse the query, call the service, shape the list envelope.
 */

import { promisify } from 'node:util';
import zlib from 'node:zlib';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { buildDashboard, type DashboardBundle } from '../../web/build.ts';
import {
  JobConfig,
  JobListItem,
  MetricRow,
  ModelSummary,
  Overview,
  TrajectoryDetail,
  TrajectorySteps,
  TrajectorySummary,
} from '../api/dashboard.ts';
import { listEnvelope, toListPage } from '../api/lists.ts';
import { SPLIT_PATTERN } from '../api/models.ts';
import { JOB_STATUSES, type JobStatus } from '../api/training-vocabulary.ts';
import { AppError, validationError } from '../errors.ts';
import type { DashboardService } from '../services/dashboard-service.ts';
import { queryInteger, queryString } from './query.ts';

const gzipAsync = promisify(zlib.gzip);
const brotliAsync = promisify(zlib.brotliCompress);

type Query = Record<string, unknown>;

/** The page may run only its own script and style, talk only to this server, and never be framed. */
const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

function splitParam(query: Query): string {
  const split = queryString(query, 'split');
  if (split === undefined) throw validationError([{ loc: ['query', 'split'], msg: 'Field required', type: 'missing' }]);
  if (!new RegExp(SPLIT_PATTERN).test(split))
    throw validationError([
      {
        loc: ['query', 'split'],
        msg: `String should match pattern '${SPLIT_PATTERN}'`,
        type: 'string_pattern_mismatch',
      },
    ]);
  return split;
}

function statusesParam(query: Query): JobStatus[] | undefined {
  const raw = queryString(query, 'status');
  if (raw === undefined) return undefined;
  const statuses = raw.split(',').map((status) => status.trim().toUpperCase());
  const unknown = statuses.filter((status) => !JOB_STATUSES.includes(status as JobStatus));
  if (unknown.length > 0) {
    throw validationError([
      {
        loc: ['query', 'status'],
        msg: `Input should be a comma-separated list of ${JOB_STATUSES.join(', ')}`,
        type: 'literal_error',
      },
    ]);
  }
  return statuses as JobStatus[];
}

/** The built dashboard with gzip and brotli copies of every file worth compressing (not source maps). */
interface CompressedBundle {
  bundle: DashboardBundle;
  gzip: Map<string, Buffer>;
  brotli: Map<string, Buffer>;
}

/**
 * Compressed on libuv's thread pool: brotli at its best quality takes seconds for the bundle, which on the event
 * loop would hold every other request (health included) that long. Source maps are left as they are: only a
 * browser's developer tools fetch them, and they are four fifths of the work.
 */
async function compress(built: DashboardBundle): Promise<CompressedBundle> {
  const gzip = new Map<string, Buffer>();
  const brotli = new Map<string, Buffer>();
  await Promise.all(
    [...built.files]
      .filter(([urlPath, file]) => file.body.length >= 1024 && !urlPath.endsWith('.map'))
      .map(async ([urlPath, file]) => {
        gzip.set(urlPath, await gzipAsync(file.body, { level: 9 }));
        brotli.set(urlPath, await brotliAsync(file.body));
      }),
  );
  return { bundle: built, gzip, brotli };
}

/** Builds once and shares the result; a failed build is forgotten so the next request tries again. */
function bundleLoader(app: FastifyInstance, build: () => Promise<DashboardBundle>): () => Promise<CompressedBundle> {
  let bundle: Promise<CompressedBundle> | null = null;
  return () => {
    bundle ??= build()
      .then(async (built) => {
        const compressed = await compress(built);
        app.log.info({ buildMs: Math.round(built.buildMs), files: built.files.size }, 'dashboard built');
        return compressed;
      })
      .catch((error: unknown) => {
        bundle = null;
        throw error;
      });
    return bundle;
  };
}

/** One file of the bundle, compressed as the client accepts, with the page's security headers on the HTML. */
function sendFile(loaded: CompressedBundle, urlPath: string, request: FastifyRequest, reply: FastifyReply) {
  const file = loaded.bundle.files.get(urlPath);
  if (!file) throw new AppError('not_found', `No dashboard file ${urlPath}`);
  const accepts = String(request.headers['accept-encoding'] ?? '');
  const brotli = /\bbr\b/.test(accepts) ? loaded.brotli.get(urlPath) : undefined;
  const gzip = !brotli && /\bgzip\b/.test(accepts) ? loaded.gzip.get(urlPath) : undefined;
  reply
    .header('content-type', file.contentType)
    .header('cache-control', file.immutable ? 'public, max-age=31536000, immutable' : 'no-cache')
    .header('x-content-type-options', 'nosniff')
    .header('vary', 'accept-encoding');
  if (file.contentType.startsWith('text/html')) {
    reply
      .header('content-security-policy', CONTENT_SECURITY_POLICY)
      .header('referrer-policy', 'no-referrer')
      .header('x-frame-options', 'DENY');
  }
  if (brotli) return reply.header('content-encoding', 'br').send(brotli);
  if (gzip) return reply.header('content-encoding', 'gzip').send(gzip);
  return reply.send(file.body);
}

/** Serves the built page and assets, compressed when the client accepts it. */
function staticFiles(app: FastifyInstance, build: () => Promise<DashboardBundle>) {
  const load = bundleLoader(app, build);
  const serve = async (urlPath: string, request: FastifyRequest, reply: FastifyReply) => {
    let loaded: Awaited<ReturnType<typeof load>>;
    try {
      loaded = await load();
    } catch (error) {
      request.log.error({ err: error }, 'dashboard build failed');
      throw new AppError('internal', `The dashboard could not be built: ${(error as Error).message}`);
    }
    return sendFile(loaded, urlPath, request, reply);
  };
  const open = { config: { public: true } };
  app.get('/', open, (request, reply) => serve('/', request, reply));
  app.get('/index.html', open, (request, reply) => serve('/', request, reply));
  app.get('/favicon.svg', open, (request, reply) => serve('/favicon.svg', request, reply));
  app.get<{ Params: { file: string } }>('/assets/:file', open, (request, reply) =>
    serve(`/assets/${request.params.file}`, request, reply),
  );
  // Build while the server starts listening, so the first visitor does not wait for it.
  app.addHook('onListen', async () => {
    load().catch((error: unknown) => app.log.error({ err: error }, 'dashboard build failed'));
  });
}

export function registerDashboardRoutes(
  app: FastifyInstance,
  dashboard: DashboardService,
  options: { build?: () => Promise<DashboardBundle> } = {},
): void {
  staticFiles(app, options.build ?? (() => buildDashboard()));
  app.get('/v1/dashboard/overview', { schema: { response: { 200: Overview } } }, async (request) =>
    dashboard.overview(request.principal),
  );
  modelRoutes(app, dashboard);
  trajectoryRoutes(app, dashboard);
  jobRoutes(app, dashboard);
}

function modelRoutes(app: FastifyInstance, dashboard: DashboardService): void {
  app.get<{ Querystring: Query }>(
    '/v1/dashboard/models',
    { schema: { response: { 200: listEnvelope(ModelSummary) } } },
    async (request) =>
      toListPage(
        await dashboard.listModels(request.principal, {
          project: queryString(request.query, 'project'),
          after: queryString(request.query, 'after'),
          limit: queryInteger(request.query, 'limit', 100, 1, 500),
        }),
      ),
  );

  app.get<{ Params: { model_id: string } }>(
    '/v1/dashboard/models/:model_id',
    { schema: { response: { 200: ModelSummary } } },
    async (request) => dashboard.getModel(request.principal, request.params.model_id),
  );

  app.get<{ Params: { model_id: string }; Querystring: Query }>(
    '/v1/dashboard/models/:model_id/metrics',
    { schema: { response: { 200: listEnvelope(MetricRow) } } },
    async (request) =>
      toListPage(
        await dashboard.metrics(request.principal, request.params.model_id, {
          after: queryString(request.query, 'after'),
          limit: queryInteger(request.query, 'limit', 1000, 1, 5000),
        }),
      ),
  );
}

function trajectoryRoutes(app: FastifyInstance, dashboard: DashboardService): void {
  app.get<{ Params: { model_id: string } }>(
    '/v1/dashboard/models/:model_id/trajectory-steps',
    { schema: { response: { 200: TrajectorySteps } } },
    async (request) => dashboard.trajectorySteps(request.principal, request.params.model_id),
  );

  app.get<{ Params: { model_id: string }; Querystring: Query }>(
    '/v1/dashboard/models/:model_id/trajectories',
    { schema: { response: { 200: listEnvelope(TrajectorySummary) } } },
    async (request) =>
      toListPage(
        await dashboard.trajectories(request.principal, request.params.model_id, {
          split: splitParam(request.query),
          step:
            request.query.step === undefined
              ? undefined
              : queryInteger(request.query, 'step', 0, 0, Number.MAX_SAFE_INTEGER),
          after: queryString(request.query, 'after'),
          limit: queryInteger(request.query, 'limit', 50, 1, 200),
        }),
      ),
  );

  app.get<{ Params: { model_id: string; trajectory_id: string } }>(
    '/v1/dashboard/models/:model_id/trajectories/:trajectory_id',
    { schema: { response: { 200: TrajectoryDetail } } },
    async (request) => dashboard.trajectory(request.principal, request.params.model_id, request.params.trajectory_id),
  );
}

function jobRoutes(app: FastifyInstance, dashboard: DashboardService): void {
  app.get<{ Params: { job_id: string } }>(
    '/v1/dashboard/jobs/:job_id/config',
    { schema: { response: { 200: JobConfig } } },
    async (request) => dashboard.jobConfig(request.principal, request.params.job_id),
  );

  app.get<{ Querystring: Query }>(
    '/v1/dashboard/jobs',
    { schema: { response: { 200: listEnvelope(JobListItem) } } },
    async (request) =>
      toListPage(
        await dashboard.jobs(request.principal, {
          modelId: queryString(request.query, 'model_id'),
          statuses: statusesParam(request.query),
          after: queryString(request.query, 'after'),
          limit: queryInteger(request.query, 'limit', 50, 1, 200),
        }),
      ),
  );
}
