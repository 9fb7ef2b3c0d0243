/**
 * The training primitives of a Tinker training client on its model's adapter in the trainer engine:
 * forward / forward_backward with a named loss, optim_step, save_weights (adapter + optimizer state),
 * save_weights_for_sampler (adapter), load_weights. Each runs as a future in the model's queue, so one model's
 * operations execute in submission order; every save is the model's next ordinary checkpoint step.
 */

import type { Clock } from '../clock.ts';
import { tinkerAdapterKey } from '../engine/adapter-keys.ts';
import { EngineError } from '../engine/errors.ts';
import type { ForwardBackwardReply, StepRow } from '../engine/protocol.ts';
import { AppError } from '../errors.ts';
import { LORA_DEFAULTS } from '../services/adapter-validation.ts';
import type { Principal } from '../services/auth-service.ts';
import type { BaseModelRuntime } from '../services/base-model-runtime.ts';
import type { CheckpointPublisher } from '../services/checkpoint-publisher.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { TinkerRepository } from '../store/tinker-repository.ts';
import { loraInit } from '../training/defaults.ts';
import { type NumberedRequest, numbered, type TinkerFutures } from './futures.ts';
import { type TinkerModel, type TinkerModels, trainingClientId } from './models.ts';
import type { ProtoDatum, ProtoForwardBackward } from './proto.ts';
import type { TinkerSampling } from './sampling.ts';
import {
  type CreateModelBody,
  LOSS_DEFAULTS,
  type LoadWeightsBody,
  type OptimStepBody,
  type SaveWeightsBody,
  stepName,
  type TinkerLoss,
  tinkerPath,
  type UntypedFuture,
} from './schemas.ts';

/** The engine key of a training client's adapter. */

/** What the SDK's numbers count: a training client's requests (`seq_id`), a session's new clients (`model_seq_id`). */
const clientScope = (tinkerId: string) => `model ${tinkerId}`;
const sessionScope = (sessionId: string) => `session ${sessionId}`;

export class TinkerTraining {
  /** Models whose adapter this process made resident in the trainer (an engine's memory does not survive a restart). */
  private readonly resident = new Set<string>();

  constructor(
    private readonly tinkerModels: TinkerModels,
    private readonly repository: TinkerRepository,
    private readonly models: ModelRepository,
    private readonly runtime: BaseModelRuntime,
    private readonly checkpoints: CheckpointPublisher,
    private readonly futures: TinkerFutures,
    private readonly sampling: TinkerSampling,
    private readonly clock: Clock,
  ) {}

  async createModel(principal: Principal, body: CreateModelBody): Promise<UntypedFuture> {
    const targets: { train_attn?: boolean; train_mlp?: boolean } = body.lora_config ?? {};
    const kinds = [
      ...(targets.train_attn === false ? [] : ['attention']),
      ...(targets.train_mlp === false ? [] : ['mlp']),
    ];
    if (!kinds.length) throw new AppError('bad_request', 'At least one of train_attn and train_mlp must be true');
    const spec = { ...body, rank: body.lora_config?.rank ?? LORA_DEFAULTS.rank, seed: body.lora_config?.seed ?? null };
    const request = numbered(sessionScope(body.session_id), body.model_seq_id, body);
    const replayed = await this.futures.replayed(principal, 'create_model', request);
    if (replayed) return { request_id: replayed, model_id: trainingClientId(body.session_id, body.model_seq_id) };
    const model = await this.tinkerModels.create(principal, spec);
    return this.queue(principal, 'create_model', model, request, async () => {
      const loaded = await this.runtime.loadForTraining(model.model.base_model);
      const modules = Object.entries(loaded.loraTargets ?? {})
        .filter(([, kind]) => kinds.includes(kind))
        .map(([name]) => name);
      await this.runtime.trainer().request('drop_adapter', { adapter: tinkerAdapterKey(model.model.id) });
      await this.initAdapter(model, loaded.id, modules);
      this.resident.add(model.model.id);
      return { type: 'create_model', model_id: model.tinkerId };
    });
  }

