/**
 * The learning-rate rule, its one home: a finite number >= 0, for RL, SFT (each entry of a schedule) and Tinker's
 * `optim_step` alike. 0 is a rate, not a mistake: ART's schedules decay to 0 on their last batch, and a step at 0
 * still advances the optimizer's moments. (engine/wire.py refuses a negative rate on its side of the wire.) The rate
 * a job gets when it names none is in defaults.ts; what RL multiplies it by at each step, in rl/rate-multipliers.ts.
 */
import { Type } from '@sinclair/typebox';

export const LEARNING_RATE_MINIMUM = 0;
export const LearningRate = Type.Number({ minimum: LEARNING_RATE_MINIMUM });

/** Why `value` breaks the learning-rate rule, or null when it keeps it. */
export function learningRateProblem(value: number): string | null {
  return Number.isFinite(value) && value >= LEARNING_RATE_MINIMUM
    ? null
    : `must be a finite number >= ${LEARNING_RATE_MINIMUM}, got ${value}`;
}
