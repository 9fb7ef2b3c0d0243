/** /v1/health (liveness) and /v1/system-check (every dependency, 503 when one fails); both without a key. */
import type { FastifyInstance } from 'fastify';
import { HealthResponse, SystemCheckResponse } from '../api/health.ts';
import type { HealthService } from '../services/health-service.ts';

export function registerHealthRoutes(app: FastifyInstance, health: HealthService): void {
  app.get('/v1/health', { config: { public: true }, schema: { response: { 200: HealthResponse } } }, async () => ({
    status: 'ok',
  }));

  app.get(
    '/v1/system-check',
    { config: { public: true }, schema: { response: { 200: SystemCheckResponse, 503: SystemCheckResponse } } },
    async (_request, reply) => {
      const { ok, report } = await health.systemCheck();
      return reply.status(ok ? 200 : 503).send(report);
    },
  );
}
