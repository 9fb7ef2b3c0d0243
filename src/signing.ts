/**
 * The one home of HMAC signatures on URLs this server hands out (W&B upload URLs, Tinker checkpoint downloads),
 * signed with keys every server process of the database shares: a MAC is computed over the exact text that was signed, and a MAC a caller sends back is compared with the
 * expected one in constant time. `crypto.timingSafeEqual` throws on buffers of different byte lengths (a MAC of
 * the right number of characters with one multi-byte character in it), so both sides are hashed to 32 bytes first.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Clock } from './clock.ts';

export function hmacOf(key: Buffer, text: string, encoding: 'hex' | 'base64url'): string {
  return createHmac('sha256', key).update(text).digest(encoding);
}

/** Whether `given` is exactly `expected`, in time that depends on neither (equal digests: equal strings). */
export function sameSecret(given: string, expected: string): boolean {
  const digest = (text: string) => createHash('sha256').update(text, 'utf8').digest();
  return timingSafeEqual(digest(given), digest(expected));
}

/** Where shared keys are kept (store/secret-repository.ts). */
export interface SecretStore {
  sharedSecret(name: string, candidate: string, now: string): Promise<string>;
}

/**
 * A 32-byte signing key every server process of one database shares, so a URL one process signed is good on any
 * other and after a restart; made by whichever process asks first, read once per process.
 */
export class SharedKey {
  private key: Promise<Buffer> | null = null;

  constructor(
    private readonly secrets: SecretStore,
    private readonly name: string,
    private readonly clock: Clock,
  ) {}

  get(): Promise<Buffer> {
    this.key ??= this.secrets
      .sharedSecret(this.name, randomBytes(32).toString('hex'), this.clock.now().toISOString())
      .then((hex) => Buffer.from(hex, 'hex'))
      .catch((error: unknown) => {
        this.key = null;
        throw error;
      });
    return this.key;
  }
}