  /** Checks the request at once (so bad input is a 400, never a failed future), then queues it. */
  async forwardBackward(principal: Principal, request: ProtoForwardBackward): Promise<UntypedFuture> {
    const model = await this.tinkerModels.owned(principal, request.model_id);
    if (!Object.hasOwn(LOSS_DEFAULTS, request.loss_fn)) {
      throw new AppError(
        'bad_request',
        `Unknown loss_fn ${JSON.stringify(request.loss_fn.slice(0, 100))}: one of ${Object.keys(LOSS_DEFAULTS).join(', ')}`,
      );
    }
    const loss = request.loss_fn as TinkerLoss;
    const vocab = await this.runtime.vocabularySize(model.model.base_model);
    const rows = request.data.map((datum, index) => toStepRow(datum, index, loss, vocab));
    if (!rows.length) throw new AppError('bad_request', 'forward_backward needs at least one datum');
    const lossConfig = { ...LOSS_DEFAULTS[loss], ...pick(request.loss_fn_config, Object.keys(LOSS_DEFAULTS[loss])) };
    // In protobuf an unset number reads as 0; the SDK numbers from 1.
    const numberedRequest = numbered(clientScope(model.tinkerId), request.seq_id || null, request);
    return this.queue(
      principal,
      request.forward_only ? 'forward' : 'forward_backward',
      model,
      numberedRequest,
      async () => {
        const { base, adapter } = await this.ready(model);
        const reply = await this.runtime.trainer().request('forward_backward', {
          base,
          adapter,
          loss,
          loss_config: lossConfig,
          backward: !request.forward_only,
          rows,
        });
        return forwardBackwardResult(reply);
      },
    );
  }

  async optimStep(principal: Principal, body: OptimStepBody): Promise<UntypedFuture> {
    const model = await this.tinkerModels.owned(principal, body.model_id);
    const adam = { weight_decay: 0, grad_clip_norm: 0, ...body.adam_params };
    return this.queue(
      principal,
      'optim_step',
      model,
      numbered(clientScope(model.tinkerId), body.seq_id, body),
      async () => {
        const { base, adapter } = await this.ready(model);
        const reply = await this.runtime.trainer().request('optim_step', {
          base,
          adapter,
          adam: {
            learning_rate: adam.learning_rate,
            beta1: adam.beta1,
            beta2: adam.beta2,
            eps: adam.eps,
            weight_decay: adam.weight_decay,
            grad_clip_norm: adam.grad_clip_norm,
          },
        });
        return { type: 'optim_step', metrics: reply.metrics };
      },
    );
  }

  /** `forSampler`: the adapter alone; otherwise the full training state (adapter, optimizer, step count). */
  async save(principal: Principal, body: SaveWeightsBody, forSampler: boolean): Promise<UntypedFuture> {
    const model = await this.tinkerModels.owned(principal, body.model_id);
    const kind = forSampler ? 'sampler' : 'training';
    return this.queue(
      principal,
      forSampler ? 'save_weights_for_sampler' : 'save_weights',
      model,
      numbered(clientScope(model.tinkerId), body.seq_id, body),
      async () => {
        const { base, adapter } = await this.ready(model);
        const trainer = this.runtime.trainer();
        const saved = await this.checkpoints.publish(model.model.id, base, { tinker_save: 1 }, (folder) =>
          forSampler
            ? trainer.request('save_adapter', { adapter, path: folder })
            : trainer.request('save_state', { adapter, path: folder }),
        );
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
        return { type: 'save_weights_for_sampler', path, ...(session ? { sampling_session_id: session } : {}) };
      },
    );
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
    const folder = source.checkpoint.adapterPath;
    return this.queue(
      principal,
      'load_weights',
      model,
      creation ?? numbered(clientScope(model.tinkerId), body.seq_id, body),
      async () => {
        const base = (await this.runtime.loadForTraining(model.model.base_model)).id;
        const trainer = this.runtime.trainer();
        const adapter = tinkerAdapterKey(model.model.id);
        await trainer.request('drop_adapter', { adapter });
        this.resident.delete(model.model.id);
        if (body.optimizer && source.statePath)
          await trainer.request('load_state', { base, adapter, path: source.statePath });
        else if (folder) await trainer.request('ensure_adapter', { adapter, base, path: folder });
        else await this.initAdapter(model, base);
        this.resident.add(model.model.id);
        return { type: 'load_weights', path: body.path, model_id: model.tinkerId };
      },
    );
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
      await this.runtime.trainer().request('drop_adapter', { adapter: tinkerAdapterKey(model.model.id) });
      this.resident.delete(model.model.id);
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
    const guarded = () => work().catch((error: unknown) => Promise.reject(this.lostState(model, error)));
    return this.futures
      .submit(principal, kind, model.model.id, guarded, request)
      .then((requestId) => ({ request_id: requestId, model_id: model.tinkerId }));
  }

