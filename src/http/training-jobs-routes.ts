/** /v1/preview/training-jobs: submit RL jobs, read a job, follow its events, cancel it. */
import type { FastifyInstance } from 'fastify';
import { listEnvelope, toListPage } from '../api/lists.ts';
import { JobCreated, RlJobBody, SftJobBody, TrainingJob, TrainingJobEvent } from '../api/training-jobs.ts';
import type { TrainingJobService } from '../training/job-service.ts';
import { RL_JOB_BODY, RL_JOB_TARGET } from './body-tasks.ts';
import { preparedBody } from './large-body.ts';
import { queryInteger, queryString } from './query.ts';

export function registerTrainingJobRoutes(app: FastifyInstance, jobs: TrainingJobService): void {
  app.post<{ Body: RlJobBody }>(
    '/v1/preview/training-jobs',
    { schema: { body: RlJobBody, response: { 200: JobCreated } }, config: { largeBody: true } },
    async (request) =>
      jobs.submitRl(request.principal, await preparedBody(request, RL_JOB_TARGET, undefined), (context) =>
        preparedBody(request, RL_JOB_BODY, context),
      ),
  );

  app.post<{ Body: SftJobBody }>(
    '/v1/preview/sft-training-jobs',
    { schema: { body: SftJobBody, response: { 200: JobCreated } } },
    async (request) => jobs.submitSft(request.principal, request.body),
  );

  app.get<{ Params: { id: string } }>(
    '/v1/preview/training-jobs/:id',
    { schema: { response: { 200: TrainingJob } } },
    async (request) => jobs.get(request.principal, request.params.id),
  );

  app.post<{ Params: { id: string } }>(
    '/v1/preview/training-jobs/:id/cancel',
    { schema: { response: { 200: TrainingJob } } },
    async (request) => jobs.cancel(request.principal, request.params.id),
  );

  app.get<{ Params: { id: string }; Querystring: Record<string, unknown> }>(
    '/v1/preview/training-jobs/:id/events',
    { schema: { response: { 200: listEnvelope(TrainingJobEvent) } } },
    async (request) => {
      const after = queryString(request.query, 'after');
      const limit = queryInteger(request.query, 'limit', 20, 1, 100);
      const page = await jobs.events(request.principal, request.params.id, after, limit);
      return toListPage(page);
    },
  );
}
