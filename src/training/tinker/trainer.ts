/**
 * The training steps of a Tinker training client on its model's adapter in the trainer engine: a fresh adapter,
 * forward / forward_backward with a named loss (losses.ts), optim_step, saves as the model's next ordinary
 * checkpoint (the adapter alone, or with the optimizer state and step count), loads, and freeing the adapter.
 *
 * It keeps which adapters this process made resident: an engine's memory does not survive a restart, so a client
 * goes on from its model's latest checkpoint, and a step whose state the trainer lost is a conflict that says so.
 * It refuses to know the Tinker wire (requests, their numbers, futures, `tinker://` paths): src/tinker/ decodes
 * those, orders each model's calls, and hands this file a `ClientAdapter`.
 */
import { tinkerAdapterKey } from '../../engine/adapter-keys.ts';
import { EngineError } from '../../engine/errors.ts';
import type { AdamParams, ForwardBackwardReply, OptimStepReply } from '../../engine/protocol.ts';
import { AppError } from '../../errors.ts';
import type { BaseModelRuntime } from '../../services/base-model-runtime.ts';
import type { ModelRepository } from '../../store/model-repository.ts';
import type { CheckpointPublisher } from '../checkpoint-publisher.ts';
import { ATTENTION_PROJECTIONS, LORA_DEFAULTS, MLP_PROJECTIONS } from '../defaults.ts';
import { type LossBatch, type LossDatum, lossBatch } from './losses.ts';

/** The adapter a training client trains: its model (our id, whose checkpoints it writes), base, LoRA rank and seed. */
export interface ClientAdapter {
  modelId: string;
  baseModel: string;
  rank: number;
  seed: number;
}

/** Tinker's AdamParams as a client sends them: weight decay and gradient clipping default to none. */
export type ClientAdam = Omit<AdamParams, 'weight_decay' | 'grad_clip_norm'> &
  Partial<Pick<AdamParams, 'weight_decay' | 'grad_clip_norm'>>;

export type ProjectionKind = 'attention' | 'mlp';

/**
 * The kinds of projection a LoRA config trains (Tinker's `train_attn` / `train_mlp`, each on unless false): which
 * modules those are is the base's own list (its engine's `lora_targets`: a mixture's experts are MLP projections).
 */
export function loraModules(config: { train_attn?: boolean; train_mlp?: boolean }): ProjectionKind[] {
  const kinds: ProjectionKind[] = [
    ...(config.train_attn === false ? [] : (['attention'] as const)),
    ...(config.train_mlp === false ? [] : (['mlp'] as const)),
  ];
  if (!kinds.length) throw new AppError('bad_request', 'At least one of train_attn and train_mlp must be true');
  return kinds;
}

export class TinkerTrainer {
  /** Models whose adapter this process made resident in the trainer (an engine's memory does not survive a restart). */
  private readonly resident = new Set<string>();

  constructor(
    private readonly runtime: BaseModelRuntime,
    private readonly models: Pick<ModelRepository, 'latestCheckpoint'>,
    private readonly publisher: CheckpointPublisher,
  ) {}

  /** A forward_backward's batch, checked against the client's base now: bad input is a 400, never a failed step. */
  async batch(
    client: ClientAdapter,
    lossFn: string,
    config: Record<string, number>,
    data: LossDatum[],
  ): Promise<LossBatch> {
    return lossBatch(lossFn, config, data, await this.runtime.vocabularySize(client.baseModel));
  }

  /** A new client's fresh adapter on the base's projections of these kinds, replacing what the trainer held under its key. */
  create(client: ClientAdapter, kinds: readonly ProjectionKind[]): Promise<void> {
    return this.guarded(client, async () => {
      const base = await this.base(client);
      await this.runtime.trainer().request('drop_adapter', { adapter: tinkerAdapterKey(client.modelId) });
      await this.initAdapter(client, base, kinds);
      this.resident.add(client.modelId);
    });
  }

  /** `backward`: the gradient is added to the adapter's until `optimStep`; otherwise a forward pass only. */
  forwardBackward(client: ClientAdapter, batch: LossBatch, backward: boolean): Promise<ForwardBackwardReply> {
    return this.guarded(client, async () => {
      const { base, adapter } = await this.ready(client);
      return this.runtime.trainer().request('forward_backward', { base, adapter, ...batch, backward });
    });
  }

  optimStep(client: ClientAdapter, adam: ClientAdam): Promise<OptimStepReply> {
    return this.guarded(client, async () => {
      const { base, adapter } = await this.ready(client);
      const { learning_rate, beta1, beta2, eps, weight_decay = 0, grad_clip_norm = 0 } = adam;
      return this.runtime.trainer().request('optim_step', {
        base,
        adapter,
        adam: { learning_rate, beta1, beta2, eps, weight_decay, grad_clip_norm },
      });
    });
  }

