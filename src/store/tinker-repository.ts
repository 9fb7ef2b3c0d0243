/**
 * All SQL of the Tinker API: sessions, training clients ↔ models, sampling sessions, named checkpoints, futures (with
 * the numbered request each answers), the sequences samples recorded for StableReinforce, and the shared secrets its
 * signed URLs use.
 */
import type { Kysely } from 'kysely';
import type { ModelRow } from '../api/models.ts';
import { toModelRow } from './model-repository.ts';
import type {
  Database,
  TinkerCheckpointTable,
  TinkerFutureTable,
  TinkerModelTable,
  TinkerSampledSequenceTable,
  TinkerSamplingSessionTable,
  TinkerSessionTable,
} from './schema.ts';

export class TinkerRepository {
  constructor(private readonly db: Kysely<Database>) {}

  async insertSession(session: TinkerSessionTable): Promise<void> {
    await this.db.insertInto('tinker_sessions').values(session).execute();
  }

  async findSession(id: string): Promise<TinkerSessionTable | undefined> {
    return this.db.selectFrom('tinker_sessions').selectAll().where('id', '=', id).executeTakeFirst();
  }

  async heartbeat(id: string, now: string): Promise<void> {
    await this.db.updateTable('tinker_sessions').set({ heartbeat_at: now }).where('id', '=', id).execute();
  }

  async insertModel(model: TinkerModelTable): Promise<void> {
    await this.db.insertInto('tinker_models').values(model).execute();
  }

  /** The training client by its Tinker id, or by the id of the model it is. */
  async findModel(idOrModelId: string): Promise<TinkerModelTable | undefined> {
    const row = await this.db
      .selectFrom('tinker_models')
      .selectAll()
      .where((eb) => eb.or([eb('id', '=', idOrModelId), eb('model_id', '=', idOrModelId)]))
      .executeTakeFirst();
    return row && { ...row, seed: Number(row.seed) };
  }

  async insertSamplingSession(session: TinkerSamplingSessionTable): Promise<void> {
    await this.db.insertInto('tinker_sampling_sessions').values(session).execute();
  }

  async findSamplingSession(id: string): Promise<TinkerSamplingSessionTable | undefined> {
    return this.db.selectFrom('tinker_sampling_sessions').selectAll().where('id', '=', id).executeTakeFirst();
  }

  /** Names a step; a name saved again points at the newer step. */
  async nameCheckpoint(checkpoint: TinkerCheckpointTable): Promise<void> {
    await this.db
      .insertInto('tinker_checkpoints')
      .values(checkpoint)
      .onConflict((oc) =>
        oc
          .columns(['model_id', 'kind', 'name'])
          .doUpdateSet({ step: checkpoint.step, state_path: checkpoint.state_path, created_at: checkpoint.created_at }),
      )
      .execute();
  }

  async findCheckpoint(
    modelId: string,
    kind: TinkerCheckpointTable['kind'],
    name: string,
  ): Promise<TinkerCheckpointTable | undefined> {
    return this.db
      .selectFrom('tinker_checkpoints')
      .selectAll()
      .where('model_id', '=', modelId)
      .where('kind', '=', kind)
      .where('name', '=', name)
      .executeTakeFirst();
  }

  async checkpointsOf(modelId: string): Promise<TinkerCheckpointTable[]> {
    return this.db
      .selectFrom('tinker_checkpoints')
      .selectAll()
      .where('model_id', '=', modelId)
      .orderBy('step')
      .execute();
  }

  /** Every name given to one step of a model (the step itself is gone). */
  async deleteNamesOf(modelId: string, step: number): Promise<void> {
    await this.db.deleteFrom('tinker_checkpoints').where('model_id', '=', modelId).where('step', '=', step).execute();
  }

  async deleteCheckpoint(modelId: string, kind: TinkerCheckpointTable['kind'], name: string): Promise<void> {
    await this.db
      .deleteFrom('tinker_checkpoints')
      .where('model_id', '=', modelId)
      .where('kind', '=', kind)
      .where('name', '=', name)
      .execute();
  }

