/** Logging trajectories against a model: durable storage per (model, split, step) and metrics on the current checkpoint. */

import type { FullTrajectoryGroup } from '../api/models.ts';
import type { Clock } from '../clock.ts';
import { validationError } from '../errors.ts';
import { newId } from '../ids.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { TrajectoryRepository } from '../store/trajectory-repository.ts';
import { type PreparedLog, type TrajectoryRows, trajectoryRows } from '../trajectories/rows.ts';
import type { Principal } from './auth-service.ts';
import type { ModelService } from './model-service.ts';

/** One point of a model's reward-spread history: the step trained from, and the mean in-group std dev of its rewards. */
export interface SpreadPoint {
  step: number;
  value: number;
}

export class TrajectoryService {
  constructor(
    private readonly modelService: ModelService,
    private readonly models: ModelRepository,
    private readonly trajectories: TrajectoryRepository,
    private readonly clock: Clock,
  ) {}

  /** Stores a prepared `/log` request (trajectories/rows.ts) at the model's current step; its metrics go on the checkpoint. */
  async log(
    principal: Principal,
    modelId: string,
    prepared: PreparedLog,
  ): Promise<{ step: number; metrics: Record<string, number> }> {
    const model = await this.modelService.getOwned(principal, modelId);
    if (prepared.problems.length > 0) throw validationError(prepared.problems);
    const { split, metrics } = prepared;
    const checkpoint = await this.models.latestCheckpoint(model.id);
    const step = checkpoint?.step ?? model.last_step;
    await this.storeRows(model.id, split, step, prepared.rows);
    if (checkpoint) await this.models.setCheckpointMetrics(checkpoint.id, { ...checkpoint.metrics, ...metrics });
    await this.trajectories.insertRunMetrics(
      model.run_id,
      step,
      `log:${split}`,
      metrics,
      this.clock.now().toISOString(),
    );
    return { step, metrics };
  }

  /**
   * The model's reward-spread history, for `scale_learning_rate_by_reward_std_dev`: each RL job's `reward_std_dev`
   * at the step it trained from (one before the step it wrote), and each logged `train/reward_std_dev` at its step.
   */
  async rewardSpreadHistory(modelId: string): Promise<SpreadPoint[]> {
    const model = await this.models.findById(modelId);
    if (!model) return [];
    return (await this.trajectories.runMetrics(model.run_id)).flatMap((row) => {
      const jobSpread = row.source === 'train' ? row.metrics.reward_std_dev : undefined;
      if (typeof jobSpread === 'number' && Number.isFinite(jobSpread))
        return [{ step: row.step - 1, value: jobSpread }];
      const logged = row.source === 'log:train' ? row.metrics['train/reward_std_dev'] : undefined;
      return typeof logged === 'number' && Number.isFinite(logged) ? [{ step: row.step, value: logged }] : [];
    });
  }

  /** Stores trajectories as given (extra keys kept) with ART's defaults in place, so the dashboard shows what was meant. */
  async store(modelId: string, split: string, step: number, groups: FullTrajectoryGroup[]): Promise<void> {
    await this.storeRows(modelId, split, step, trajectoryRows(groups));
  }

  private async storeRows(modelId: string, split: string, step: number, rows: TrajectoryRows): Promise<void> {
    const createdAt = this.clock.now().toISOString();
    await this.trajectories.insertMany(rows.data.length, (row) => ({
      id: newId(),
      model_id: modelId,
      split,
      step,
      group_index: rows.groupIndex[row],
      trajectory_index: rows.trajectoryIndex[row],
      reward: rows.reward[row],
      data: rows.data[row],
      created_at: createdAt,
    }));
  }
}
