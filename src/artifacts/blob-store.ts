/**
 * Where artifact bytes live, behind an interface an S3-compatible store can implement later. The local
 * store writes under a folder: uploads stream into a staging area (hashed as they go, never held in
 * memory) and are moved into place only when their version is committed.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { StoredArtifactFile } from '../api/artifacts.ts';

/** A staged file is listed in its version as it was hashed on the way in (MD5 too: W&B's SDK digests with it). */
export type StagedFile = StoredArtifactFile & { md5: string };

export interface BlobStore {
  /** Streams `source` into the staging area `stagingId`; the hash and size are computed on the way. */
  stage(stagingId: string, fileName: string, source: Readable): Promise<StagedFile>;
  /** Moves a staging area to its final key (a folder of files). */
  commit(stagingId: string, key: string): Promise<void>;
  discard(stagingId: string): Promise<void>;
  open(key: string, fileName: string): Readable;
  exists(key: string, fileName: string): Promise<boolean>;
  /** Removes staging areas a crash left behind, except those named in `keep` (uploads still pending). */
  sweepStaging(keep?: ReadonlySet<string>): Promise<number>;
}

export class LocalBlobStore implements BlobStore {
  constructor(private readonly root: string) {}

  private stagingDir(stagingId: string): string {
    return path.join(this.root, '.staging', stagingId);
  }

  private keyDir(key: string): string {
    const resolved = path.resolve(this.root, key);
    if (!resolved.startsWith(path.resolve(this.root) + path.sep)) throw new Error(`blob key escapes the store: ${key}`);
    return resolved;
  }

  async stage(stagingId: string, fileName: string, source: Readable): Promise<StagedFile> {
    const dir = this.stagingDir(stagingId);
    await fsp.mkdir(dir, { recursive: true });
    const sha256 = crypto.createHash('sha256');
    const md5 = crypto.createHash('md5');
    let size = 0;
    source.on('data', (chunk: Buffer) => {
      sha256.update(chunk);
      md5.update(chunk);
      size += chunk.length;
    });
    await pipeline(source, fs.createWriteStream(path.join(dir, fileName)));
    return { name: fileName, size, sha256: sha256.digest('hex'), md5: md5.digest('base64') };
  }

  async commit(stagingId: string, key: string): Promise<void> {
    const target = this.keyDir(key);
    await fsp.mkdir(path.dirname(target), { recursive: true });
    await fsp.rm(target, { recursive: true, force: true });
    await fsp.rename(this.stagingDir(stagingId), target);
  }

  async discard(stagingId: string): Promise<void> {
    await fsp.rm(this.stagingDir(stagingId), { recursive: true, force: true });
  }

  open(key: string, fileName: string): Readable {
    return fs.createReadStream(path.join(this.keyDir(key), fileName));
  }

  async exists(key: string, fileName: string): Promise<boolean> {
    return fsp.access(path.join(this.keyDir(key), fileName)).then(
      () => true,
      () => false,
    );
  }

  async sweepStaging(keep: ReadonlySet<string> = new Set()): Promise<number> {
    const staging = path.join(this.root, '.staging');
    const left = (await fsp.readdir(staging).catch(() => [] as string[])).filter((entry) => !keep.has(entry));
    for (const entry of left) await fsp.rm(path.join(staging, entry), { recursive: true, force: true });
    return left.length;
  }
}
