/**
 * A Tinker training client's calls as the SDK makes them: forward / forward_backward, optim_step, save_weights
 * (adapter + optimizer state), save_weights_for_sampler (adapter), load_weights, unload. Each is checked at once
 * (bad input is a 400, never a failed future), matched against an earlier copy by its number, and run as a future
 * in the model's queue, so one model's operations execute in submission order. The training steps themselves are
 * src/training/tinker/'s; this file names their results as the SDK reads them (`tinker://` paths, metric names).
 */

import type { Clock } from '../clock.ts';
import type { ForwardBackwardReply } from '../engine/protocol.ts';
import { AppError } from '../errors.ts';
import type { Principal } from '../services/auth-service.ts';
import type { TinkerRepository } from '../store/tinker-repository.ts';
import { LORA_DEFAULTS } from '../training/defaults.ts';
import { type ClientAdapter, loraModules, type TinkerTrainer } from '../training/tinker/trainer.ts';
import { type NumberedRequest, numbered, type TinkerFutures } from './futures.ts';
import { type TinkerModel, type TinkerModels, trainingClientId } from './models.ts';
import type { ProtoForwardBackward } from './proto.ts';
import type { TinkerProvenance } from './provenance.ts';
import type { TinkerSampling } from './sampling.ts';
import {
  type CreateModelBody,
  type LoadWeightsBody,
  type OptimStepBody,
  type SaveWeightsBody,
  type SaveWeightsExternalBody,
  stepName,
  tinkerPath,
  type UntypedFuture,
} from './schemas.ts';

/** What the SDK's numbers count: a training client's requests (`seq_id`), a session's new clients (`model_seq_id`). */
const clientScope = (tinkerId: string) => `model ${tinkerId}`;
const sessionScope = (sessionId: string) => `session ${sessionId}`;

/** The adapter the trainer trains for a training client. */
const adapterOf = (model: TinkerModel): ClientAdapter => ({
  modelId: model.model.id,
  baseModel: model.model.base_model,
  rank: model.rank,
  seed: model.seed,
});

export class TinkerTraining {
  constructor(
    private readonly tinkerModels: TinkerModels,
    private readonly repository: TinkerRepository,
    private readonly trainer: TinkerTrainer,
    private readonly futures: TinkerFutures,
    private readonly sampling: TinkerSampling,
    private readonly provenance: TinkerProvenance,
    private readonly clock: Clock,
  ) {}

  async createModel(principal: Principal, body: CreateModelBody): Promise<UntypedFuture> {
    const modules = loraModules(body.lora_config ?? {});
    const spec = { ...body, rank: body.lora_config?.rank ?? LORA_DEFAULTS.rank, seed: body.lora_config?.seed ?? null };
    const request = numbered(sessionScope(body.session_id), body.model_seq_id, body);
    const replayed = await this.futures.replayed(principal, 'create_model', request);
    if (replayed) return { request_id: replayed, model_id: trainingClientId(body.session_id, body.model_seq_id) };
    const model = await this.tinkerModels.create(principal, spec);
    return this.queue(principal, 'create_model', model, request, async () => {
      await this.trainer.create(adapterOf(model), modules);
      return { type: 'create_model', model_id: model.tinkerId };
    });
  }

  /** Checks the request at once (so bad input is a 400, never a failed future), then queues it. */
  async forwardBackward(principal: Principal, request: ProtoForwardBackward): Promise<UntypedFuture> {
    const model = await this.tinkerModels.owned(principal, request.model_id);
    const client = adapterOf(model);
    // StableReinforce trains on what the sampler recorded, which each datum's provenance names.
    const data =
      request.loss_fn === 'stable_reinforce' ? await this.provenance.resolve(principal, request.data) : request.data;
    const batch = await this.trainer.batch(client, request.loss_fn, request.loss_fn_config, data);
    // In protobuf an unset number reads as 0; the SDK numbers from 1.
    const numberedRequest = numbered(clientScope(model.tinkerId), request.seq_id || null, request);
    const kind = request.forward_only ? 'forward' : 'forward_backward';
    return this.queue(principal, kind, model, numberedRequest, async () =>
      forwardBackwardResult(await this.trainer.forwardBackward(client, batch, !request.forward_only)),
    );
  }

