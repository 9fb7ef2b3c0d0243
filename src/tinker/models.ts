/**
 * Who and what a Tinker request is about: SDK sessions, the server's capabilities, training clients (a Tinker
 * model id ↔ one of our models, made with the base model, LoRA rank and seed), and `tinker://` paths ↔ our
 * checkpoints. Another entity's model or checkpoint is exactly as absent as a missing one.
 */

import type { CheckpointRecord, ModelRow } from '../api/models.ts';
import type { Clock } from '../clock.ts';
import { AppError, excerpt, notFound } from '../errors.ts';
import { newId } from '../ids.ts';
import { canActFor, type Principal } from '../services/auth-service.ts';
import type { BaseModelRuntime } from '../services/base-model-runtime.ts';
import type { BaseModelRegistry } from '../services/base-models.ts';
import type { ModelService } from '../services/model-service.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { TinkerModelTable } from '../store/schema.ts';
import type { TinkerRepository } from '../store/tinker-repository.ts';
import { LORA_DEFAULTS } from '../training/defaults.ts';
import { type CreateSessionBody, parseTinkerPath, stepName, type TinkerCheckpointKind } from './schemas.ts';

/** Every training client's model lives in this project of its entity. */
export const TINKER_PROJECT = 'tinker';

/** The id of a session's n-th training client: the SDK derives it itself when it creates one by loading a checkpoint. */
export const trainingClientId = (sessionId: string, modelSeqId: number) => `${sessionId}:train:${modelSeqId}`;

export interface TinkerModel {
  /** The id the SDK addresses it by. */
  tinkerId: string;
  model: ModelRow;
  rank: number;
  seed: number;
}

export interface NewTrainingClient {
  session_id: string;
  model_seq_id: number;
  base_model: string;
  rank: number;
  seed: number | null;
}

export interface ResolvedCheckpoint {
  model: ModelRow;
  checkpoint: CheckpointRecord;
  kind: TinkerCheckpointKind;
  name: string;
  /** The folder `save_weights` wrote the optimizer state into, when this is such a checkpoint. */
  statePath: string | null;
}

export class TinkerModels {
  constructor(
    private readonly repository: TinkerRepository,
    private readonly models: ModelRepository,
    private readonly modelService: ModelService,
    private readonly baseModels: BaseModelRegistry,
    private readonly runtime: BaseModelRuntime,
    private readonly clock: Clock,
  ) {}

  async createSession(
    principal: Principal,
    body: CreateSessionBody,
  ): Promise<{ type: 'create_session'; session_id: string }> {
    const id = newId();
    const now = this.clock.now().toISOString();
    await this.repository.insertSession({
      id,
      entity_id: principal.entityId,
      sdk_version: body.sdk_version,
      created_at: now,
      heartbeat_at: now,
    });
    return { type: 'create_session', session_id: id };
  }

  async heartbeat(principal: Principal, sessionId: string): Promise<{ type: 'session_heartbeat' }> {
    await this.ownedSession(principal, sessionId);
    await this.repository.heartbeat(sessionId, this.clock.now().toISOString());
    return { type: 'session_heartbeat' };
  }

  async ownedSession(principal: Principal, sessionId: string): Promise<void> {
    const session = await this.repository.findSession(sessionId);
    if (!session || !canActFor(principal, session.entity_id))
      throw notFound(`Session ${JSON.stringify(excerpt(sessionId))}`);
  }

  async capabilities(): Promise<{
    supported_models: {
      model_name: string;
      max_context_length: number | null;
      trainable: boolean;
      sampleable: boolean;
    }[];
  }> {
    const supported = [];
    for (const id of this.baseModels.loadableIds()) {
      // A base whose tokenizer cannot be read cannot be trained or sampled through token ids.
      if ((await this.runtime.vocabularySize(id)) !== null)
        supported.push({ model_name: id, max_context_length: null, trainable: true, sampleable: true });
    }
    return { supported_models: supported };
  }

