/**
 * Checkpoint downloads for the SDK's archive call (`get_checkpoint_archive_url`): the caller's checkpoint behind a
 * short-lived URL signed with a key that every server process of the database shares, so a plain HTTP client can
 * fetch it without an API key, and only until it expires. The archive is the checkpoint's PEFT adapter (as the
 * preview export streams it) with the `checkpoint_complete` marker a Tinker archive carries.
 */
import type { Clock } from '../clock.ts';
import { AppError, excerpt, notFound } from '../errors.ts';
import type { Principal } from '../services/auth-service.ts';
import type { AdapterArchive, CheckpointExporter } from '../services/checkpoint-export.ts';
import { hmacOf, type SecretStore, SharedKey, sameSecret } from '../signing.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { TinkerModels } from './models.ts';
import { ARCHIVE_URL_TTL_SECONDS, archiveDownloadPath } from './schemas.ts';

const SIGNING_KEY = 'checkpoint-download-signing-key';
/** What Tinker's archives hold beside the adapter: the CLI refuses one without it. */
const COMPLETE_MARKER = { name: 'checkpoint_complete', size: 0, open: () => Buffer.alloc(0) };

export interface SignedUrl {
  url: string;
  expires: Date;
}

export class TinkerArchives {
  private readonly key: SharedKey;

  constructor(
    private readonly tinkerModels: TinkerModels,
    secrets: SecretStore,
    private readonly models: ModelRepository,
    private readonly exporter: CheckpointExporter,
    private readonly clock: Clock,
  ) {
    this.key = new SharedKey(secrets, SIGNING_KEY, clock);
  }

  /** A download URL for the checkpoint `checkpointId` (`sampler_weights/<name>` or `weights/<name>`) of a run. */
  async signedUrl(principal: Principal, runId: string, checkpointId: string, origin: string): Promise<SignedUrl> {
    const { model, checkpoint } = await this.tinkerModels.resolvePath(principal, `tinker://${runId}/${checkpointId}`);
    if (!checkpoint.adapterPath)
      throw new AppError(
        'bad_request',
        `Step ${checkpoint.step} of ${model.id} is the base model itself: it has no adapter to download`,
      );
    const expires = Math.floor(this.clock.now().getTime() / 1000) + ARCHIVE_URL_TTL_SECONDS;
    const signature = await this.sign(model.id, String(checkpoint.step), String(expires));
    return {
      url: `${origin}${archiveDownloadPath(model.id, checkpoint.step)}?expires=${expires}&signature=${signature}`,
      expires: new Date(expires * 1000),
    };
  }

  /**
   * The archive a signed URL names; a URL altered in any part, or past its expiry, is refused. The signature is
   * checked over the values exactly as they arrived, so `step=01` or a zero-padded `expires` is a URL nobody signed.
   */
  async open(modelId: string, step: string, expires: unknown, signature: unknown): Promise<AdapterArchive> {
    const refused = (why: string) =>
      new AppError('forbidden', `This checkpoint download URL ${why}: ask the API for a new one`);
    if (
      !/^\d{1,15}$/.test(step) ||
      typeof expires !== 'string' ||
      !/^\d{1,12}$/.test(expires) ||
      typeof signature !== 'string' ||
      !/^[0-9a-f]{64}$/.test(signature)
    ) {
      throw refused('is malformed');
    }
    if (!sameSecret(signature, await this.sign(modelId, step, expires)))
      throw refused('has a signature that does not match');
    if (Number(expires) * 1000 < this.clock.now().getTime())
      throw refused(`expired at ${new Date(Number(expires) * 1000).toISOString()}`);
    const model = await this.models.findById(modelId);
    if (!model) throw notFound(`Model ${JSON.stringify(excerpt(modelId))}`);
    return this.exporter.archiveOf(model, Number(step), [COMPLETE_MARKER]);
  }

  private async sign(modelId: string, step: string, expires: string): Promise<string> {
    return hmacOf(await this.key.get(), `${modelId}\n${step}\n${expires}`, 'hex');
  }
}
