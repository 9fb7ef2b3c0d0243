/** `sft`: upload the data, start an SFT job on a model, and follow its events with a progress bar until it ends. */
import type { ListPage } from '../api/lists.ts';
import type { ModelResponse } from '../api/models.ts';
import type { JobCreated, TypedTrainingJobEvent } from '../api/training-jobs.ts';
import { resolveModelId, type ServiceClient } from './client.ts';
import { ProgressBar } from './progress.ts';
import { checkSftData, describeProblems } from './sft-check.ts';
import { uploadFiles } from './upload.ts';

export async function followJob(
  client: ServiceClient,
  jobId: string,
  pollMs = 1000,
): Promise<{ ok: boolean; message: string }> {
  let after = '';
  let bar: ProgressBar | undefined;
  for (;;) {
    const page = await client.json<ListPage<TypedTrainingJobEvent>>(
      'GET',
      `/v1/preview/training-jobs/${jobId}/events?limit=100${after ? `&after=${after}` : ''}`,
    );
    for (const event of page.data) {
      after = event.id;
      if (event.type === 'training_started') bar = new ProgressBar('train', Number(event.data.num_sequences));
      if (event.type === 'gradient_step')
        bar?.update(Number(event.data.step), `loss ${Number(event.data.loss ?? NaN).toFixed(4)}`);
      if (event.type === 'training_ended') {
        bar?.done();
        return { ok: true, message: `checkpoint step ${String(event.data.step)}` };
      }
      if (event.type === 'training_failed') return { ok: false, message: String(event.data.error_message) };
    }
    if (!page.has_more) await new Promise((resolve) => setTimeout(resolve, pollMs));
  }
}

export async function runSft(
  client: ServiceClient,
  options: { modelId: string; inputs: string[]; batchSize?: number; learningRate?: number },
): Promise<{ ok: boolean; message: string; jobId: string; url: string }> {
  const check = await checkSftData(options.inputs);
  if (check.problems.length)
    throw new Error(`the SFT data has problems (nothing was uploaded):\n${describeProblems(check)}`);
  const modelId = await resolveModelId(client, options.modelId);
  const model = await findModel(client, modelId);
  const artifact = await uploadFiles(
    client,
    { entity: model.entity, project: model.project, name: `${model.name}-sft-data` },
    options.inputs,
  );
  const config = {
    ...(options.batchSize ? { batch_size: options.batchSize } : {}),
    ...(options.learningRate ? { learning_rate: options.learningRate } : {}),
  };
  const job = await client.json<JobCreated>('POST', '/v1/preview/sft-training-jobs', {
    model_id: modelId,
    training_data_url: artifact.url,
    config,
  });
  const outcome = await followJob(client, job.id);
  return { ...outcome, jobId: job.id, url: artifact.url };
}

function findModel(client: ServiceClient, modelId: string): Promise<{ entity: string; project: string; name: string }> {
  return client.json<ModelResponse>('GET', `/v1/preview/models/${modelId}`);
}
