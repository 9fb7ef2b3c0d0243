/**
 * The W&B API paths the `wandb` SDK calls on its base URL (WANDB_BASE_URL = this server): `/graphql`, a run's
 * `file_stream`, the upload URLs this server issues, and the SDK's telemetry probe (refused, which turns it off).
 * The SDK sends its key as HTTP Basic auth (user `api`), so these routes authenticate themselves, before the body is
 * read as on every authenticated route; every failure is answered in W&B's shape, `{"errors": [{"message": ...}]}`,
 * which the SDK quotes to the user.
 */
import type { Readable } from 'node:stream';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../errors.ts';
import { toAppError } from '../http/errors.ts';
import type { AuthService, Principal } from '../services/auth-service.ts';
import { executeWandbGraphql } from './graphql.ts';
import type { WandbServices } from './index.ts';
import { FILE_STREAM_PATH, GraphqlRequest, TELEMETRY_PATH, UPLOAD_PATH_PREFIX } from './schemas.ts';

const OPEN = { config: { public: true } };

function wandbErrorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const appError = toAppError(error);
  if (appError.status >= 500) request.log.error({ err: error }, 'W&B API request failed');
  if (appError.code === 'unauthorized') reply.header('WWW-Authenticate', 'Basic realm="W&B API"');
  return reply
    .status(appError.status)
    .send({ errors: [{ message: appError.message, extensions: { code: appError.code } }] });
}

/** The key of W&B's basic auth (`api:<key>`) or of a bearer token. */
async function principalOf(auth: AuthService, request: FastifyRequest): Promise<Principal> {
  const header = request.headers.authorization ?? '';
  const basic = /^Basic\s+(\S+)\s*$/i.exec(header);
  const key = basic
    ? Buffer.from(basic[1], 'base64')
        .toString('utf8')
        .replace(/^[^:]*:/, '')
    : /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1];
  if (!key)
    throw new AppError(
      'unauthorized',
      'Missing API key: set WANDB_API_KEY to a key of this server (the wandb SDK sends it as basic auth)',
    );
  return auth.authenticateKey(key);
}

export function registerWandbRoutes(app: FastifyInstance, auth: AuthService, wandb: WandbServices): void {
  app.register(async (api) => {
    api.setErrorHandler(wandbErrorHandler);
    // The key first, as on every other route: a caller without one hears 401, not what was wrong with its body.
    api.addHook('onRequest', async (request) => {
      request.principal = await principalOf(auth, request);
      await wandb.tokens.ready();
    });
    api.post<{ Body: GraphqlRequest }>('/graphql', { ...OPEN, schema: { body: GraphqlRequest } }, async (request) => {
      const context = { principal: request.principal, wandb, baseUrl: `${request.protocol}://${request.host}` };
      return executeWandbGraphql(context, request.body, (error) =>
        request.log.error({ err: error }, 'W&B GraphQL resolver failed'),
      );
    });
    // A run's history, system metrics and console output: the history of a run named after a model is kept in its
    // run history (history.ts); the rest is read and dropped.
    api.post<{ Params: { entity: string; project: string; run: string } }>(FILE_STREAM_PATH, OPEN, async (request) => {
      await wandb.history.receive(request.principal, request.params, request.body);
      return {};
    });
  });
  app.register(async (telemetry) => {
    telemetry.setErrorHandler(wandbErrorHandler);
    telemetry.post(TELEMETRY_PATH, OPEN, async () => {
      throw new AppError('not_found', 'This server collects no W&B SDK telemetry');
    });
  });
  app.register(async (uploads) => {
    uploads.setErrorHandler(wandbErrorHandler);
    // The body is the file itself, whatever its content type (the SDK sends none): the service streams it.
    uploads.removeAllContentTypeParsers();
    uploads.addContentTypeParser('*', (_request, payload, done) => done(null, payload));
    uploads.put<{ Params: { token: string } }>(`${UPLOAD_PATH_PREFIX}:token`, OPEN, async (request, reply) => {
      await wandb.tokens.ready();
      const target = wandb.tokens.verify(request.params.token);
      const length =
        request.headers['content-length'] === undefined ? undefined : Number(request.headers['content-length']);
      await wandb.artifacts.receive(target, (request.body as Readable | undefined) ?? request.raw, length);
      return reply.status(200).send();
    });
  });
}
