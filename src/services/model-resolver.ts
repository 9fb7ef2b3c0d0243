/**
 * Chat `model` names → (base model, checkpoint), per decisions.md: `wandb-artifact:///e/p/n[:stepN|:latest]`,
 * the same without the scheme, a base model id, or nothing (the default base). Another entity's model is
 * exactly as unknown as a missing one.
 */
import { AppError, excerpt } from '../errors.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { CheckpointRecord } from '../api/models.ts';
import type { BaseModelRegistry } from './base-models.ts';
import { canActFor, type Principal } from './auth-service.ts';

export interface ResolvedModel {
  baseId: string;
  /** null: the base model alone. */
  checkpoint: CheckpointRecord | null;
}

const MODEL_NAME = /^(?:wandb-artifact:\/\/\/)?([^/:]+)\/([^/:]+)\/([^/:]+)(?::(step(\d+)|latest))?$/;

export function unknownModel(name: string): AppError {
  return new AppError('not_found', `The model \`${excerpt(name)}\` does not exist.`, [{ loc: ['body', 'model'], msg: 'unknown model', type: 'not_found' }]);
}

export class ModelResolver {
  constructor(
    private readonly models: ModelRepository,
    private readonly baseModels: BaseModelRegistry,
  ) {}

  async resolve(principal: Principal, name: string | null): Promise<ResolvedModel> {
    if (name === null) return { baseId: this.baseModels.defaultId, checkpoint: null };
    if (this.baseModels.find(name)) return { baseId: name, checkpoint: null };
    const match = MODEL_NAME.exec(name);
    if (!match) throw unknownModel(name);
    const [, entity, project, modelName, tag, step] = match;
    const model = await this.models.findByName(entity, project, modelName);
    if (!model || !canActFor(principal, model.entity_id)) throw unknownModel(name);
    const checkpoint = tag && tag !== 'latest' ? await this.models.findCheckpointByStep(model.id, Number(step)) : await this.models.latestCheckpoint(model.id);
    if (!checkpoint) throw unknownModel(name);
    return { baseId: model.base_model, checkpoint };
  }
}