  async optimStep(principal: Principal, body: OptimStepBody): Promise<UntypedFuture> {
    const model = await this.tinkerModels.owned(principal, body.model_id);
    const request = numbered(clientScope(model.tinkerId), body.seq_id, body);
    return this.queue(principal, 'optim_step', model, request, async () => {
      const reply = await this.trainer.optimStep(adapterOf(model), body.adam_params);
      return { type: 'optim_step', metrics: reply.metrics };
    });
  }

  /** `forSampler`: the adapter alone; otherwise the full training state (adapter, optimizer, step count). */
  async save(principal: Principal, body: SaveWeightsBody, forSampler: boolean): Promise<UntypedFuture> {
    const model = await this.tinkerModels.owned(principal, body.model_id);
    const kind = forSampler ? 'sampler' : 'training';
    const request = numbered(clientScope(model.tinkerId), body.seq_id, body);
    return this.queue(principal, forSampler ? 'save_weights_for_sampler' : 'save_weights', model, request, async () => {
      const saved = await this.trainer.save(adapterOf(model), !forSampler);
      const name = body.path ?? stepName(saved.step);
      await this.repository.nameCheckpoint({
        model_id: model.model.id,
        kind,
        name,
        step: saved.step,
        state_path: forSampler ? null : saved.folder,
        created_at: this.clock.now().toISOString(),
      });
      const path = tinkerPath(model.model.id, kind, name);
      if (!forSampler) return { type: 'save_weights', path };
      const session =
        body.sampling_session_seq_id == null
          ? null
          : await this.sampling.createSessionFor(principal, model.model.base_model, path);
      // An unnamed save for a sampling client (save_weights_and_get_sampling_client) answers the session alone: SDKs up
      // to 0.16 assert there is no path then. A named one answers its path.
      if (session && body.path == null) return { type: 'save_weights_for_sampler', sampling_session_id: session };
      return { type: 'save_weights_for_sampler', path, ...(session ? { sampling_session_id: session } : {}) };
    });
  }

  /**
   * `save_weights_external`: the client's weights as a new checkpoint, named as an export, whose files (a Hugging Face
   * PEFT adapter) `get_external_weights_urls` hands out. The TTL is checked and not kept: exports stay until deleted
   * (`tinker checkpoint download` deletes its own) or retention removes their step.
   */
  async saveExternal(principal: Principal, body: SaveWeightsExternalBody): Promise<UntypedFuture> {
    const model = await this.tinkerModels.owned(principal, body.model_id);
    if (body.age_encryption_recipients?.length)
      throw new AppError('bad_request', 'age_encryption_recipients: this server does not encrypt exports');
    const request = numbered(clientScope(model.tinkerId), body.seq_id, body);
    return this.queue(principal, 'save_weights_external', model, request, async () => {
      const saved = await this.trainer.save(adapterOf(model), false);
      await this.repository.nameCheckpoint({
        model_id: model.model.id,
        kind: 'external',
        name: body.path,
        step: saved.step,
        state_path: null,
        created_at: this.clock.now().toISOString(),
      });
      return { type: 'save_weights_external', path: tinkerPath(model.model.id, 'external', body.path) };
    });
  }

