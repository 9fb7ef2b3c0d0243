/**
 * What a retention policy is and which steps it keeps: pure rules with no storage, so configuration can check
 * the server default with the same rules the service applies (retention.ts).
 */
import type { RetentionPolicy } from '../api/models.ts';

// Re-exported for the configuration, which reads the server default.
export type { RetentionPolicy };

export const KEEP_EVERYTHING: RetentionPolicy = {
  keep_last: null,
  keep_best: null,
  best_metric: null,
  best_mode: 'max',
};

/** The policy's problems as FastAPI-shaped field errors (empty when it is valid). */
export function checkPolicy(policy: RetentionPolicy, loc: string[] = ['body']) {
  const problems = [];
  if (policy.keep_last !== null && policy.keep_last < 1) {
    problems.push({
      loc: [...loc, 'keep_last'],
      msg: 'keep_last 0 would delete the latest checkpoint, which is always kept; use 1 or more, or null for no limit',
      type: 'value_error',
    });
  }
  if (policy.keep_best !== null && policy.keep_best < 1)
    problems.push({ loc: [...loc, 'keep_best'], msg: 'keep_best must be 1 or more, or null', type: 'value_error' });
  if (policy.keep_best !== null && !policy.best_metric)
    problems.push({
      loc: [...loc, 'best_metric'],
      msg: 'keep_best needs the metric that ranks checkpoints',
      type: 'missing',
    });
  return problems;
}

/** The steps a policy keeps: the latest, the last N, the best K (checkpoints without the metric never rank). */
export function retainedSteps(
  checkpoints: { step: number; metrics: Record<string, unknown> }[],
  policy: RetentionPolicy,
): Set<number> {
  const steps = checkpoints.map((c) => c.step).sort((a, b) => a - b);
  if (policy.keep_last === null && policy.keep_best === null) return new Set(steps);
  const keep = new Set(steps.slice(-Math.max(1, policy.keep_last ?? 1)));
  if (policy.keep_best !== null && policy.best_metric) {
    const metric = policy.best_metric;
    const ranked = checkpoints
      .filter((c) => typeof c.metrics[metric] === 'number' && Number.isFinite(c.metrics[metric]))
      .sort(
        (a, b) =>
          ((b.metrics[metric] as number) - (a.metrics[metric] as number)) * (policy.best_mode === 'max' ? 1 : -1) ||
          b.step - a.step,
      );
    for (const c of ranked.slice(0, policy.keep_best)) keep.add(c.step);
  }
  return keep;
}
