/**
 * W&B's artifact manifest (`wandb_manifest.json`, storage policy `wandb-storage-policy-v1`) as the SDK uploads it:
 * one entry per file with its MD5 (base64) and size. Only files uploaded to this server are honoured; reference
 * entries (`ref`: files left in a bucket of the user's) are refused. The artifact digest the SDK declares is the
 * MD5 of the manifest's sorted `name:digest` lines, computed here the same way.
 */
import crypto from 'node:crypto';
import { AppError, excerpt } from '../errors.ts';

export interface ManifestEntry {
  name: string;
  /** base64 MD5, W&B's form. */
  md5: string;
  size: number;
}

const STORAGE_POLICY = 'wandb-storage-policy-v1';
const DIGEST_HEADER = 'wandb-artifact-manifest-v1\n';

function manifestError(message: string): AppError {
  return new AppError('bad_request', `Artifact manifest: ${message}`);
}

function entryOf(name: string, value: unknown): ManifestEntry {
  const entry = (value ?? {}) as Record<string, unknown>;
  if (typeof entry.ref === 'string')
    throw manifestError(
      `entry ${JSON.stringify(excerpt(name))} is a reference (${excerpt(entry.ref)}); this server stores uploaded files only, not references`,
    );
  if (
    typeof entry.digest !== 'string' ||
    typeof entry.size !== 'number' ||
    !Number.isSafeInteger(entry.size) ||
    entry.size < 0
  ) {
    throw manifestError(`entry ${JSON.stringify(excerpt(name))} needs a string digest and a non-negative integer size`);
  }
  return { name, md5: entry.digest, size: entry.size };
}

export function parseManifest(bytes: Buffer): ManifestEntry[] {
  let manifest: Record<string, unknown>;
  try {
    manifest = JSON.parse(bytes.toString('utf8')) as Record<string, unknown>;
  } catch (error) {
    throw manifestError(`not JSON (${(error as Error).message})`);
  }
  if (manifest?.version !== 1)
    throw manifestError(`version ${JSON.stringify(manifest?.version)} is not supported (only 1)`);
  if (manifest.storagePolicy !== STORAGE_POLICY)
    throw manifestError(
      `storage policy ${JSON.stringify(manifest.storagePolicy)} is not supported (only ${STORAGE_POLICY})`,
    );
  const contents = manifest.contents;
  if (typeof contents !== 'object' || contents === null || Array.isArray(contents))
    throw manifestError('contents must be an object of entries');
  return Object.entries(contents).map(([name, value]) => entryOf(name, value));
}

/** The artifact digest W&B computes over a manifest with the MD5 algorithm (hex). */
export function manifestDigest(entries: { name: string; md5: string }[]): string {
  const hash = crypto.createHash('md5').update(DIGEST_HEADER);
  for (const entry of [...entries].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)))
    hash.update(`${entry.name}:${entry.md5}\n`);
  return hash.digest('hex');
}
