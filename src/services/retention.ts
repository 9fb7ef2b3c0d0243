/**
 * Checkpoint retention: per model (or the server default) keep the last N checkpoints and/or the best K by one
 * metric, as ART's `delete_checkpoints(best_checkpoint_metric)` keeps the best and the latest. The latest is
 * always kept: a running job trains from it and every model name without `:stepN` serves it, so a policy that
 * would delete it is refused. Applied after every new checkpoint and whenever a policy is set.
 */
import type { ModelRow, RetentionPolicy } from '../api/models.ts';
import { validationError } from '../errors.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { Principal } from './auth-service.ts';
import type { ModelService } from './model-service.ts';
import { checkPolicy, retainedSteps } from './retention-policy.ts';

export class RetentionService {
  constructor(
    private readonly models: ModelService,
    private readonly repository: ModelRepository,
    private readonly serverDefault: RetentionPolicy,
  ) {}

  policyOf(model: Pick<ModelRow, 'retention'>): { policy: RetentionPolicy; source: 'model' | 'server' } {
    return model.retention
      ? { policy: model.retention, source: 'model' }
      : { policy: this.serverDefault, source: 'server' };
  }

  async get(principal: Principal, modelId: string) {
    return this.policyOf(await this.models.getOwned(principal, modelId));
  }

  /** Sets a model's policy and applies it at once; a policy that would delete the latest is refused before anything changes. */
  async set(principal: Principal, modelId: string, policy: RetentionPolicy) {
    const model = await this.models.getOwned(principal, modelId);
    const problems = checkPolicy(policy);
    if (problems.length) throw validationError(problems);
    await this.repository.setRetention(model.id, policy);
    return { policy, source: 'model' as const, deleted_steps: await this.apply(model.id) };
  }

  /** Deletes what the model's policy does not keep; answers the deleted steps. */
  async apply(modelId: string): Promise<number[]> {
    const model = await this.repository.findById(modelId);
    if (!model) return [];
    const { policy } = this.policyOf(model);
    const checkpoints = await this.repository.checkpointSummaries(model.id);
    const keep = retainedSteps(checkpoints, policy);
    const doomed = checkpoints.map((c) => c.step).filter((step) => !keep.has(step));
    return doomed.length ? this.models.removeCheckpoints(model.id, doomed) : [];
  }
}
