/**
 * `run.log_artifact` as the W&B SDK performs it, over our artifact store: createArtifact opens a pending
 * artifact, createArtifactFiles hands out one signed upload URL per file, the files and then the manifest are
 * PUT to those URLs, and commitArtifact checks the manifest against what arrived (every entry uploaded with its
 * MD5 and size, nothing else, and the artifact digest the SDK declared) before the files become the next version
 * of entity/project/name, like any upload. Pending artifacts live in the database for an hour at most, a bounded
 * number per entity and in all; their files wait in the blob store's staging area, and a restart keeps both.
 * Knows nothing of GraphQL or HTTP.
 */
import crypto from 'node:crypto';
import { type Readable, Transform } from 'node:stream';
import type { ArtifactVersionRecord } from '../api/artifacts.ts';
import type { BlobStore, StagedFile } from '../artifacts/blob-store.ts';
import type { Clock } from '../clock.ts';
import { AppError, excerpt } from '../errors.ts';
import { newId } from '../ids.ts';
import { type ArtifactService, checkArtifactName, isSafeFileName } from '../services/artifact-service.ts';
import type { Principal } from '../services/auth-service.ts';
import type { PendingArtifactRecord, WandbRepository } from '../store/wandb-repository.ts';
import { manifestDigest, parseManifest } from './manifest.ts';
import type { CreateArtifactFileSpecInput, CreateArtifactInput, CreateArtifactManifestInput } from './schemas.ts';
import { refuseUnsupportedArtifactInput, unsupported } from './unsupported.ts';
import type { UploadTarget, UploadTokens } from './upload-tokens.ts';

/** An artifact as the W&B API shows it: a pending upload, or a committed version of our store. */
export interface WandbArtifactView {
  id: string;
  entity: string;
  project: string;
  name: string;
  type: string;
  state: 'PENDING' | 'COMMITTED';
  versionIndex: number | null;
  digest: string;
  description: string | null;
  metadata: string | null;
  size: number;
  fileCount: number;
  createdAt: string;
}

/** How long an artifact may stay uncommitted; the SDK commits seconds after it creates one. */
const PENDING_TTL_MS = 60 * 60 * 1000;
/**
 * Uncommitted artifacts one entity may hold, and the whole server: the SDK holds one per `log_artifact` in flight
 * for seconds, so these are far above any real use and far below what fills a disk or a table.
 */
export const MAX_PENDING_PER_ENTITY = 500;
export const MAX_PENDING_IN_ALL = 5_000;
/** Expired pending artifacts removed (with their staged files) per createArtifact. */
const SWEEP_BATCH = 50;
const MAX_MANIFEST_BYTES = 16 * 1024 * 1024;
/** Versions uploaded through /v1/preview/artifacts carry no W&B type: they are SFT data sets. */
const UNTYPED_ARTIFACT_TYPE = 'dataset';
const BASE64_MD5 = /^[A-Za-z0-9+/]{22}==$/;

function notPending(id: string): AppError {
  return new AppError(
    'not_found',
    `No pending artifact ${excerpt(id)}: it was committed already, expired (after an hour) or never created on this server`,
  );
}

/** Fails the stream once more than `max` bytes went through it, so an upload cannot outgrow the file limit. */
function limitBytes(max: number): Transform {
  let seen = 0;
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      seen += chunk.length;
      done(
        seen > max
          ? new AppError(
              'payload_too_large',
              `The file is larger than this server's limit of ${max} bytes (ARTIFACT_MAX_FILE_BYTES)`,
            )
          : null,
        chunk,
      );
    },
  });
}

async function readCapped(source: Readable, max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of source.pipe(limitBytes(max))) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

export class WandbArtifacts {
  constructor(
    private readonly artifacts: ArtifactService,
    private readonly blobs: BlobStore,
    private readonly pending: WandbRepository,
    private readonly tokens: UploadTokens,
    private readonly clock: Clock,
    private readonly maxFileBytes: number,
  ) {}