  /**
   * The trainer no longer holds this client's adapter (it restarted, or evicted it for others): say so rather than
   * train something else, and let the next operation restore the model's latest checkpoint as after a restart.
   */
  private lostState(model: TinkerModel, error: unknown): unknown {
    const adapter = tinkerAdapterKey(model.model.id);
    if (!(error instanceof EngineError) || error.code !== 'not_found' || !error.message.includes(adapter)) return error;
    this.resident.delete(model.model.id);
    return new AppError(
      'conflict',
      `The trainer lost this training client's state (${adapter}): the next operation continues from the model's latest checkpoint; load_state restores a saved state`,
    );
  }

  /**
   * The base and the adapter, made resident when this process has not yet: after a restart a training client goes
   * on from its model's latest checkpoint (weights only; the optimizer state lives in what save_weights wrote).
   */
  private async ready(model: TinkerModel): Promise<{ base: string; adapter: string }> {
    const base = (await this.runtime.loadForTraining(model.model.base_model)).id;
    const adapter = tinkerAdapterKey(model.model.id);
    if (!this.resident.has(model.model.id)) {
      const latest = await this.models.latestCheckpoint(model.model.id);
      if (latest?.adapterPath)
        await this.runtime.trainer().request('ensure_adapter', { adapter, base, path: latest.adapterPath });
      else await this.initAdapter(model, base);
      this.resident.add(model.model.id);
    }
    return { base, adapter };
  }

  /**
   * A fresh adapter: A from the client's seed, B zero, alpha scaled with the rank as our own defaults are; on
   * `modules`, else every projection the base offers (its trainer's `lora_targets`).
   */
  private async initAdapter(model: TinkerModel, base: string, modules?: readonly string[]): Promise<void> {
    const alpha = (model.rank * LORA_DEFAULTS.alpha) / LORA_DEFAULTS.rank;
    modules ??= loraInit(0, Object.keys((await this.runtime.loadForTraining(base)).loraTargets ?? {})).target_modules;
    await this.runtime.trainer().request('ensure_adapter', {
      adapter: tinkerAdapterKey(model.model.id),
      base,
      init: { rank: model.rank, alpha, target_modules: [...modules], seed: model.seed },
    });
  }
}

function pick(config: Record<string, number>, keys: string[]): Record<string, number> {
  return Object.fromEntries(Object.entries(config).filter(([key]) => keys.includes(key)));
}

/** A datum as the engine takes it, with every length and token id checked here (a 400 names the datum and field). */
function toStepRow(datum: ProtoDatum, index: number, loss: TinkerLoss, vocab: number | null): StepRow {
  const length = datum.tokens.length;
  const bad = (message: string) => new AppError('bad_request', `data[${index}]: ${message}`);
  const field = (name: string, required: boolean): number[] | undefined => {
    const tensor = datum.lossFnInputs[name];
    if (!tensor) {
      if (required) throw bad(`loss_fn_inputs.${name} is required by ${loss}`);
      return undefined;
    }
    if (tensor.values.length !== length)
      throw bad(`loss_fn_inputs.${name} has ${tensor.values.length} values for ${length} input tokens`);
    return tensor.values;
  };
  if (!length) throw bad('model_input has no tokens');
  const rl = loss !== 'cross_entropy';
  const targets = field('target_tokens', true) ?? [];
  const ids = [...datum.tokens, ...targets];
  const outside = ids.find((id) => !Number.isInteger(id) || id < 0 || (vocab !== null && id >= vocab));
  if (outside !== undefined)
    throw bad(`token id ${outside} is outside the vocabulary (0..${vocab === null ? '?' : vocab - 1})`);
  const row: StepRow = {
    tokens: datum.tokens,
    target_tokens: targets,
    weights: field('weights', false) ?? new Array(length).fill(1),
  };
  if (rl) {
    row.logprobs = field('logprobs', true);
    row.advantages = field('advantages', true);
  }
  if (loss === 'gspo') row.sequence_ratio_mask = field('sequence_ratio_mask', true);
  return row;
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
