/** The bearer-key check every endpoint but health runs first; it leaves the principal on the request. */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { AuthService, Principal } from '../services/auth-service.ts';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal;
  }
  interface FastifyContextConfig {
    public?: boolean;
  }
}

export function registerAuth(app: FastifyInstance, auth: AuthService): void {
  app.decorateRequest('principal', null as unknown as Principal);
  app.addHook('onRequest', async (request: FastifyRequest) => {
    if (request.routeOptions.config?.public) return;
    request.principal = await auth.authenticate(request.headers.authorization);
  });
}
