/**
 * The SDK's RestClient and model queries: training runs (every model of the caller is one), their checkpoints
 * with `tinker://` paths (names a client saved, and `step<N>` for every checkpoint), weights info, checkpoint
 * deletion (the ordinary checkpoint step goes), and a training client's model info.
 */

import type { CheckpointRecord, ModelRow } from '../api/models.ts';
import type { Principal } from '../services/auth-service.ts';
import type { ModelService } from '../services/model-service.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { TinkerRepository } from '../store/tinker-repository.ts';
import type { TinkerModels } from './models.ts';
import { checkpointId, stepName, type TinkerCheckpointKind, tinkerPath } from './schemas.ts';

export interface TinkerCheckpointView {
  checkpoint_id: string;
  checkpoint_type: TinkerCheckpointKind;
  time: string;
  tinker_path: string;
  public: boolean;
}

export interface TrainingRunView {
  training_run_id: string;
  base_model: string;
  model_owner: string;
  is_lora: boolean;
  lora_rank: number | null;
  last_request_time: string;
  last_checkpoint: TinkerCheckpointView | null;
  last_sampler_checkpoint: TinkerCheckpointView | null;
}

/** How many checkpoints one listing reads at most. */
const CHECKPOINT_PAGE = 1000;

export class TinkerRest {
  constructor(
    private readonly tinkerModels: TinkerModels,
    private readonly repository: TinkerRepository,
    private readonly models: ModelRepository,
    private readonly modelService: ModelService,
  ) {}

  async info(principal: Principal, id: string) {
    const model = await this.tinkerModels.owned(principal, id);
    return {
      type: 'get_info' as const,
      model_id: model.tinkerId,
      model_data: {
        arch: null,
        model_name: model.model.base_model,
        tokenizer_id: this.tinkerModels.tokenizerId(model.model.base_model),
      },
      is_lora: true,
      lora_rank: model.rank,
      model_name: model.model.base_model,
    };
  }

  async weightsInfo(principal: Principal, path: string) {
    const { model } = await this.tinkerModels.resolvePath(principal, path);
    return { base_model: model.base_model, is_lora: true, lora_rank: await this.tinkerModels.rankOf(model.id) };
  }

  async trainingRun(principal: Principal, modelId: string): Promise<TrainingRunView> {
    return this.runView(await this.tinkerModels.ownedRun(principal, modelId));
  }

  /** The caller's models, oldest first, as the SDK pages them (offset and limit). */
  async trainingRuns(principal: Principal, offset: number, limit: number) {
    const all = await this.repository.modelsOf(principal.entities.map((entity) => entity.id));
    const page = all.slice(offset, offset + limit);
    return {
      training_runs: await Promise.all(page.map((model) => this.runView(model))),
      cursor: { offset, limit, total_count: all.length },
    };
  }

  async checkpoints(principal: Principal, modelId: string) {
    const model = await this.tinkerModels.ownedRun(principal, modelId);
    return { checkpoints: await this.checkpointViews(model) };
  }

  /** Every checkpoint of the caller's runs, newest run last, paged like the SDK's list_user_checkpoints. */
  async userCheckpoints(principal: Principal, offset: number, limit: number) {
    const models = await this.repository.modelsOf(principal.entities.map((entity) => entity.id));
    const all = (await Promise.all(models.map((model) => this.checkpointViews(model)))).flat();
    return { checkpoints: all.slice(offset, offset + limit), cursor: { offset, limit, total_count: all.length } };
  }

  /**
   * A checkpoint's TTL (`set_checkpoint_ttl_from_tinker_path`): the checkpoint must exist; checkpoints here do not
   * expire by TTL (they stay until deleted, or until the model's retention policy removes them), so nothing is kept.
   */
  async setTtl(principal: Principal, modelId: string, checkpointId: string): Promise<void> {
    await this.tinkerModels.resolvePath(principal, `tinker://${modelId}/${checkpointId}`);
  }

  /** Deletes the checkpoint a path names: the ordinary checkpoint step, and every name that pointed at it. */
  async deleteCheckpoint(principal: Principal, modelId: string, checkpointId: string): Promise<void> {
    const resolved = await this.tinkerModels.resolvePath(principal, `tinker://${modelId}/${checkpointId}`);
    await this.modelService.removeCheckpoints(resolved.model.id, [resolved.checkpoint.step]);
    await this.repository.deleteNamesOf(resolved.model.id, resolved.checkpoint.step);
  }

  private async runView(model: ModelRow): Promise<TrainingRunView> {
    const views = await this.checkpointViews(model);
    const last = (kind: TinkerCheckpointKind) => views.filter((view) => view.checkpoint_type === kind).at(-1) ?? null;
    return {
      training_run_id: model.id,
      base_model: model.base_model,
      model_owner: model.entity_name,
      is_lora: true,
      lora_rank: await this.tinkerModels.rankOf(model.id),
      last_request_time: model.created_at,
      last_checkpoint: last('training'),
      last_sampler_checkpoint: last('sampler'),
    };
  }

  /** Every trained step as a sampler checkpoint; those saved with save_weights (save_weights_external) also as training
   * (external) checkpoints. */
  private async checkpointViews(model: ModelRow): Promise<TinkerCheckpointView[]> {
    const { items } = await this.models.pageCheckpoints(model.id, undefined, {
      after: undefined,
      limit: CHECKPOINT_PAGE,
      order: 'asc',
    });
    const named = await this.repository.checkpointsOf(model.id);
    const view = (checkpoint: CheckpointRecord, kind: TinkerCheckpointKind, name: string): TinkerCheckpointView => ({
      checkpoint_id: checkpointId(kind, name),
      checkpoint_type: kind,
      time: checkpoint.createdAt,
      tinker_path: tinkerPath(model.id, kind, name),
      public: false,
    });
    const views: TinkerCheckpointView[] = [];
    for (const checkpoint of items.filter((item) => item.adapterPath)) {
      const names = named.filter((row) => row.step === checkpoint.step);
      const sampler = names.find((row) => row.kind === 'sampler')?.name ?? stepName(checkpoint.step);
      views.push(view(checkpoint, 'sampler', sampler));
      for (const row of names.filter((candidate) => candidate.kind !== 'sampler'))
        views.push(view(checkpoint, row.kind, row.name));
    }
    return views;
  }
}
