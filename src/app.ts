/** buildApp(deps): the Fastify instance with every route, hook and error mapping, not listening (tests use inject). */

import multipart from '@fastify/multipart';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Config, HttpLimits } from './config.ts';
import type { Services } from './context.ts';
import { AppError, excerpt } from './errors.ts';
import { registerArtifactRoutes } from './http/artifact-routes.ts';
import { registerAuth } from './http/auth.ts';
import { registerPortabilityRoutes } from './http/checkpoint-portability-routes.ts';
import { registerDashboardRoutes } from './http/dashboard-routes.ts';
import { errorHandler, sendError } from './http/errors.ts';
import { registerHealthRoutes } from './http/health-routes.ts';
import { registerIdentityRoutes } from './http/identity-routes.ts';
import { registerJsonBody } from './http/json-body.ts';
import { registerMetricsHook, registerMetricsRoute } from './http/metrics-routes.ts';
import { registerModelRoutes } from './http/models-routes.ts';
import { registerOpenAiModelRoutes } from './http/openai-models-routes.ts';
import { registerOpenApi } from './http/openapi.ts';
import { registerServingRoutes } from './http/serving-routes.ts';
import { registerTrainingJobRoutes } from './http/training-jobs-routes.ts';
import { MAX_PARAM_LENGTH, registerTransportLimits, transportOptions } from './http/transport.ts';
import { boundedValidatorCompiler } from './http/validation.ts';
import { newId } from './ids.ts';
import { registerTinkerRoutes } from './tinker/routes.ts';
import { PACKAGE_VERSION } from './version.ts';
import { registerWandbRoutes } from './wandb/routes.ts';

export interface AppDeps {
  config: Pick<Config, 'bodyLimitBytes' | 'logLevel' | 'artifactMaxFileBytes' | 'maxInFlightChat' | 'metricsPublic'> &
    HttpLimits;
  services: Services;
}

export function buildApp({ config, services }: AppDeps): FastifyInstance {
  const app = Fastify({
    logger: { level: config.logLevel },
    bodyLimit: config.bodyLimitBytes,
    requestIdHeader: 'x-request-id',
    genReqId: () => newId(),
    // toAppError words the answer from the capped problem list; Fastify's own message joined every ajv error.
    schemaErrorFormatter: (errors, dataVar) => new Error(`${dataVar}: ${errors.length} validation errors`),
    routerOptions: { ignoreTrailingSlash: false, maxParamLength: MAX_PARAM_LENGTH },
    ...transportOptions(config),
    frameworkErrors: errorHandler,
  });
  app.setValidatorCompiler(boundedValidatorCompiler());
  registerJsonBody(app, services.bodyWorker);
  registerTransportLimits(app, config);

  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
    // No id, name or query value can hold a NUL, and PostgreSQL refuses even to compare one: say so on both databases.
    if (/%00/.test(request.url))
      throw new AppError(
        'bad_request',
        'The URL holds a NUL character (%00); no id, name or query value can contain one',
      );
  });
  app.addHook('onSend', async (_request, reply, payload) => {
    const timing = reply.getHeader('server-timing');
    reply.header('server-timing', `${timing ? `${String(timing)}, ` : ''}total;dur=${reply.elapsedTime.toFixed(3)}`);
    return payload;
  });
  app.setErrorHandler(errorHandler);
  registerMetricsHook(app, services.metrics);
  registerOpenApi(app, PACKAGE_VERSION);
  app.setNotFoundHandler((request, reply) =>
    sendError(
      request,
      reply,
      new AppError('not_found', `No route for ${request.method} ${excerpt(request.url.split('?')[0])}`),
    ),
  );

  registerAuth(app, services.auth);
  // Routes are declared in a plugin so that they come after the API description's generator has loaded.
  app.register(async (api) => {
    registerHealthRoutes(api, services.health);
    registerModelRoutes(api, services);
    registerPortabilityRoutes(api, services);
    registerTrainingJobRoutes(api, services.trainingJobs);
    registerServingRoutes(api, services.doors, config.maxInFlightChat, services.metrics);
    registerOpenAiModelRoutes(api, services.served);
    registerIdentityRoutes(api);
    registerDashboardRoutes(api, services.dashboard);
    registerMetricsRoute(api, services.metrics, config.metricsPublic);
    registerTinkerRoutes(api, services.tinker);
  });
  app.register(async (scope) => {
    // preservePath: file names arrive as sent, so a name with a path in it is refused rather than silently cut.
    await scope.register(multipart, {
      preservePath: true,
      limits: { fileSize: config.artifactMaxFileBytes, files: 64, fields: 16 },
    });
    registerArtifactRoutes(scope, services.artifacts);
  });
  registerWandbRoutes(app, services.auth, services.wandb);
  return app;
}