  /** Every model of these entities, oldest first: each is a Tinker training run. */
  async modelsOf(entityIds: string[]): Promise<ModelRow[]> {
    if (!entityIds.length) return [];
    const rows = await this.db
      .selectFrom('models')
      .innerJoin('entities', 'entities.id', 'models.entity_id')
      .selectAll('models')
      .select('entities.name as entity_name')
      .where('models.entity_id', 'in', entityIds)
      .orderBy('models.created_at')
      .orderBy('models.id')
      .execute();
    return rows.map(toModelRow);
  }

  async insertFuture(future: TinkerFutureTable): Promise<void> {
    await this.db.insertInto('tinker_futures').values(future).execute();
  }

  /** Inserts a numbered request's future unless that entity already has one for its key; says whether it did. */
  async claimFuture(future: TinkerFutureTable): Promise<boolean> {
    const result = await this.db
      .insertInto('tinker_futures')
      .values(future)
      .onConflict((oc) => oc.columns(['entity_id', 'request_key']).doNothing())
      .executeTakeFirst();
    return Number(result.numInsertedOrUpdatedRows ?? 0) > 0;
  }

  async findFutureByRequest(entityId: string, requestKey: string): Promise<TinkerFutureTable | undefined> {
    return this.db
      .selectFrom('tinker_futures')
      .selectAll()
      .where('entity_id', '=', entityId)
      .where('request_key', '=', requestKey)
      .executeTakeFirst();
  }

  async finishFuture(
    id: string,
    outcome: Pick<TinkerFutureTable, 'status' | 'result' | 'error' | 'category' | 'finished_at'>,
  ): Promise<void> {
    await this.db.updateTable('tinker_futures').set(outcome).where('id', '=', id).execute();
  }

  async findFuture(id: string): Promise<TinkerFutureTable | undefined> {
    return this.db.selectFrom('tinker_futures').selectAll().where('id', '=', id).executeTakeFirst();
  }

  /** The secret stored under `name`, made from `candidate` by whichever process asks first. */
  async sharedSecret(name: string, candidate: string, now: string): Promise<string> {
    await this.db
      .insertInto('server_secrets')
      .values({ name, value: candidate, created_at: now })
      .onConflict((oc) => oc.column('name').doNothing())
      .execute();
    const row = await this.db
      .selectFrom('server_secrets')
      .select('value')
      .where('name', '=', name)
      .executeTakeFirstOrThrow();
    return row.value;
  }

  /** Records sampled sequences (StableReinforce's provenance) and sweeps those no request has named since `staleBefore`. */
  async recordSequences(rows: TinkerSampledSequenceTable[], staleBefore: string): Promise<void> {
    await this.db.deleteFrom('tinker_sampled_sequences').where('used_at', '<', staleBefore).execute();
    for (let at = 0; at < rows.length; at += 200)
      await this.db
        .insertInto('tinker_sampled_sequences')
        .values(rows.slice(at, at + 200))
        .execute();
  }

  /** The entity's recorded sequences among `ids` still in use since `staleBefore`; those found are marked used `now`. */
  async useSequences(
    entityIds: string[],
    ids: string[],
    staleBefore: string,
    now: string,
  ): Promise<TinkerSampledSequenceTable[]> {
    if (ids.length === 0 || entityIds.length === 0) return [];
    const rows = await this.db
      .selectFrom('tinker_sampled_sequences')
      .selectAll()
      .where('id', 'in', ids)
      .where('entity_id', 'in', entityIds)
      .where('used_at', '>=', staleBefore)
      .execute();
    if (rows.length > 0)
      await this.db
        .updateTable('tinker_sampled_sequences')
        .set({ used_at: now })
        .where(
          'id',
          'in',
          rows.map((row) => row.id),
        )
        .execute();
    return rows;
  }

  /** At start-up: every future still pending belonged to a process that is gone. */
  async failPendingFutures(error: string, now: string): Promise<number> {
    const result = await this.db
      .updateTable('tinker_futures')
      .set({ status: 'failed', error, category: 'server', finished_at: now })
      .where('status', '=', 'pending')
      .executeTakeFirst();
    return Number(result.numUpdatedRows);
  }
}
