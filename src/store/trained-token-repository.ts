/** The trained tokens of RL jobs' trajectories, one row per trajectory, replaced as a whole per (model, step). */
import type { Kysely } from 'kysely';
import type { TrainedTokensView } from '../api/trained-tokens.ts';
import type { Database } from './schema.ts';

/** A trajectory's trained tokens as the dashboard shows them (parallel arrays in training order, and the advantage). */
type TrainedTokens = NonNullable<TrainedTokensView>;
/** What the `tokens` column holds: the arrays without the advantage, which has its own column. */
type TrainedTokenArrays = Omit<TrainedTokens, 'advantage'>;

export interface TrainedTrajectory extends TrainedTokens {
  groupIndex: number;
  trajectoryIndex: number;
}

export class TrainedTokenRepository {
  constructor(private readonly db: Kysely<Database>) {}

  /** A retried job writes the same step again: the step's rows are replaced, never duplicated. */
  async replaceStep(modelId: string, step: number, trajectories: TrainedTrajectory[]): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await trx.deleteFrom('trained_tokens').where('model_id', '=', modelId).where('step', '=', step).execute();
      for (const trajectory of trajectories) {
        const { groupIndex, trajectoryIndex, advantage, ...arrays } = trajectory;
        await trx
          .insertInto('trained_tokens')
          .values({
            model_id: modelId,
            step,
            group_index: groupIndex,
            trajectory_index: trajectoryIndex,
            advantage,
            tokens: JSON.stringify(arrays),
          })
          .execute();
      }
    });
  }

  async find(
    modelId: string,
    step: number,
    groupIndex: number,
    trajectoryIndex: number,
  ): Promise<TrainedTokens | undefined> {
    const row = await this.db
      .selectFrom('trained_tokens')
      .select(['advantage', 'tokens'])
      .where('model_id', '=', modelId)
      .where('step', '=', step)
      .where('group_index', '=', groupIndex)
      .where('trajectory_index', '=', trajectoryIndex)
      .executeTakeFirst();
    return row && { advantage: row.advantage, ...(JSON.parse(row.tokens) as TrainedTokenArrays) };
  }
}
