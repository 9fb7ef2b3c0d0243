/** The API-key check every endpoint but health runs first (a bearer key, or the Tinker SDK's X-API-Key); it leaves the principal on the request. */
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
    request.principal = await auth.authenticate(
      request.headers.authorization ?? tinkerKey(request.headers['x-api-key']),
    );
  });
}

/** The Tinker SDK's key prefix: it refuses keys without it, so its users are given `tml-<key>`. */
export const TINKER_KEY_PREFIX = 'tml-';

/** The Tinker SDK sends `X-API-Key: tml-<key>`: the same key as a bearer. */
function tinkerKey(header: string | string[] | undefined): string | undefined {
  if (typeof header !== 'string') return undefined;
  return `Bearer ${header.startsWith(TINKER_KEY_PREFIX) ? header.slice(TINKER_KEY_PREFIX.length) : header}`;
}