  /** createArtifact: the committed version with the same digest (W&B's deduplication), or a new pending artifact. */
  async create(
    principal: Principal,
    input: CreateArtifactInput,
  ): Promise<{ artifact: WandbArtifactView; latestId: string | null }> {
    refuseUnsupportedArtifactInput(input);
    const name = input.artifactCollectionName as string;
    checkArtifactName('project', input.projectName);
    checkArtifactName('name', name);
    checkArtifactName('artifactTypeName', input.artifactTypeName);
    const entity = this.artifacts.writableEntity(principal, input.entityName);
    if (input.metadata != null) checkJsonObject('metadata', input.metadata);
    await this.sweepExpired();
    const versions = await this.artifacts.allVersions(entity, input.projectName, name);
    const latestId = versions.at(-1)?.id ?? null;
    if (input.enableDigestDeduplication) {
      for (const version of [...versions].reverse()) {
        const view = await this.committedView(entity.name, version);
        if (view.digest === input.digest) return { artifact: view, latestId };
      }
    }
    await this.refuseOverCap(entity);
    const now = this.clock.now();
    const record: PendingArtifactRecord = {
      id: newId(),
      entityId: entity.id,
      project: input.projectName,
      name,
      type: input.artifactTypeName,
      digest: input.digest,
      description: input.description ?? null,
      metadata: input.metadata ?? null,
      stagingId: `wandb-${newId()}`,
      manifest: null,
      createdAt: now.toISOString(),
      expiresAt: new Date(now.getTime() + PENDING_TTL_MS).toISOString(),
    };
    await this.pending.insertPending(record);
    // Counted again with this one in: of requests racing past the first check, the ones over the cap leave again.
    try {
      await this.refuseOverCap(entity, 1);
    } catch (error) {
      await this.pending.remove(record.id);
      throw error;
    }
    return { artifact: this.pendingView(entity.name, record, []), latestId };
  }

  /** createArtifactManifest: where the manifest goes once the SDK knows its MD5 (only full manifests). */
  async manifestUpload(
    principal: Principal,
    input: CreateArtifactManifestInput,
  ): Promise<{ artifactId: string; token: string }> {
    const pending = await this.pendingFor(principal, input.artifactID);
    if (input.type != null && input.type !== 'FULL')
      throw unsupported(`${input.type.toLowerCase()} artifact manifests`);
    return {
      artifactId: pending.id,
      token: this.tokens.sign({ kind: 'manifest', artifactId: pending.id, md5: input.digest }),
    };
  }

  /** createArtifactFiles: one signed upload URL per file, bound to the MD5 the SDK declared for it. */
  async fileUploads(
    principal: Principal,
    specs: CreateArtifactFileSpecInput[],
  ): Promise<{ artifactId: string; name: string; token: string }[]> {
    const found = new Map<string, PendingArtifactRecord>();
    const uploads: { artifactId: string; name: string; token: string }[] = [];
    for (const spec of specs) {
      const pending = found.get(spec.artifactID) ?? (await this.pendingFor(principal, spec.artifactID));
      found.set(spec.artifactID, pending);
      if (spec.uploadPartsInput != null)
        throw unsupported(`Multipart uploads (files of 2 GiB or more, like ${JSON.stringify(excerpt(spec.name))})`);
      if (!isSafeFileName(spec.name)) {
        throw new AppError(
          'bad_request',
          `Artifact file ${JSON.stringify(excerpt(spec.name))}: this server stores flat file names of letters, digits, ".", "_" and "-" (no folders)`,
        );
      }
      if (!BASE64_MD5.test(spec.md5))
        throw new AppError(
          'bad_request',
          `Artifact file ${JSON.stringify(spec.name)}: md5 must be a base64 MD5 digest`,
        );
      uploads.push({
        artifactId: pending.id,
        name: spec.name,
        token: this.tokens.sign({ kind: 'artifact_file', artifactId: pending.id, name: spec.name, md5: spec.md5 }),
      });
    }
    return uploads;
  }

