/**
 * Models and their checkpoints: creation (with step 0), access by the owning entities only,
 * crash-safe deletion, checkpoint listing and deletion.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Page } from '../api/lists.ts';
import type { CheckpointRecord, ModelRow } from '../api/models.ts';
import { type ModelCreateBody, type ModelResponse, toModelResponse } from '../api/models.ts';
import type { Clock } from '../clock.ts';
import { AppError, excerpt, notFound, validationError } from '../errors.ts';
import { newId } from '../ids.ts';
import type { CheckpointPageQuery, ModelRepository } from '../store/model-repository.ts';
import { canActFor, type Principal } from './auth-service.ts';
import type { BaseModelRegistry } from './base-models.ts';

export class ModelService {
  constructor(
    private readonly models: ModelRepository,
    private readonly baseModels: BaseModelRegistry,
    private readonly clock: Clock,
    private readonly dataDir: string,
    /** Cancels a model's queued and running jobs; a model is never deleted under a running job. */
    private readonly cancelJobsOf: (modelId: string) => Promise<void> = async () => {},
    /** Throws when models on this base cannot be sampled (a vLLM sampler that cannot load it), so creation says so. */
    private readonly checkSampler: (baseId: string) => Promise<void> = async () => {},
  ) {}

  modelFolder(modelId: string): string {
    return path.join(this.dataDir, 'models', modelId);
  }

  /**
   * A new model with its step 0. `startFrom`, when given, writes the adapter step 0 holds (a fork, an import) into
   * the folder it is handed; without it step 0 is the base model itself.
   */
  async create(
    principal: Principal,
    body: ModelCreateBody,
    startFrom?: (folder: string) => Promise<void>,
  ): Promise<ModelResponse> {
    // A base named by an alias (its Hugging Face repository) is stored by its id.
    const input = { ...body, base_model: this.baseModels.resolve(body.base_model)?.id ?? body.base_model };
    const entityName = input.entity ?? principal.entityName;
    const entity = principal.entities.find((candidate) => candidate.name === entityName);
    if (!entity)
      throw new AppError('forbidden', `This API key may not create models for entity ${JSON.stringify(entityName)}`);
    await this.checkBaseModel(input.base_model);
    const existing = await this.models.findByName(entity.name, input.project, input.name);
    if (existing) return this.existingOrConflict(existing, input);
    await this.checkSampler(input.base_model);

    const now = this.clock.now().toISOString();
    const modelId = newId();
    const step0Folder = startFrom ? path.join(this.modelFolder(modelId), 'checkpoints', '0') : null;
    try {
      if (startFrom && step0Folder) await startFrom(step0Folder);
      await this.models.insertModel(
        {
          id: modelId,
          entity_id: entity.id,
          project: input.project,
          name: input.name,
          base_model: input.base_model,
          run_id: newId(),
          last_step: 0,
          created_at: now,
        },
        { id: newId(), model_id: modelId, step: 0, metrics: '{}', adapter_path: step0Folder, created_at: now },
      );
    } catch (error) {
      await fs.rm(this.modelFolder(modelId), { recursive: true, force: true });
      // A concurrent create of the same name won the unique constraint.
      const winner = await this.models.findByName(entity.name, input.project, input.name);
      if (winner) return this.existingOrConflict(winner, input);
      throw error;
    }
    const created = await this.models.findById(modelId);
    if (!created) throw new AppError('internal', 'model vanished right after creation');
    return toModelResponse(created);
  }

  /** A base this server cannot run is refused now, not at the model's first chat or training job. */
  private async checkBaseModel(baseModel: string): Promise<void> {
    const invalid = (msg: string) => validationError([{ loc: ['body', 'base_model'], msg, type: 'value_error' }]);
    const spec = this.baseModels.find(baseModel);
    if (!spec) {
      const known = this.baseModels.loadableIds().join(', ') || '(none)';
      throw invalid(
        `Unknown base model ${JSON.stringify(baseModel)}; this server can load: ${known}. It does not download models: ` +
          'put the model folder (config.json, tokenizer files, safetensors) on disk and add it to the BASE_MODELS setting as id=/path/to/folder.',
      );
    }
    const problem = await this.baseModels.architectureProblem(spec);
    if (problem) throw invalid(`Base model ${JSON.stringify(baseModel)} cannot be served: ${problem}`);
  }

  private existingOrConflict(existing: ModelRow, input: ModelCreateBody): ModelResponse {
    if (input.return_existing) return toModelResponse(existing);
    throw new AppError(
      'conflict',
      `Model ${existing.entity_name}/${existing.project}/${existing.name} already exists (pass return_existing: true to reuse it)`,
    );
  }

  /** The model named `entity/project/name`, on the same terms as getOwned. */
  async getOwnedByName(principal: Principal, entity: string, project: string, name: string): Promise<ModelRow> {
    const model = await this.models.findByName(entity, project, name);
    if (!model || !canActFor(principal, model.entity_id))
      throw notFound(`Model ${excerpt(`${entity}/${project}/${name}`)}`);
    return model;
  }

  /** The model if the principal may see it; another entity's model is exactly as absent as a missing one. */
  async getOwned(principal: Principal, modelId: string): Promise<ModelRow> {
    const model = await this.models.findById(modelId);
    if (!model || !canActFor(principal, model.entity_id)) throw notFound('Model');
    return model;
  }

  async delete(
    principal: Principal,
    modelId: string,
  ): Promise<{ model_id: string; deleted_checkpoints: number; deleted_run: boolean }> {
    const model = await this.getOwned(principal, modelId);
    await this.cancelJobsOf(model.id);
    const result = await this.models.deleteModel(
      model.id,
      model.run_id,
      this.modelFolder(model.id),
      this.clock.now().toISOString(),
    );
    await this.sweepPendingDeletions();
    return { model_id: model.id, deleted_checkpoints: result.deletedCheckpoints, deleted_run: result.deletedRun };
  }

  async listCheckpoints(
    principal: Principal,
    modelId: string,
    query: CheckpointPageQuery,
  ): Promise<Page<CheckpointRecord>> {
    const model = await this.getOwned(principal, modelId);
    let cursorStep: number | undefined;
    if (query.after !== undefined) {
      const cursor = await this.models.findCheckpointById(model.id, query.after);
      if (!cursor) {
        throw validationError([
          {
            loc: ['query', 'after'],
            msg: `No checkpoint with id ${JSON.stringify(query.after)} in this model`,
            type: 'value_error',
          },
        ]);
      }
      cursorStep = cursor.step;
    }
    return this.models.pageCheckpoints(model.id, cursorStep, query);
  }

  async deleteCheckpoints(
    principal: Principal,
    modelId: string,
    steps: number[],
  ): Promise<{ deleted_count: number; not_found_steps: number[] }> {
    const model = await this.getOwned(principal, modelId);
    const unique = [...new Set(steps)];
    const deleted = new Set(await this.removeCheckpoints(model.id, unique));
    return { deleted_count: deleted.size, not_found_steps: unique.filter((step) => !deleted.has(step)) };
  }

  /** Deletes checkpoints' rows, then their folders; answers the steps that existed. */
  async removeCheckpoints(modelId: string, steps: number[]): Promise<number[]> {
    const { deletedSteps } = await this.models.deleteCheckpoints(modelId, steps, this.clock.now().toISOString());
    await this.sweepPendingDeletions();
    return deletedSteps;
  }

  /** Removes checkpoint folders a crashed job left half-written (they were never listed). */
  async sweepTemporaryCheckpoints(): Promise<number> {
    const modelsDir = path.join(this.dataDir, 'models');
    let removed = 0;
    for (const model of await fs.readdir(modelsDir).catch(() => [] as string[])) {
      const checkpointsDir = path.join(modelsDir, model, 'checkpoints');
      for (const entry of await fs.readdir(checkpointsDir).catch(() => [] as string[])) {
        if (!entry.startsWith('.tmp-')) continue;
        await fs.rm(path.join(checkpointsDir, entry), { recursive: true, force: true });
        removed += 1;
      }
    }
    return removed;
  }

  /** Removes files whose rows are already gone; run at start so a crash mid-delete leaves no orphans. */
  async sweepPendingDeletions(): Promise<number> {
    const pending = await this.models.pendingFileDeletions();
    let removed = 0;
    for (const entry of pending) {
      // A job of a model being deleted may still be writing a checkpoint into its folder until its cancel lands
      // (ENOTEMPTY). The deletion is already committed; a folder that will not go yet stays pending for the next sweep.
      const gone = await fs.rm(entry.path, { recursive: true, force: true, maxRetries: 5, retryDelay: 50 }).then(
        () => true,
        () => false,
      );
      if (!gone) continue;
      await this.models.forgetPendingFileDeletion(entry.id);
      removed += 1;
    }
    return removed;
  }
}
