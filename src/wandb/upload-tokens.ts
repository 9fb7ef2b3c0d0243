/**
 * The upload URLs this server hands the W&B SDK: one per file, signed with a key every server process of the
 * database shares and valid for a few minutes, so a PUT needs no API key (the SDK sends none, as to a cloud bucket)
 * and can write nothing but the file it was issued for, with the digest the SDK declared for it. Pending uploads
 * live in the database, so a URL issued before a restart is still good after it.
 */
import type { Clock } from '../clock.ts';
import { AppError } from '../errors.ts';
import { hmacOf, type SecretStore, SharedKey, sameSecret } from '../signing.ts';

/** What an upload URL may write: a file of a pending artifact, its manifest, or a run file (read and dropped). */
export type UploadTarget =
  | { kind: 'artifact_file'; artifactId: string; name: string; md5: string }
  | { kind: 'manifest'; artifactId: string; md5: string }
  | { kind: 'run_file' };

/** How long an issued upload URL may be used; the SDK uploads as soon as it gets one. */
export const UPLOAD_URL_TTL_MS = 15 * 60 * 1000;
const SIGNING_KEY = 'wandb-upload-signing-key';

export class UploadTokens {
  private readonly shared: SharedKey;
  private key: Buffer | null = null;

  constructor(
    private readonly clock: Clock,
    secrets: SecretStore,
  ) {
    this.shared = new SharedKey(secrets, SIGNING_KEY, clock);
  }

  /** Reads the shared key; the W&B routes await it before anything signs or verifies. */
  async ready(): Promise<void> {
    this.key ??= await this.shared.get();
  }

  sign(target: UploadTarget): string {
    const payload = Buffer.from(
      JSON.stringify({ ...target, expires: this.clock.now().getTime() + UPLOAD_URL_TTL_MS }),
    ).toString('base64url');
    return `${payload}.${this.mac(payload)}`;
  }

  /** The target of a token this server signed and that has not expired; a 403 otherwise, as a cloud bucket answers. */
  verify(token: string): UploadTarget {
    const [payload, mac, ...rest] = token.split('.');
    if (rest.length > 0 || payload === undefined || mac === undefined || !sameSecret(mac, this.mac(payload))) {
      throw new AppError('forbidden', 'This upload URL was not issued by this server: ask for a new one');
    }
    const { expires, ...target } = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as UploadTarget & {
      expires: number;
    };
    if (this.clock.now().getTime() > expires)
      throw new AppError(
        'forbidden',
        `This upload URL expired at ${new Date(expires).toISOString()}: ask for a new one`,
      );
    return target;
  }

  private mac(payload: string): string {
    if (!this.key) throw new Error('UploadTokens used before ready()');
    return hmacOf(this.key, payload, 'base64url');
  }
}
