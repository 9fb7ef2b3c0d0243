/**
 * A checkpoint as a PEFT adapter users can take away: `adapter_config.json` naming the base model by its public
 * id (never this server's folder) and `adapter_model.safetensors`, streamed as one tar archive. The optimizer
 * state stays behind: it is this engine's resume format, not part of an adapter.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { ModelRow } from '../api/models.ts';
import { type TarEntry, tarSize, tarStream } from '../artifacts/tar.ts';
import { AppError, notFound } from '../errors.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { Principal } from './auth-service.ts';
import type { ModelService } from './model-service.ts';

export const ADAPTER_CONFIG = 'adapter_config.json';
export const ADAPTER_WEIGHTS = 'adapter_model.safetensors';

/** The adapter config as exported: the base named by its public id, whatever an older writer put there. */
export async function publicAdapterConfig(folder: string, baseModel: string): Promise<Record<string, unknown>> {
  const config = JSON.parse(await fs.readFile(path.join(folder, ADAPTER_CONFIG), 'utf8')) as Record<string, unknown>;
  return { ...config, base_model_name_or_path: baseModel };
}

export interface AdapterArchive {
  fileName: string;
  size: number;
  archive: Readable;
}

/** One file of a checkpoint's adapter, as it is exported. */
export interface AdapterFile {
  size: number;
  body: Buffer | Readable;
}

export class CheckpointExporter {
  constructor(
    private readonly models: ModelService,
    private readonly checkpoints: ModelRepository,
  ) {}

  async adapterArchive(principal: Principal, modelId: string, step: number): Promise<AdapterArchive> {
    return this.archiveOf(await this.models.getOwned(principal, modelId), step);
  }

  /** The exported config and an open handle on the weights of a model's checkpoint (a 404/409 says why there are none). */
  private async adapterOf(model: ModelRow, step: number) {
    const checkpoint = await this.checkpoints.findCheckpointByStep(model.id, step);
    if (!checkpoint) throw notFound(`Checkpoint at step ${step} of model ${model.name}`);
    if (!checkpoint.adapterPath) {
      throw new AppError(
        'conflict',
        `Step ${step} of model ${model.name} is the base model ${model.base_model} itself: it has no adapter to export`,
      );
    }
    // Opened before streaming starts, so a checkpoint deleted meanwhile still exports whole (the handle keeps its bytes).
    const folder = checkpoint.adapterPath;
    const [config, weights] = await Promise.all([
      publicAdapterConfig(folder, model.base_model).then((json) => Buffer.from(`${JSON.stringify(json, null, 2)}\n`)),
      fs.open(path.join(folder, ADAPTER_WEIGHTS)),
    ]).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT')
        throw notFound(`Checkpoint at step ${step} of model ${model.name} (deleted meanwhile)`);
      throw error;
    });
    return { checkpoint, config, weights };
  }

  /** One file of a model's checkpoint (`adapter_config.json` or `adapter_model.safetensors`), whoever asks. */
  async fileOf(
    model: ModelRow,
    step: number,
    file: typeof ADAPTER_CONFIG | typeof ADAPTER_WEIGHTS,
  ): Promise<AdapterFile> {
    const { config, weights } = await this.adapterOf(model, step);
    if (file === ADAPTER_CONFIG) {
      await weights.close();
      return { size: config.length, body: config };
    }
    const { size } = await weights.stat();
    const body = weights.createReadStream();
    return { size, body };
  }

  /** The archive of a model's checkpoint, whoever asks (the caller decided they may); `extra` members go last. */
  async archiveOf(model: ModelRow, step: number, extra: TarEntry[] = []): Promise<AdapterArchive> {
    const { checkpoint, config, weights } = await this.adapterOf(model, step);
    const { size } = await weights.stat();
    const entries: TarEntry[] = [
      { name: ADAPTER_CONFIG, size: config.length, open: () => config },
      { name: ADAPTER_WEIGHTS, size, open: () => weights.createReadStream() },
      ...extra,
    ];
    // Entries dated by the checkpoint, not the download: every export of a checkpoint is the same bytes.
    const archive = tarStream(entries, Date.parse(checkpoint.createdAt) / 1000);
    archive.once('close', () => void weights.close().catch(() => undefined));
    return { fileName: `${model.name}-step${step}-adapter.tar`, size: tarSize(entries), archive };
  }
}
