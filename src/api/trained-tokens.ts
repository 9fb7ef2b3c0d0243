/** Wire schema of a trajectory's trained tokens, as the dashboard's trajectory detail carries them. */
import { type Static, Type } from '@sinclair/typebox';

/**
 * Null when the trajectory was not trained (zero advantage, another split, a job from before this was kept)
 * or fell beyond the job's cap. Parallel arrays over the trained tokens in training order.
 */
export const TrainedTokens = Type.Union([
  Type.Object({
    advantage: Type.Number({ description: 'The normalised advantage the job trained these tokens with' }),
    token_ids: Type.Array(Type.Integer()),
    sampler_logprobs: Type.Array(Type.Union([Type.Number(), Type.Null()])),
    trainer_logprobs: Type.Array(Type.Number(), {
      description: "The trainer's logprob of each token after the job's last step",
    }),
  }),
  Type.Null(),
]);
export type TrainedTokensView = Static<typeof TrainedTokens>;
