/**
 * Chat `model` names → (base model, checkpoint): a served model name (api/model-name.ts), a base model id or one of
 * its aliases, or nothing (the default base). Another entity's model is exactly as unknown as a missing one.
 */

import { parseServedModelName } from '../api/model-name.ts';
import type { CheckpointRecord } from '../api/models.ts';
import { AppError, excerpt } from '../errors.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import { canActFor, type Principal } from './auth-service.ts';
import type { BaseModelRegistry } from './base-models.ts';

export interface ResolvedModel {
  baseId: string;
  /** null: the base model alone. */
  checkpoint: CheckpointRecord | null;
}

export function unknownModel(name: string): AppError {
  return new AppError('not_found', `The model \`${excerpt(name)}\` does not exist.`, [
    { loc: ['body', 'model'], msg: 'unknown model', type: 'not_found' },
  ]);
}

export class ModelResolver {
  constructor(
    private readonly models: ModelRepository,
    private readonly baseModels: BaseModelRegistry,
  ) {}

  async resolve(principal: Principal, name: string | null): Promise<ResolvedModel> {
    if (name === null) return { baseId: this.baseModels.defaultId, checkpoint: null };
    const base = this.baseModels.resolve(name);
    if (base) return { baseId: base.id, checkpoint: null };
    const parsed = parseServedModelName(name);
    if (!parsed) throw unknownModel(name);
    const model = await this.models.findByName(parsed.entity, parsed.project, parsed.name);
    if (!model || !canActFor(principal, model.entity_id)) throw unknownModel(name);
    const checkpoint =
      typeof parsed.step === 'number'
        ? await this.models.findCheckpointByStep(model.id, parsed.step)
        : await this.models.latestCheckpoint(model.id);
    if (!checkpoint) throw unknownModel(name);
    return { baseId: model.base_model, checkpoint };
  }
}
