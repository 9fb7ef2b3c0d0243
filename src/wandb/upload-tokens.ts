/**
 * The upload URLs this server hands the W&B SDK: one per file, signed with a secret of this process and valid
 * for a few minutes, so a PUT needs no API key (the SDK sends none, as to a cloud bucket) and can write nothing
 * but the file it was issued for, with the digest the SDK declared for it. Pending uploads live in this process
 * too, so a secret that dies with it loses nothing.
 */
import crypto from 'node:crypto';
import { AppError } from '../errors.ts';
import type { Clock } from '../clock.ts';
import { hmacOf, sameSecret } from '../signing.ts';

/** What an upload URL may write: a file of a pending artifact, its manifest, or a run file (read and dropped). */
export type UploadTarget =
  | { kind: 'artifact_file'; artifactId: string; name: string; md5: string }
  | { kind: 'manifest'; artifactId: string; md5: string }
  | { kind: 'run_file' };

/** How long an issued upload URL may be used; the SDK uploads as soon as it gets one. */
export const UPLOAD_URL_TTL_MS = 15 * 60 * 1000;

export class UploadTokens {
  constructor(
    private readonly clock: Clock,
    private readonly secret: Buffer = crypto.randomBytes(32),
  ) {}

  sign(target: UploadTarget): string {
    const payload = Buffer.from(JSON.stringify({ ...target, expires: this.clock.now().getTime() + UPLOAD_URL_TTL_MS })).toString('base64url');
    return `${payload}.${this.mac(payload)}`;
  }

  /** The target of a token this process signed and that has not expired; a 403 otherwise, as a cloud bucket answers. */
  verify(token: string): UploadTarget {
    const [payload, mac, ...rest] = token.split('.');
    if (rest.length > 0 || payload === undefined || mac === undefined || !sameSecret(mac, this.mac(payload))) {
      throw new AppError('forbidden', 'This upload URL was not issued by this server (or by this run of it): ask for a new one');
    }
    const { expires, ...target } = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as UploadTarget & { expires: number };
    if (this.clock.now().getTime() > expires) throw new AppError('forbidden', `This upload URL expired at ${new Date(expires).toISOString()}: ask for a new one`);
    return target;
  }

  private mac(payload: string): string {
    return hmacOf(this.secret, payload, 'base64url');
  }
}
