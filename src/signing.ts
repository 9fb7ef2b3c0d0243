/**
 * The one home of HMAC signatures on URLs this server hands out (W&B upload URLs, Tinker checkpoint downloads):
 * a MAC is computed over the exact text that was signed, and a MAC a caller sends back is compared with the
 * expected one in constant time. `crypto.timingSafeEqual` throws on buffers of different byte lengths (a MAC of
 * the right number of characters with one multi-byte character in it), so both sides are hashed to 32 bytes first.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';

export function hmacOf(key: Buffer, text: string, encoding: 'hex' | 'base64url'): string {
  return createHmac('sha256', key).update(text).digest(encoding);
}

/** Whether `given` is exactly `expected`, in time that depends on neither (equal digests: equal strings). */
export function sameSecret(given: string, expected: string): boolean {
  const digest = (text: string) => createHash('sha256').update(text, 'utf8').digest();
  return timingSafeEqual(digest(given), digest(expected));
}
