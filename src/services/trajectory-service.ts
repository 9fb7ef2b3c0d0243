/** Logging trajectories against a model: durable storage per (model, split, step) and metrics on the current checkpoint. */
import { validationError } from '../errors.ts';
import type { Clock } from '../clock.ts';
import { newId } from '../ids.ts';
import type { LogBody, TrajectoryGroup } from '../api/models.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { TrajectoryRepository } from '../store/trajectory-repository.ts';
import type { Principal } from './auth-service.ts';
import type { ModelService } from './model-service.ts';
import { checkTrajectoryGroups } from './trajectory-shape.ts';
import { splitMetrics } from './trajectory-metrics.ts';

export class TrajectoryService {
  constructor(
    private readonly modelService: ModelService,
    private readonly models: ModelRepository,
    private readonly trajectories: TrajectoryRepository,
    private readonly clock: Clock,
  ) {}

  async log(principal: Principal, modelId: string, body: LogBody): Promise<{ step: number; metrics: Record<string, number> }> {
    const model = await this.modelService.getOwned(principal, modelId);
    const problems = checkTrajectoryGroups(body.trajectory_groups, ['body', 'trajectory_groups']);
    if (problems.length > 0) throw validationError(problems);

    const checkpoint = await this.models.latestCheckpoint(model.id);
    const step = checkpoint?.step ?? model.last_step;
    const metrics = splitMetrics(body.split, body.trajectory_groups);
    await this.store(model.id, body.split, step, body.trajectory_groups);
    if (checkpoint) await this.models.setCheckpointMetrics(checkpoint.id, { ...checkpoint.metrics, ...metrics });
    await this.trajectories.insertRunMetrics(model.run_id, step, `log:${body.split}`, metrics, this.clock.now().toISOString());
    return { step, metrics };
  }

  /** Stores trajectories as given (extra keys kept), so the dashboard shows exactly what was sent. */
  async store(modelId: string, split: string, step: number, groups: TrajectoryGroup[]): Promise<void> {
    const createdAt = this.clock.now().toISOString();
    await this.trajectories.insertMany(
      groups.flatMap((group, groupIndex) =>
        group.trajectories.map((trajectory, trajectoryIndex) => ({
          id: newId(),
          model_id: modelId,
          split,
          step,
          group_index: groupIndex,
          trajectory_index: trajectoryIndex,
          reward: trajectory.reward,
          data: JSON.stringify(trajectory),
          created_at: createdAt,
        })),
      ),
    );
  }
}