  /** A PUT to an upload URL: the file is staged and kept only when its MD5 is the one its URL was issued for. */
  async receive(target: UploadTarget, body: Readable, declaredLength: number | undefined): Promise<void> {
    if (target.kind === 'run_file') {
      body.resume();
      return;
    }
    const pending = await this.pending.find(target.artifactId);
    if (!pending || pending.expiresAt < this.clock.now().toISOString()) {
      body.resume();
      throw notPending(target.artifactId);
    }
    const max = target.kind === 'manifest' ? MAX_MANIFEST_BYTES : this.maxFileBytes;
    if (declaredLength !== undefined && declaredLength > max) {
      body.resume();
      throw new AppError(
        'payload_too_large',
        `The upload is ${declaredLength} bytes; this server takes at most ${max} (ARTIFACT_MAX_FILE_BYTES)`,
      );
    }
    if (target.kind === 'manifest') {
      const manifest = await readCapped(body, max);
      checkMd5('the manifest', crypto.createHash('md5').update(manifest).digest('base64'), target.md5);
      if (!(await this.pending.setManifest(pending.id, manifest))) throw notPending(pending.id);
      return;
    }
    await this.pending.forgetFile(pending.id, target.name);
    const staged = await this.blobs.stage(pending.stagingId, target.name, body.pipe(limitBytes(max)));
    checkMd5(JSON.stringify(target.name), staged.md5, target.md5);
    if (!(await this.pending.recordFile(pending.id, staged))) {
      // Committed or expired while the bytes arrived: its staging area is gone, and so goes what this upload left.
      await this.blobs.discard(pending.stagingId);
      throw notPending(pending.id);
    }
  }

  /** commitArtifact: the manifest honoured exactly, then the files become the artifact's next version. */
  async commit(principal: Principal, artifactId: string): Promise<WandbArtifactView> {
    const pending = await this.pendingFor(principal, artifactId);
    if (!pending.manifest)
      throw new AppError('bad_request', 'No manifest was uploaded for this artifact before commitArtifact');
    const files = this.checkManifest(pending, pending.manifest, await this.pending.files(pending.id));
    // Only one of two commits racing for the same artifact removes it; the other finds it gone.
    if (!(await this.pending.remove(pending.id))) throw notPending(pending.id);
    const entity = this.entityOf(principal, pending);
    try {
      const version = await this.artifacts.commitStaged(entity, pending, pending.stagingId, files);
      return this.committedView(entity.name, version);
    } finally {
      await this.blobs.discard(pending.stagingId);
    }
  }

  /** The staging areas pending artifacts still use: start-up's sweep of leftover staging leaves them. */
  stagingAreas(): Promise<string[]> {
    return this.pending.stagingIds();
  }

  /** artifact(id): a pending upload of this key's entities, or a committed version it may read. */
  async byId(principal: Principal, id: string): Promise<WandbArtifactView | null> {
    const pending = id === '' ? undefined : await this.pending.find(id);
    const entity = pending && principal.entities.find((candidate) => candidate.id === pending.entityId);
    if (pending && entity) return this.pendingView(entity.name, pending, await this.pending.files(pending.id));
    const found = await this.artifacts.versionById(principal, id);
    return found ? this.committedView(found.entity, found.version) : null;
  }

  /** project.artifact(name): `name`, `name:latest` or `name:vK` of an entity the key may read. */
  async byName(
    principal: Principal,
    target: { entity: string; project: string; name: string },
  ): Promise<WandbArtifactView | null> {
    const match = /^([^:]+)(?::(?:v(\d+)|(latest)))?$/.exec(target.name);
    if (!match)
      throw unsupported(`Artifact aliases other than "latest" and "vK" (${JSON.stringify(excerpt(target.name))})`);
    const version = await this.artifacts.findVersion(principal, {
      ...target,
      name: match[1],
      version: match[2] === undefined ? 'latest' : Number(match[2]),
    });
    return version ? this.committedView(target.entity, version) : null;
  }

  private checkManifest(pending: PendingArtifactRecord, manifest: Buffer, uploaded: StagedFile[]): StagedFile[] {
    const entries = parseManifest(manifest);
    if (entries.length === 0)
      throw new AppError('bad_request', 'Artifact manifest: an artifact needs at least one file');
    const staged = new Map(uploaded.map((file) => [file.name, file]));
    const files = entries.map((entry) => {
      const file = staged.get(entry.name);
      if (!file)
        throw new AppError(
          'bad_request',
          `Artifact manifest: ${JSON.stringify(excerpt(entry.name))} was never uploaded`,
        );
      if (file.md5 !== entry.md5 || file.size !== entry.size) {
        throw new AppError(
          'bad_request',
          `Artifact manifest: ${JSON.stringify(entry.name)} says MD5 ${entry.md5} and ${entry.size} bytes; the upload was ${file.md5} and ${file.size} bytes`,
        );
      }
      return file;
    });
    const listed = new Set(entries.map((entry) => entry.name));
    const extra = uploaded.filter((file) => !listed.has(file.name));
    if (extra.length > 0)
      throw new AppError(
        'bad_request',
        `Artifact manifest: uploaded files missing from it: ${extra.map((file) => JSON.stringify(file.name)).join(', ')}`,
      );
    const digest = manifestDigest(entries);
    if (digest !== pending.digest)
      throw new AppError(
        'bad_request',
        `Artifact manifest: its digest is ${digest}, but createArtifact declared ${pending.digest}`,
      );
    return files;
  }