  /**
   * The model's next checkpoint: the adapter alone, or (`withState`) the full training state: adapter, optimizer
   * moments and step count, which `load` with a `statePath` restores.
   */
  save(client: ClientAdapter, withState: boolean): Promise<{ step: number; folder: string }> {
    return this.guarded(client, async () => {
      const { base, adapter } = await this.ready(client);
      const trainer = this.runtime.trainer();
      const saved = await this.publisher.publish(client.modelId, base, { tinker_save: 1 }, (folder) =>
        withState
          ? trainer.request('save_state', { adapter, path: folder })
          : trainer.request('save_adapter', { adapter, path: folder }),
      );
      return { step: saved.step, folder: saved.folder };
    });
  }

  /**
   * The client's adapter from a checkpoint: its full training state when `statePath` is given, else the adapter
   * at `adapterPath`, else (a checkpoint without one: step 0) a fresh adapter.
   */
  load(client: ClientAdapter, from: { adapterPath: string | null; statePath: string | null }): Promise<void> {
    return this.guarded(client, async () => {
      const base = await this.base(client);
      const trainer = this.runtime.trainer();
      const adapter = tinkerAdapterKey(client.modelId);
      await trainer.request('drop_adapter', { adapter });
      this.resident.delete(client.modelId);
      if (from.statePath) await trainer.request('load_state', { base, adapter, path: from.statePath });
      else if (from.adapterPath) await trainer.request('ensure_adapter', { adapter, base, path: from.adapterPath });
      else await this.initAdapter(client, base);
      this.resident.add(client.modelId);
    });
  }

  /** Frees the adapter in the trainer; the model and its checkpoints stay, and a later step reloads the latest. */
  unload(client: ClientAdapter): Promise<void> {
    return this.guarded(client, async () => {
      await this.runtime.trainer().request('drop_adapter', { adapter: tinkerAdapterKey(client.modelId) });
      this.resident.delete(client.modelId);
    });
  }

  private guarded<T>(client: ClientAdapter, work: () => Promise<T>): Promise<T> {
    return work().catch((error: unknown) => Promise.reject(this.lostState(client, error)));
  }

  /**
   * The trainer no longer holds this client's adapter (it restarted, or evicted it for others): say so rather than
   * train something else, and let the next step restore the model's latest checkpoint as after a restart.
   */
  private lostState(client: ClientAdapter, error: unknown): unknown {
    const adapter = tinkerAdapterKey(client.modelId);
    if (!(error instanceof EngineError) || error.code !== 'not_found' || !error.message.includes(adapter)) return error;
    this.resident.delete(client.modelId);
    return new AppError(
      'conflict',
      `The trainer lost this training client's state (${adapter}): the next operation continues from the model's latest checkpoint; load_state restores a saved state`,
    );
  }

  private async base(client: ClientAdapter): Promise<string> {
    return (await this.runtime.loadForTraining(client.baseModel)).id;
  }

  /**
   * The base and the adapter, made resident when this process has not yet: after a restart a training client goes
   * on from its model's latest checkpoint (weights only; the optimizer state lives in what a state save wrote).
   */
  private async ready(client: ClientAdapter): Promise<{ base: string; adapter: string }> {
    const base = await this.base(client);
    const adapter = tinkerAdapterKey(client.modelId);
    if (!this.resident.has(client.modelId)) {
      const latest = await this.models.latestCheckpoint(client.modelId);
      if (latest?.adapterPath)
        await this.runtime.trainer().request('ensure_adapter', { adapter, base, path: latest.adapterPath });
      else await this.initAdapter(client, base);
      this.resident.add(client.modelId);
    }
    return { base, adapter };
  }

  /**
   * A fresh adapter: A from the client's seed, B zero, alpha scaled with the rank as our own defaults are; on the
   * base's projections of these kinds (its trainer's `lora_targets`), all of them by default.
   */
  private async initAdapter(
    client: ClientAdapter,
    base: string,
    kinds: readonly ProjectionKind[] = ['attention', 'mlp'],
  ): Promise<void> {
    const alpha = (client.rank * LORA_DEFAULTS.alpha) / LORA_DEFAULTS.rank;
    const offered = Object.entries((await this.runtime.loadForTraining(client.baseModel)).loraTargets ?? {});
    const chosen = offered.filter(([, kind]) => kinds.includes(kind)).map(([name]) => name);
    const modules = offered.length
      ? chosen
      : [
          ...(kinds.includes('attention') ? ATTENTION_PROJECTIONS : []),
          ...(kinds.includes('mlp') ? MLP_PROJECTIONS : []),
        ];
    await this.runtime.trainer().request('ensure_adapter', {
      adapter: tinkerAdapterKey(client.modelId),
      base,
      init: { rank: client.rank, alpha, target_modules: [...modules], seed: client.seed },
    });
  }
}
