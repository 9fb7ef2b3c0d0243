/**
 * Checkpoint retention: per model (or the server default) keep the last N checkpoints and/or the best K by one
 * metric, as ART's `delete_checkpoints(best_checkpoint_metric)` keeps the best and the latest. The latest is
 * always kept: a running job trains from it and every model name without `:stepN` serves it, so a policy that
 * would delete it is refused. Applied after every new checkpoint and whenever a policy is set.
 */
import type { RetentionPolicy } from '../api/models.ts';
import { validationError } from '../errors.ts';
import type { ModelRepository, ModelRow } from '../store/model-repository.ts';
import type { Principal } from './auth-service.ts';
import type { ModelService } from './model-service.ts';

// Re-exported for the configuration, which reads the server default.
export type { RetentionPolicy };

export const KEEP_EVERYTHING: RetentionPolicy = { keep_last: null, keep_best: null, best_metric: null, best_mode: 'max' };

/** The policy's problems as FastAPI-shaped field errors (empty when it is valid). */
export function checkPolicy(policy: RetentionPolicy, loc: string[] = ['body']) {
  const problems = [];
  if (policy.keep_last !== null && policy.keep_last < 1) {
    problems.push({ loc: [...loc, 'keep_last'], msg: 'keep_last 0 would delete the latest checkpoint, which is always kept; use 1 or more, or null for no limit', type: 'value_error' });
  }
  if (policy.keep_best !== null && policy.keep_best < 1) problems.push({ loc: [...loc, 'keep_best'], msg: 'keep_best must be 1 or more, or null', type: 'value_error' });
  if (policy.keep_best !== null && !policy.best_metric) problems.push({ loc: [...loc, 'best_metric'], msg: 'keep_best needs the metric that ranks checkpoints', type: 'missing' });
  return problems;
}

/** The steps a policy keeps: the latest, the last N, the best K (checkpoints without the metric never rank). */
export function retainedSteps(checkpoints: { step: number; metrics: Record<string, unknown> }[], policy: RetentionPolicy): Set<number> {
  const steps = checkpoints.map((c) => c.step).sort((a, b) => a - b);
  if (policy.keep_last === null && policy.keep_best === null) return new Set(steps);
  const keep = new Set(steps.slice(-Math.max(1, policy.keep_last ?? 1)));
  if (policy.keep_best !== null && policy.best_metric) {
    const metric = policy.best_metric;
    const ranked = checkpoints
      .filter((c) => typeof c.metrics[metric] === 'number' && Number.isFinite(c.metrics[metric]))
      .sort((a, b) => ((b.metrics[metric] as number) - (a.metrics[metric] as number)) * (policy.best_mode === 'max' ? 1 : -1) || b.step - a.step);
    for (const c of ranked.slice(0, policy.keep_best)) keep.add(c.step);
  }
  return keep;
}

export class RetentionService {
  constructor(
    private readonly models: ModelService,
    private readonly repository: ModelRepository,
    private readonly serverDefault: RetentionPolicy,
  ) {}

  policyOf(model: Pick<ModelRow, 'retention'>): { policy: RetentionPolicy; source: 'model' | 'server' } {
    return model.retention ? { policy: model.retention, source: 'model' } : { policy: this.serverDefault, source: 'server' };
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
