/**
 * Checkpoint downloads a plain HTTP client fetches without an API key, behind short-lived URLs signed with a key that
 * every server process of the database shares: the SDK's archive call (`get_checkpoint_archive_url`, tinker 0.18–0.34),
 * the checkpoint's PEFT adapter as one tar with the `checkpoint_complete` marker a Tinker archive carries; and, for an
 * export (`save_weights_external`, what tinker 0.38's `tinker checkpoint download` makes and fetches), a URL per file
 * of the adapter (`get_external_weights_urls`). A URL altered in any part, or past its expiry, is refused.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Clock } from '../clock.ts';
import { AppError, excerpt, notFound } from '../errors.ts';
import type { Principal } from '../services/auth-service.ts';
import {
  ADAPTER_CONFIG,
  ADAPTER_WEIGHTS,
  type AdapterArchive,
  type AdapterFile,
  type CheckpointExporter,
} from '../services/checkpoint-export.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { TinkerRepository } from '../store/tinker-repository.ts';
import type { TinkerModels } from './models.ts';
import { ARCHIVE_URL_TTL_SECONDS, archiveDownloadPath, externalFilePath } from './schemas.ts';

const SIGNING_KEY = 'checkpoint-download-signing-key';
const refused = (why: string) =>
  new AppError('forbidden', `This checkpoint download URL ${why}: ask the API for a new one`);
/** What Tinker's archives hold beside the adapter: the CLI refuses one without it. */
const COMPLETE_MARKER = { name: 'checkpoint_complete', size: 0, open: () => Buffer.alloc(0) };

export interface SignedUrl {
  url: string;
  expires: Date;
}

export class TinkerArchives {
  private key: Promise<Buffer> | null = null;

  constructor(
    private readonly tinkerModels: TinkerModels,
    private readonly repository: TinkerRepository,
    private readonly models: ModelRepository,
    private readonly exporter: CheckpointExporter,
    private readonly clock: Clock,
  ) {}

  /** A download URL for the checkpoint `checkpointId` (`sampler_weights/<name>` or `weights/<name>`) of a run. */
  async signedUrl(principal: Principal, runId: string, checkpointId: string, origin: string): Promise<SignedUrl> {
    const { model, checkpoint } = await this.tinkerModels.resolvePath(principal, `tinker://${runId}/${checkpointId}`);
    if (!checkpoint.adapterPath)
      throw new AppError(
        'bad_request',
        `Step ${checkpoint.step} of ${model.id} is the base model itself: it has no adapter to download`,
      );
    const expires = Math.floor(this.clock.now().getTime() / 1000) + ARCHIVE_URL_TTL_SECONDS;
    const signature = await this.sign(`${model.id}\n${checkpoint.step}\n${expires}`);
    return {
      url: `${origin}${archiveDownloadPath(model.id, checkpoint.step)}?expires=${expires}&signature=${signature}`,
      expires: new Date(expires * 1000),
    };
  }

  /** A URL per file of an export (`external_weights/<name>`): the adapter's config and weights. */
  async externalUrls(
    principal: Principal,
    runId: string,
    checkpointId: string,
    origin: string,
  ): Promise<{ urls: Record<string, string>; expires: Date }> {
    if (!checkpointId.startsWith('external_weights/'))
      throw new AppError(
        'bad_request',
        `${JSON.stringify(excerpt(checkpointId))} is not an export: external weights URLs name external_weights/<name>`,
      );
    const { checkpoint } = await this.tinkerModels.resolvePath(principal, `tinker://${runId}/${checkpointId}`);
    const expires = Math.floor(this.clock.now().getTime() / 1000) + ARCHIVE_URL_TTL_SECONDS;
    const urls: Record<string, string> = {};
    for (const file of [ADAPTER_CONFIG, ADAPTER_WEIGHTS]) {
      const signature = await this.sign(`${runId}\n${checkpoint.step}\n${file}\n${expires}`);
      urls[file] =
        `${origin}${externalFilePath(runId, checkpoint.step, file)}?expires=${expires}&signature=${signature}`;
    }
    return { urls, expires: new Date(expires * 1000) };
  }

  /** The file of an export a signed URL names. */
  async openExternal(modelId: string, step: string, file: string, expires: unknown, signature: unknown) {
    const stepNumber = this.checkedStep(step, expires, signature);
    await this.verify(`${modelId}\n${stepNumber}\n${file}\n${expires}`, signature as string, Number(expires));
    const model = await this.models.findById(modelId);
    if (!model) throw notFound(`Model ${JSON.stringify(excerpt(modelId))}`);
    if (file !== ADAPTER_CONFIG && file !== ADAPTER_WEIGHTS) throw notFound(`File ${JSON.stringify(excerpt(file))}`);
    return this.exporter.fileOf(model, stepNumber, file) satisfies Promise<AdapterFile>;
  }

  /** The archive a signed URL names; a URL altered in any part, or past its expiry, is refused. */
  async open(modelId: string, step: string, expires: unknown, signature: unknown): Promise<AdapterArchive> {
    const stepNumber = this.checkedStep(step, expires, signature);
    await this.verify(`${modelId}\n${stepNumber}\n${expires}`, signature as string, Number(expires));
    const model = await this.models.findById(modelId);
    if (!model) throw notFound(`Model ${JSON.stringify(excerpt(modelId))}`);
    return this.exporter.archiveOf(model, stepNumber, [COMPLETE_MARKER]);
  }

  /** The step of a signed URL, once its parts have the shapes this server writes. */
  private checkedStep(step: string, expires: unknown, signature: unknown): number {
    if (
      !/^\d{1,15}$/.test(step) ||
      typeof expires !== 'string' ||
      !/^\d{1,12}$/.test(expires) ||
      typeof signature !== 'string' ||
      !/^[0-9a-f]{64}$/.test(signature)
    )
      throw refused('is malformed');
    return Number(step);
  }

  private async verify(message: string, signature: string, expires: number): Promise<void> {
    const expected = Buffer.from(await this.sign(message), 'hex');
    if (!timingSafeEqual(expected, Buffer.from(signature, 'hex'))) throw refused('has a signature that does not match');
    if (expires * 1000 < this.clock.now().getTime())
      throw refused(`expired at ${new Date(expires * 1000).toISOString()}`);
  }

  private async sign(message: string): Promise<string> {
    this.key ??= this.repository
      .sharedSecret(SIGNING_KEY, randomBytes(32).toString('hex'), this.clock.now().toISOString())
      .then((hex) => Buffer.from(hex, 'hex'));
    return createHmac('sha256', await this.key)
      .update(message)
      .digest('hex');
  }
}
