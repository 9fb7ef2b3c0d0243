/**
 * Models that start from an adapter rather than from the base: a fork of another model's checkpoint. The new
 * model's step 0 holds that adapter (with its optimizer state, so training goes on where the parent stood),
 * and from there it trains and serves like any model. The copied adapter is checked as an import's is (the engine's
 * `check_adapter`): a value that is not finite or out of bounds (a checkpoint older than that check, or damaged on
 * disk) is a 422 and nothing is kept.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { ModelForkBody, ModelResponse } from '../api/models.ts';
import { notFound, validationError } from '../errors.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { AdapterCheck } from './adapter-import.ts';
import type { Principal } from './auth-service.ts';
import type { BaseModelRegistry } from './base-models.ts';
import { ADAPTER_CONFIG, publicAdapterConfig } from './checkpoint-export.ts';
import type { ModelService } from './model-service.ts';

export class ModelLineage {
  constructor(
    private readonly models: ModelService,
    private readonly repository: ModelRepository,
    private readonly baseModels: BaseModelRegistry,
    private readonly check: AdapterCheck,
  ) {}

  async fork(principal: Principal, parentId: string, input: ModelForkBody): Promise<ModelResponse> {
    const parent = await this.models.getOwned(principal, parentId);
    const checkpoint =
      input.step === undefined
        ? await this.repository.latestCheckpoint(parent.id)
        : await this.repository.findCheckpointByStep(parent.id, input.step);
    if (!checkpoint) throw notFound(`Checkpoint at step ${input.step} of model ${parent.name}`);
    const source = checkpoint.adapterPath;
    const target = {
      entity: parent.entity_name,
      project: input.project ?? parent.project,
      name: input.name,
      base_model: parent.base_model,
    };
    if (!source) return this.models.create(principal, target); // a fork of step 0 is a fresh model on the same base
    return this.models.create(principal, target, async (folder) => {
      await fs.cp(source, folder, { recursive: true, errorOnExist: true }).catch((error: NodeJS.ErrnoException) => {
        if (error.code === 'ENOENT')
          throw notFound(`Checkpoint at step ${checkpoint.step} of model ${parent.name} (deleted meanwhile)`);
        throw error;
      });
      const base = this.baseModels.find(parent.base_model);
      if (!base) throw notFound(`Base model ${parent.base_model} of model ${parent.name}`);
      const problems = await this.check(folder, base.path);
      if (problems.length) throw validationError(problems);
      const config = await publicAdapterConfig(folder, parent.base_model);
      await fs.writeFile(path.join(folder, ADAPTER_CONFIG), `${JSON.stringify(config, null, 2)}\n`);
    });
  }
}
