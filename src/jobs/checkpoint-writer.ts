/**
 * A training session on one model's adapter in the trainer engine: opened from the latest checkpoint
 * (adapter and optimizer state) or a fresh no-op adapter, and committed as the next step — files written
 * by the trainer into a temporary folder of the checkpoint store, renamed into place, then the checkpoint
 * row, then the adapter loaded from the store into the sampler engines, so the checkpoint is servable
 * before the job reports it. A crash at any point leaves no listed half-written checkpoint.
 */
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Clock } from '../clock.ts';
import { newId } from '../ids.ts';
import type { Engine } from '../engine/client.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { TrajectoryRepository } from '../store/trajectory-repository.ts';
import type { BaseModelRuntime, LoadedBase } from '../services/base-model-runtime.ts';
import type { ModelService } from '../services/model-service.ts';
import { JobError, type RunContext, type RunResult } from './worker.ts';
import type { RetentionService } from '../services/retention.ts';
import { ADAPTER_CONFIG, publicAdapterConfig } from '../services/checkpoint-export.ts';

export const LORA_DEFAULTS = {
  rank: 8,
  alpha: 16,
  target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
};

/** The engine key of a servable checkpoint's adapter. */
export const servingAdapterKey = (checkpointId: string) => `ckpt:${checkpointId}`;

export interface TrainingSession {
  base: LoadedBase;
  engine: Engine;
  adapter: string;
  /** The step the trajectories were sampled from: the latest checkpoint when the session opened. */
  fromStep: number;
  /** The engine adapter of an earlier step as a KL reference; null for the base model (step 0 or an adapter-less step). */
  reference(step: number): Promise<{ reference_adapter: string; reference_adapter_path: string } | null>;
  commit(metrics: Record<string, number>): Promise<RunResult>;
}

export class CheckpointWriter {
  constructor(
    private readonly models: ModelRepository,
    private readonly modelService: ModelService,
    private readonly trajectories: TrajectoryRepository,
    private readonly runtime: BaseModelRuntime,
    private readonly clock: Clock,
    private readonly retention: RetentionService,
  ) {}

  /** `emit` records the job's events: here, the checkpoints retention deleted after this one was written. */
  async open(modelId: string, emit: RunContext['emit'] = async () => {}): Promise<TrainingSession> {
    const model = await this.models.findById(modelId);
    if (!model) throw new JobError('model_deleted', 'The model was deleted before its job ran');
    const base = await this.runtime.loadForTraining(model.base_model);
    const engine = this.runtime.trainer();
    const adapter = `train:${model.id}`;
    const latest = await this.models.latestCheckpoint(model.id);
    // Always start from what is on disk: a checkpoint may have been deleted since this adapter was resident.
    await engine.dropAdapter({ adapter });
    if (latest?.adapterPath) {
      await engine.ensureAdapter({ adapter, base: base.id, path: latest.adapterPath });
    } else {
      const seed = crypto.createHash('sha256').update(model.id).digest().readUInt32LE(0);
      await engine.ensureAdapter({ adapter, base: base.id, init: { ...LORA_DEFAULTS, seed } });
    }

    return {
      base,
      engine,
      adapter,
      fromStep: latest?.step ?? Number(model.last_step),
      reference: async (step) => {
        const checkpoint = await this.models.findCheckpointByStep(model.id, step);
        if (!checkpoint && step !== 0) throw new JobError('kl_reference_missing', `The KL reference step ${step} has no checkpoint (it was deleted or does not exist yet)`);
        return checkpoint?.adapterPath ? { reference_adapter: servingAdapterKey(checkpoint.id), reference_adapter_path: checkpoint.adapterPath } : null;
      },
      commit: async (metrics) => {
        const { step, checkpointId } = await this.publish(model.id, base.id, metrics, (folder) => engine.saveAdapter({ adapter, path: folder }));
        const deleted = await this.retention.apply(model.id);
        if (deleted.length) await emit('checkpoints_deleted', { steps: deleted, reason: 'retention', after_step: step });
        return { step, checkpointId };
      },
    };
  }

  /**
   * The model's next step from what `save` writes into a folder (the adapter, and whatever else belongs to the
   * checkpoint): renamed into place, recorded, and loaded in the sampler. Jobs and the Tinker API both save this way.
   */
  async publish(modelId: string, baseId: string, metrics: Record<string, number>, save: (folder: string) => Promise<unknown>): Promise<{ step: number; checkpointId: string; folder: string }> {
    const current = await this.models.findById(modelId);
    if (!current) throw new JobError('model_deleted', 'The model was deleted while its job ran');
    const step = Number(current.last_step) + 1;
    const checkpointsDir = path.join(this.modelService.modelFolder(modelId), 'checkpoints');
    const temporary = path.join(checkpointsDir, `.tmp-${newId()}`);
    const final = path.join(checkpointsDir, String(step));
    await save(temporary);
    // The engine names the base by the folder it loaded; a checkpoint names it by the id users know it by.
    await fs.writeFile(path.join(temporary, ADAPTER_CONFIG), `${JSON.stringify(await publicAdapterConfig(temporary, baseId), null, 2)}\n`);
    await fs.rm(final, { recursive: true, force: true });
    await fs.rename(temporary, final);
    const checkpointId = newId();
    const now = this.clock.now().toISOString();
    await this.models.insertCheckpoint({ id: checkpointId, model_id: modelId, step, metrics: JSON.stringify(metrics), adapter_path: final, created_at: now });
    await this.trajectories.insertRunMetrics(current.run_id, step, 'train', metrics, now);
    await this.runtime.sampler().ensureAdapter({ adapter: servingAdapterKey(checkpointId), base: baseId, path: final });
    return { step, checkpointId, folder: final };
  }
}