  /**
   * Weights (and, with `optimizer`, the optimizer state `save_weights` wrote) into a training client's adapter:
   * an existing client's (`model_id`), or a new client made from the checkpoint (`session_id` + `model_seq_id`).
   */
  async load(principal: Principal, body: LoadWeightsBody): Promise<UntypedFuture> {
    // A new client's load is numbered in its session; an existing client's is numbered by that client (in queue).
    const { session_id: sessionId, model_seq_id: modelSeqId } = body;
    const creation =
      !body.model_id && sessionId && modelSeqId != null ? numbered(sessionScope(sessionId), modelSeqId, body) : null;
    const replayed = await this.futures.replayed(principal, 'load_weights', creation);
    if (replayed && sessionId && modelSeqId != null)
      return { request_id: replayed, model_id: trainingClientId(sessionId, modelSeqId) };
    const source = await this.tinkerModels.resolvePath(principal, body.path);
    if (body.optimizer && !source.statePath)
      throw new AppError(
        'bad_request',
        `${body.path} holds no optimizer state: save it with save_state (save_weights), not save_weights_for_sampler`,
      );
    const model = await this.loadTarget(
      principal,
      body,
      source.model.base_model,
      await this.tinkerModels.rankOf(source.model.id),
    );
    if (source.model.base_model !== model.model.base_model)
      throw new AppError(
        'bad_request',
        `The checkpoint was trained on ${source.model.base_model}, not ${model.model.base_model}`,
      );
    const from = {
      adapterPath: source.checkpoint.adapterPath,
      statePath: body.optimizer ? source.statePath : null,
    };
    const request = creation ?? numbered(clientScope(model.tinkerId), body.seq_id, body);
    return this.queue(principal, 'load_weights', model, request, async () => {
      await this.trainer.load(adapterOf(model), from);
      return { type: 'load_weights', path: body.path, model_id: model.tinkerId };
    });
  }

  private async loadTarget(
    principal: Principal,
    body: LoadWeightsBody,
    baseModel: string,
    rank: number,
  ): Promise<TinkerModel> {
    if (body.model_id) return this.tinkerModels.owned(principal, body.model_id);
    if (!body.session_id || body.model_seq_id == null)
      throw new AppError(
        'bad_request',
        'load_weights needs model_id, or session_id and model_seq_id to create a training client',
      );
    return this.tinkerModels.create(principal, {
      session_id: body.session_id,
      model_seq_id: body.model_seq_id,
      base_model: baseModel,
      rank,
      seed: null,
    });
  }

  /** Frees the adapter in the trainer; the model and its checkpoints stay, and a later operation reloads the latest. */
  async unload(principal: Principal, id: string): Promise<UntypedFuture> {
    const model = await this.tinkerModels.owned(principal, id);
    return this.queue(principal, 'unload_model', model, null, async () => {
      await this.trainer.unload(adapterOf(model));
      return { type: 'unload_model', model_id: model.tinkerId };
    });
  }

  private queue(
    principal: Principal,
    kind: string,
    model: TinkerModel,
    request: NumberedRequest | null,
    work: () => Promise<unknown>,
  ): Promise<UntypedFuture> {
    return this.futures
      .submit(principal, kind, model.model.id, work, request)
      .then((requestId) => ({ request_id: requestId, model_id: model.tinkerId }));
  }
}

/** The future's stored result; retrieve answers it as protobuf (what the SDK asks for) or JSON. */
export interface ForwardBackwardResult {
  type: 'forward_backward';
  outputs: { logprobs: number[]; elementwise_loss: number[] }[];
  metrics: Record<string, number>;
}

/**
 * The SDK combines the metrics of a split request by the reduction each name ends with (`loss:sum`), and refuses
 * a name without one: token counts add up, timings take the longest, anything else averages.
 */
const REDUCTIONS: Record<string, string> = { num_tokens: 'sum', step_seconds: 'max' };

function forwardBackwardResult(reply: ForwardBackwardReply): ForwardBackwardResult {
  const metrics = Object.fromEntries(
    Object.entries(reply.metrics).map(([key, value]) => [
      key.includes(':') ? key : `${key}:${REDUCTIONS[key] ?? 'mean'}`,
      value,
    ]),
  );
  return { type: 'forward_backward', outputs: reply.outputs, metrics: { ...metrics, 'loss:sum': reply.loss } };
}
