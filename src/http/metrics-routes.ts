/**
 * GET /metrics in Prometheus' text format, and the hook that times every request by its route template
 * (`/v1/preview/models/:id`, never the raw URL, so label cardinality stays bounded by the route table).
 */
import type { FastifyInstance } from 'fastify';
import type { Metrics } from '../metrics.ts';

export function registerMetricsHook(app: FastifyInstance, metrics: Metrics): void {
  // Timed on the socket's close rather than in onResponse, which a hijacked reply (an SSE stream) never reaches.
  app.addHook('onRequest', async (request, reply) => {
    // Unmatched URLs share one label: a scanner probing random paths must not grow the series without bound.
    const route = request.routeOptions.url ?? 'unmatched';
    reply.raw.once('close', () =>
      metrics.observeHttp(request.method, route, reply.raw.statusCode, reply.elapsedTime / 1000),
    );
  });
}

export function registerMetricsRoute(app: FastifyInstance, metrics: Metrics, isPublic: boolean): void {
  const text = { schema: { type: 'string' } };
  const schema = {
    summary: 'Prometheus metrics',
    response: {
      200: { description: 'Prometheus text exposition format 0.0.4', content: { [metrics.contentType]: text } },
    },
  };
  app.get('/metrics', { config: { public: isPublic }, schema }, async (_request, reply) => {
    reply.type(metrics.contentType);
    return metrics.metrics();
  });
}
