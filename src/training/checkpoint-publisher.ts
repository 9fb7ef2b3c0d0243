/**
 * Publishes a model's next checkpoint: what the trainer writes into a temporary folder of the checkpoint store is
 * renamed into place, then the checkpoint row, then the adapter loaded from the store into the sampler, so the
 * checkpoint is servable before anyone reports it. A crash at any point leaves no listed half-written checkpoint.
 * Training jobs (session.ts) and Tinker training clients (tinker/trainer.ts) both save this way.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Clock } from '../clock.ts';
import { servingAdapterKey } from '../engine/adapter-keys.ts';
import { JobError } from '../errors.ts';
import { newId } from '../ids.ts';
import type { BaseModelRuntime } from '../services/base-model-runtime.ts';
import { ADAPTER_CONFIG, publicAdapterConfig } from '../services/checkpoint-export.ts';
import type { ModelService } from '../services/model-service.ts';
import type { RetentionService } from '../services/retention.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { TrajectoryRepository } from '../store/trajectory-repository.ts';

/** Where a checkpoint's metrics go in the run history: at its own step, at the step its client named (ART's SFT `metric_logging`), or nowhere. */
export type HistoryStep = 'own' | number | null;

export class CheckpointPublisher {
  constructor(
    private readonly models: ModelRepository,
    private readonly modelService: ModelService,
    private readonly trajectories: TrajectoryRepository,
    private readonly runtime: BaseModelRuntime,
    private readonly clock: Clock,
    private readonly retention: RetentionService,
  ) {}

  /**
   * The model's next step from what `save` writes into a folder (the adapter, and whatever else belongs to the
   * checkpoint): renamed into place, recorded, loaded in the sampler, then the model's retention applied (`deleted`:
   * the steps it removed). The checkpoint always carries `metrics`; `historyAt` says where the run history gets them.
   */
  async publish(
    modelId: string,
    baseId: string,
    metrics: Record<string, number>,
    save: (folder: string) => Promise<unknown>,
    historyAt: HistoryStep = 'own',
  ): Promise<{ step: number; checkpointId: string; folder: string; deleted: number[] }> {
    const current = await this.models.findById(modelId);
    if (!current) throw new JobError('model_deleted', 'The model was deleted while its job ran');
    const step = current.last_step + 1;
    const checkpointsDir = path.join(this.modelService.modelFolder(modelId), 'checkpoints');
    const temporary = path.join(checkpointsDir, `.tmp-${newId()}`);
    const final = path.join(checkpointsDir, String(step));
    await save(temporary);
    // The engine names the base by the folder it loaded; a checkpoint names it by the id users know it by.
    await fs.writeFile(
      path.join(temporary, ADAPTER_CONFIG),
      `${JSON.stringify(await publicAdapterConfig(temporary, baseId), null, 2)}\n`,
    );
    await fs.rm(final, { recursive: true, force: true });
    await fs.rename(temporary, final);
    const checkpointId = newId();
    const now = this.clock.now().toISOString();
    await this.models.insertCheckpoint({
      id: checkpointId,
      model_id: modelId,
      step,
      metrics: JSON.stringify(metrics),
      adapter_path: final,
      created_at: now,
    });
    const historyStep = historyAt === 'own' ? step : historyAt;
    if (historyStep !== null)
      await this.trajectories.insertRunMetrics(current.run_id, historyStep, 'train', metrics, now);
    await this.runtime
      .sampler()
      .request('ensure_adapter', { adapter: servingAdapterKey(checkpointId), base: baseId, path: final });
    return { step, checkpointId, folder: final, deleted: await this.retention.apply(modelId) };
  }
}
