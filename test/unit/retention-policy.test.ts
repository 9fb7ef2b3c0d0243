/** src/services/retention-policy.ts: which checkpoint steps a policy keeps, and which policies are refused. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkPolicy, KEEP_EVERYTHING, retainedSteps } from '../../src/services/retention-policy.ts';

const checkpoints = [
  { step: 1, metrics: { reward: 0.9 } },
  { step: 2, metrics: { reward: 0.2 } },
  { step: 3, metrics: { reward: 0.9 } },
  { step: 4, metrics: {} },
  { step: 5, metrics: { reward: Number.NaN } },
  { step: 6, metrics: { reward: 0.1 } },
];
const sorted = (steps: Set<number>) => [...steps].sort((a, b) => a - b);

test('no limits keep every step; the latest is always kept', () => {
  assert.deepEqual(sorted(retainedSteps(checkpoints, KEEP_EVERYTHING)), [1, 2, 3, 4, 5, 6]);
  assert.deepEqual(sorted(retainedSteps(checkpoints, { ...KEEP_EVERYTHING, keep_last: 2 })), [5, 6]);
  assert.deepEqual(
    sorted(retainedSteps(checkpoints, { keep_last: null, keep_best: 1, best_metric: 'reward', best_mode: 'min' })),
    [6],
  );
});

test('best K by the metric, ties to the later step, and steps without a finite metric never rank', () => {
  assert.deepEqual(
    sorted(retainedSteps(checkpoints, { keep_last: 1, keep_best: 1, best_metric: 'reward', best_mode: 'max' })),
    [3, 6],
  );
  assert.deepEqual(
    sorted(retainedSteps(checkpoints, { keep_last: 1, keep_best: 2, best_metric: 'reward', best_mode: 'max' })),
    [1, 3, 6],
  );
  assert.deepEqual(
    sorted(retainedSteps(checkpoints, { keep_last: 1, keep_best: 2, best_metric: 'reward', best_mode: 'min' })),
    [2, 6],
  );
  assert.deepEqual(
    sorted(retainedSteps(checkpoints, { keep_last: 1, keep_best: 9, best_metric: 'missing', best_mode: 'max' })),
    [6],
  );
});

test('a policy that would drop the latest, or ranks by no metric, is refused field by field', () => {
  assert.deepEqual(checkPolicy(KEEP_EVERYTHING), []);
  const problems = checkPolicy({ keep_last: 0, keep_best: 0, best_metric: null, best_mode: 'max' }, [
    'body',
    'retention',
  ]);
  assert.deepEqual(
    problems.map((problem) => problem.loc.join('.')),
    ['body.retention.keep_last', 'body.retention.keep_best', 'body.retention.best_metric'],
  );
  assert.deepEqual(
    checkPolicy({ keep_last: null, keep_best: 2, best_metric: null, best_mode: 'max' }).map((problem) => problem.type),
    ['missing'],
  );
});