  /** The name the SDK loads a base's tokenizer by (`get_tokenizer`): its Hugging Face repository when one is known. */
  tokenizerId(baseId: string): string {
    return this.baseModels.find(baseId)?.aliases?.[0] ?? baseId;
  }

  /** The model behind a new training client, named after its Tinker id in the `tinker` project. */
  async create(principal: Principal, spec: NewTrainingClient): Promise<TinkerModel> {
    await this.ownedSession(principal, spec.session_id);
    const base = this.baseModels.resolve(spec.base_model);
    if (!base)
      throw new AppError(
        'not_found',
        `Base model ${JSON.stringify(excerpt(spec.base_model))} is not available on this server`,
      );
    const tinkerId = trainingClientId(spec.session_id, spec.model_seq_id);
    if (await this.repository.findModel(tinkerId)) throw new AppError('conflict', `Model ${tinkerId} already exists`);
    const view = await this.modelService.create(principal, {
      project: TINKER_PROJECT,
      name: tinkerId.replaceAll(':', '-'),
      base_model: base.id,
    });
    const seed = spec.seed ?? Math.floor(Math.random() * 2 ** 32);
    const row: TinkerModelTable = {
      id: tinkerId,
      model_id: view.id,
      session_id: spec.session_id,
      lora_rank: spec.rank,
      seed,
      created_at: this.clock.now().toISOString(),
    };
    await this.repository.insertModel(row);
    return this.owned(principal, tinkerId);
  }

  /** The LoRA rank a checkpoint's model was made with (a model trained by jobs has the default one). */
  async rankOf(modelId: string): Promise<number> {
    return (await this.repository.findModel(modelId))?.lora_rank ?? LORA_DEFAULTS.rank;
  }

  /** A training client's model by its Tinker id (or our model id), if the principal may use it. */
  async owned(principal: Principal, id: string): Promise<TinkerModel> {
    const row = await this.repository.findModel(id);
    const model = row && (await this.models.findById(row.model_id));
    if (!row || !model || !canActFor(principal, model.entity_id))
      throw notFound(`Model ${JSON.stringify(excerpt(id))}`);
    return { tinkerId: row.id, model, rank: row.lora_rank, seed: row.seed };
  }

  /** Any of the principal's models by our id: every model is a Tinker training run. */
  async ownedRun(principal: Principal, modelId: string): Promise<ModelRow> {
    const model = await this.models.findById(modelId);
    if (!model || !canActFor(principal, model.entity_id))
      throw notFound(`Training run ${JSON.stringify(excerpt(modelId))}`);
    return model;
  }

  /** `tinker://<model>/<kind>/<name>`: a name a client saved, else `step<N>` of any checkpoint. */
  async resolvePath(principal: Principal, path: string): Promise<ResolvedCheckpoint> {
    const parsed = parseTinkerPath(path);
    if (!parsed)
      throw new AppError(
        'bad_request',
        `Invalid tinker path ${JSON.stringify(excerpt(path))}: expected tinker://<training run>/<sampler_weights|weights>/<name>`,
      );
    const model = await this.models.findById(parsed.modelId);
    if (!model || !canActFor(principal, model.entity_id)) throw notFound(`Checkpoint ${JSON.stringify(excerpt(path))}`);
    const named = await this.repository.findCheckpoint(model.id, parsed.kind, parsed.name);
    const stepMatch = /^step(\d+)$/.exec(parsed.name);
    const step = named?.step ?? (stepMatch ? Number(stepMatch[1]) : null);
    const checkpoint = step === null ? undefined : await this.models.findCheckpointByStep(model.id, step);
    if (!checkpoint) throw notFound(`Checkpoint ${JSON.stringify(excerpt(path))}`);
    return {
      model,
      checkpoint,
      kind: parsed.kind,
      name: named ? parsed.name : stepName(checkpoint.step),
      statePath: named?.state_path ?? null,
    };
  }
}
