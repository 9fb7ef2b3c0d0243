/** GET /v1/preview/me (beyond the interface): which entity a key acts as, and the teams it may act for. */
import type { FastifyInstance } from 'fastify';
import { IdentityResponse } from '../api/identity.ts';

export function registerIdentityRoutes(app: FastifyInstance): void {
  app.get('/v1/preview/me', { schema: { response: { 200: IdentityResponse } } }, async (request) => ({
    entity: request.principal.entityName,
    entities: request.principal.entities.map((entity) => entity.name),
  }));
}
