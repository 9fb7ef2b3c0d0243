/** buildApp(deps): the Fastify instance with every route, hook and error mapping, not listening (tests use inject). */
import Fastify, { type FastifyInstance } from 'fastify';
import type { Config } from './config.ts';
import type { Services } from './context.ts';
import { newId } from './ids.ts';
import { registerAuth } from './http/auth.ts';
import { errorHandler, sendError } from './http/errors.ts';
import { registerHealthRoutes } from './http/health-routes.ts';
import { registerModelRoutes } from './http/models-routes.ts';
import { registerTrainingJobRoutes } from './http/training-jobs-routes.ts';
import { registerChatRoutes } from './http/chat-routes.ts';
import { registerArtifactRoutes } from './http/artifact-routes.ts';
import { registerIdentityRoutes } from './http/identity-routes.ts';
import { registerDashboardRoutes } from './http/dashboard-routes.ts';
import multipart from '@fastify/multipart';
import { AppError } from './errors.ts';

export interface AppDeps {
  config: Pick<Config, 'bodyLimitBytes' | 'logLevel' | 'artifactMaxFileBytes' | 'maxInFlightChat'>;
  services: Services;
}

export function buildApp({ config, services }: AppDeps): FastifyInstance {
  const app = Fastify({
    logger: { level: config.logLevel },
    bodyLimit: config.bodyLimitBytes,
    requestIdHeader: 'x-request-id',
    genReqId: () => newId(),
    ajv: { customOptions: { allErrors: true, coerceTypes: false, removeAdditional: false, useDefaults: true } },
    routerOptions: { ignoreTrailingSlash: false },
  });

  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
    // openai-python (ART's client) sends `content-type: application/json` on a DELETE without a body: there an
    // empty body means no body, not malformed JSON.
    const length = request.headers['content-length'];
    if (request.method === 'DELETE' && (length === undefined || length === '0') && !request.headers['transfer-encoding']) delete request.headers['content-type'];
  });
  app.addHook('onSend', async (_request, reply, payload) => {
    const timing = reply.getHeader('server-timing');
    reply.header('server-timing', `${timing ? `${String(timing)}, ` : ''}total;dur=${reply.elapsedTime.toFixed(3)}`);
    return payload;
  });
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler((request, reply) => sendError(request, reply, new AppError('not_found', `No route for ${request.method} ${request.url.split('?')[0]}`)));

  registerAuth(app, services.auth);
  registerHealthRoutes(app, services.health);
  registerModelRoutes(app, services);
  registerTrainingJobRoutes(app, services.trainingJobs);
  registerChatRoutes(app, services.chat, config.maxInFlightChat);
  registerIdentityRoutes(app);
  registerDashboardRoutes(app, services.dashboard);
  app.register(async (scope) => {
    // preservePath: file names arrive as sent, so a name with a path in it is refused rather than silently cut.
    await scope.register(multipart, { preservePath: true, limits: { fileSize: config.artifactMaxFileBytes, files: 64, fields: 16 } });
    registerArtifactRoutes(scope, services.artifacts);
  });
  return app;
}