  private async pendingFor(principal: Principal, id: string): Promise<PendingArtifactRecord> {
    const pending = id === '' ? undefined : await this.pending.find(id);
    if (
      !pending ||
      pending.expiresAt < this.clock.now().toISOString() ||
      !principal.entities.some((entity) => entity.id === pending.entityId)
    )
      throw notPending(id);
    return pending;
  }

  private entityOf(principal: Principal, pending: PendingArtifactRecord): { id: string; name: string } {
    return principal.entities.find((entity) => entity.id === pending.entityId) as { id: string; name: string };
  }

  /** A 429 when the entity (or the server) already holds as many uncommitted artifacts as allowed, `self` counted in. */
  private async refuseOverCap(entity: { id: string; name: string }, self = 0): Promise<void> {
    const now = this.clock.now().toISOString();
    const ofEntity = (await this.pending.countLive(entity.id, now)) - self;
    if (ofEntity >= MAX_PENDING_PER_ENTITY) {
      throw new AppError(
        'too_many_requests',
        `Entity ${JSON.stringify(entity.name)} has ${ofEntity} artifacts created and not committed, this server's limit (${MAX_PENDING_PER_ENTITY}): commit them, or wait for them to expire an hour after they were created`,
      );
    }
    const inAll = (await this.pending.countLive(null, now)) - self;
    if (inAll >= MAX_PENDING_IN_ALL) {
      throw new AppError(
        'too_many_requests',
        `This server holds ${inAll} artifacts created and not committed, its limit (${MAX_PENDING_IN_ALL}); retry once some are committed or expire`,
      );
    }
  }

  private async sweepExpired(): Promise<void> {
    for (const expired of await this.pending.expired(this.clock.now().toISOString(), SWEEP_BATCH)) {
      if (await this.pending.remove(expired.id)) await this.blobs.discard(expired.stagingId);
    }
  }

  private pendingView(entity: string, pending: PendingArtifactRecord, files: StagedFile[]): WandbArtifactView {
    return {
      id: pending.id,
      entity,
      project: pending.project,
      name: pending.name,
      type: pending.type,
      state: 'PENDING',
      versionIndex: null,
      digest: pending.digest,
      description: pending.description,
      metadata: pending.metadata,
      size: files.reduce((sum, file) => sum + file.size, 0),
      fileCount: files.length,
      createdAt: pending.createdAt,
    };
  }

  private async committedView(entity: string, version: ArtifactVersionRecord): Promise<WandbArtifactView> {
    return {
      id: version.id,
      entity,
      project: version.project,
      name: version.name,
      type: version.type ?? UNTYPED_ARTIFACT_TYPE,
      state: 'COMMITTED',
      versionIndex: version.version,
      digest: manifestDigest(await this.md5s(version)),
      description: null,
      metadata: version.metadata,
      size: version.files.reduce((sum, file) => sum + file.size, 0),
      fileCount: version.files.length,
      createdAt: version.createdAt,
    };
  }

  /** Each file's MD5, hashed from the stored bytes for versions uploaded before MD5s were recorded. */
  private async md5s(version: ArtifactVersionRecord): Promise<{ name: string; md5: string }[]> {
    const key = this.artifacts.storageKey(version);
    return Promise.all(
      version.files.map(async (file) => {
        if (file.md5) return { name: file.name, md5: file.md5 };
        const hash = crypto.createHash('md5');
        for await (const chunk of this.artifacts.openFile(key, file.name)) hash.update(chunk as Buffer);
        return { name: file.name, md5: hash.digest('base64') };
      }),
    );
  }
}

function checkMd5(what: string, actual: string, declared: string): void {
  if (actual !== declared)
    throw new AppError(
      'bad_request',
      `Digest mismatch for ${what}: the upload's MD5 is ${actual}, but ${declared} was declared for it; nothing was kept`,
    );
}

function checkJsonObject(field: string, text: string): void {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new AppError('bad_request', `${field} must be a JSON object`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new AppError('bad_request', `${field} must be a JSON object`);
}
