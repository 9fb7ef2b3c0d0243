/**
 * A training session on one model's adapter in the trainer engine: opened from the latest checkpoint
 * (adapter and optimizer state) or a fresh no-op adapter, and committed as the next step through the
 * checkpoint publisher (checkpoint-publisher.ts), which makes it servable before the job reports it.
 * Also the opening every runner shares (`openJob`): the payload read and checked, the session, the chat template.
 */
import crypto from 'node:crypto';
import type { JobRow } from '../api/training-jobs.ts';
import { jobAdapterKey, servingAdapterKey } from '../engine/adapter-keys.ts';
import type { Engine } from '../engine/ops.ts';
import { JobError } from '../errors.ts';
import type { JobQueue } from '../jobs/queue.ts';
import type { RunContext, RunResult } from '../jobs/worker.ts';
import type { BaseModelRuntime, LoadedBase } from '../services/base-model-runtime.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { ModelIdentity } from '../trajectories/exchanges.ts';
import type { CheckpointPublisher, HistoryStep } from './checkpoint-publisher.ts';
import { loraInit } from './defaults.ts';

export interface TrainingSession {
  base: LoadedBase;
  /** Whose adapter this is, by its served name's parts: a captured trajectory trains the exchanges that name it. */
  model: ModelIdentity;
  engine: Engine;
  adapter: string;
  /** The step the trajectories were sampled from: the latest checkpoint when the session opened. */
  fromStep: number;
  /**
   * A checkpoint's adapter as a KL reference: `step` of this model, or of `modelId` (a model of the same base that
   * the job's submitter may use, checked at submission); null for the base model (step 0 or an adapter-less step).
   */
  reference(
    step: number,
    modelId?: string,
  ): Promise<{ reference_adapter: string; reference_adapter_path: string } | null>;
  commit(metrics: Record<string, number>, historyAt?: HistoryStep): Promise<RunResult>;
}

export class CheckpointWriter {
  constructor(
    private readonly models: ModelRepository,
    private readonly runtime: BaseModelRuntime,
    private readonly publisher: CheckpointPublisher,
  ) {}

  /** `emit` records the job's events: here, the checkpoints retention deleted after this one was written. */
  async open(modelId: string, emit: RunContext['emit'] = async () => {}): Promise<TrainingSession> {
    const model = await this.models.findById(modelId);
    if (!model) throw new JobError('model_deleted', 'The model was deleted before its job ran');
    const base = await this.runtime.loadForTraining(model.base_model);
    const engine = this.runtime.trainer();
    const adapter = jobAdapterKey(model.id);
    const latest = await this.models.latestCheckpoint(model.id);
    // Always start from what is on disk: a checkpoint may have been deleted since this adapter was resident.
    await engine.request('drop_adapter', { adapter });
    if (latest?.adapterPath) {
      await engine.request('ensure_adapter', { adapter, base: base.id, path: latest.adapterPath });
    } else {
      const seed = crypto.createHash('sha256').update(model.id).digest().readUInt32LE(0);
      await engine.request('ensure_adapter', {
        adapter,
        base: base.id,
        init: loraInit(seed, Object.keys(base.loraTargets ?? {})),
      });
    }

    return {
      base,
      model: { entity: model.entity_name, project: model.project, name: model.name },
      engine,
      adapter,
      fromStep: latest?.step ?? model.last_step,
      reference: async (step, modelId = model.id) => {
        const checkpoint = await this.models.findCheckpointByStep(modelId, step);
        const which = modelId === model.id ? `step ${step}` : `step ${step} of model ${modelId}`;
        if (!checkpoint && step !== 0)
          throw new JobError(
            'kl_reference_missing',
            `The KL reference ${which} has no checkpoint (it was deleted or does not exist yet)`,
          );
        return checkpoint?.adapterPath
          ? { reference_adapter: servingAdapterKey(checkpoint.id), reference_adapter_path: checkpoint.adapterPath }
          : null;
      },
      commit: async (metrics, historyAt) => {
        const { step, checkpointId, deleted } = await this.publisher.publish(
          model.id,
          base.id,
          metrics,
          (folder) => engine.request('save_adapter', { adapter, path: folder }),
          historyAt,
        );
        if (deleted.length)
          await emit('checkpoints_deleted', { steps: deleted, reason: 'retention', after_step: step });
        // Saved: the trainer need not hold the adapter and its optimizer moments until the model's next job, which
        // loads them from the checkpoint anyway (a trainer that cannot drop it now has lost it already).
        await engine.request('drop_adapter', { adapter }).catch(() => undefined);
        return { step, checkpointId };
      },
    };
  }
}

/** What a runner starts with: its checked payload and a session on the model's adapter (whose base has a chat template). */
export interface OpenedJob<P> {
  payload: P;
  session: TrainingSession;
}

/**
 * The opening RL and SFT runners share: read the job's payload through its kind's reader (which checks it), open
 * the session, and refuse a base without a chat template, since every training row is rendered with one.
 */
export async function openJob<P>(
  deps: { queue: Pick<JobQueue, 'readPayload'>; checkpoints: CheckpointWriter },
  job: JobRow,
  context: RunContext,
  reading: { read(raw: unknown): P; renders: string },
): Promise<OpenedJob<P>> {
  const payload = reading.read(await deps.queue.readPayload(job));
  const session = await deps.checkpoints.open(job.model_id, context.emit);
  if (!session.base.template)
    throw new JobError(
      'no_chat_template',
      `Base model ${session.base.id} has no chat template to render ${reading.renders} with`,
    );
  return { payload, session };
}
