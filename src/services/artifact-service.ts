/**
 * Artifacts: immutable versions v0, v1, … of named file sets per (entity, project, name), uploaded as
 * streams, and the `wandb-artifact:///entity/project/name:vK|latest` URLs that SFT jobs read from.
 * Writes need a key that may act for the entity; reads of another entity's artifacts are plain 404s.
 */
import type { Readable } from 'node:stream';
import { type ArtifactVersion, type ArtifactVersionRecord, toArtifactVersion } from '../api/artifacts.ts';
import type { BlobStore, StagedFile } from '../artifacts/blob-store.ts';
import type { Clock } from '../clock.ts';
import { AppError, excerpt, type FieldProblem, validationError } from '../errors.ts';
import { newId } from '../ids.ts';
import type { ArtifactRepository } from '../store/artifact-repository.ts';
import type { Principal } from './auth-service.ts';

export const ARTIFACT_NAME = /^[A-Za-z0-9._-]{1,128}$/;
const FILE_NAME = /^[A-Za-z0-9._-]{1,255}$/;
const ARTIFACT_URL = /^wandb-artifact:\/\/\/([^/]+)\/([^/]+)\/([^/:]+):(v(\d+)|latest)$/;

export function isSafeFileName(name: string): boolean {
  return FILE_NAME.test(name) && name !== '.' && name !== '..';
}

/** A 422 naming `kind` unless `value` is a valid project or artifact name. */
export function checkArtifactName(kind: string, value: string): void {
  if (!ARTIFACT_NAME.test(value) || value === '.' || value === '..') {
    throw validationError([
      {
        loc: ['path', kind],
        msg: `${kind} must be 1-128 letters, digits, ".", "_" or "-"`,
        type: 'string_pattern_mismatch',
      },
    ]);
  }
}

export class ArtifactService {
  constructor(
    private readonly artifacts: ArtifactRepository,
    private readonly blobs: BlobStore,
    private readonly clock: Clock,
  ) {}

  /** Where a version's files live in the blob store. */
  storageKey(version: ArtifactVersionRecord): string {
    return `${version.entityId}/${version.project}/${version.name}/v${version.version}`;
  }

  writableEntity(principal: Principal, entityName: string): { id: string; name: string } {
    const entity = principal.entities.find((candidate) => candidate.name === entityName);
    if (!entity)
      throw new AppError('forbidden', `This API key may not write artifacts of entity ${JSON.stringify(entityName)}`);
    return entity;
  }

  private readableEntity(principal: Principal, entityName: string): { id: string; name: string } {
    const entity = principal.entities.find((candidate) => candidate.name === entityName);
    if (!entity) throw new AppError('not_found', 'Artifact not found');
    return entity;
  }

  /** Streams every file into staging, then commits them as the next version; nothing is kept on failure. */
  async upload(
    principal: Principal,
    target: { entity: string; project: string; name: string },
    files: AsyncIterable<{ field: string; fileName: string | undefined; stream: Readable }>,
  ): Promise<ArtifactVersion> {
    checkArtifactName('project', target.project);
    checkArtifactName('name', target.name);
    const entity = this.writableEntity(principal, target.entity);
    const stagingId = newId();
    const staged: StagedFile[] = [];
    try {
      for await (const file of files) {
        // busboy calls a part with a content type a file even when it names no file.
        if (!file.fileName) {
          file.stream.resume();
          throw validationError([
            {
              loc: ['body', excerpt(file.field)],
              msg: 'this part has a content type but no filename; send files with Content-Disposition: form-data; name="file"; filename="..."',
              type: 'missing',
            },
          ]);
        }
        if (!isSafeFileName(file.fileName)) {
          file.stream.resume();
          throw validationError([
            {
              loc: ['body', 'files', file.fileName],
              msg: 'file names are 1-255 letters, digits, ".", "_" or "-", without path separators',
              type: 'value_error',
            },
          ]);
        }
        if (staged.some((existing) => existing.name === file.fileName)) {
          file.stream.resume();
          throw validationError([
            { loc: ['body', 'files', file.fileName], msg: 'the same file name appears twice', type: 'value_error' },
          ]);
        }
        staged.push(await this.blobs.stage(stagingId, file.fileName, file.stream));
      }
      if (staged.length === 0)
        throw validationError([
          { loc: ['body', 'files'], msg: 'an artifact needs at least one file', type: 'missing' },
        ]);
      const version = await this.commitStaged(
        entity,
        { ...target, id: newId(), type: null, metadata: null },
        stagingId,
        staged,
      );
      return toArtifactVersion(entity.name, version);
    } finally {
      await this.blobs.discard(stagingId);
    }
  }

  /** Makes the files of a staging area the next version of the artifact (its row id, type and metadata as given). */
  async commitStaged(
    entity: { id: string },
    target: { id: string; project: string; name: string; type: string | null; metadata: string | null },
    stagingId: string,
    files: StagedFile[],
  ): Promise<ArtifactVersionRecord> {
    return this.artifacts.insertNextVersion(
      { ...target, entityId: entity.id, createdAt: this.clock.now().toISOString() },
      files,
      (number) => this.blobs.commit(stagingId, `${entity.id}/${target.project}/${target.name}/v${number}`),
    );
  }

  /** A version by its id, with its entity's name, when the key may read that entity. */
  async versionById(
    principal: Principal,
    id: string,
  ): Promise<{ entity: string; version: ArtifactVersionRecord } | undefined> {
    const version = await this.artifacts.findById(id);
    const entity = version && principal.entities.find((candidate) => candidate.id === version.entityId);
    return entity && version && { entity: entity.name, version };
  }

  /** A version by number or 'latest' (undefined when there is none, or the key may not read the entity). */
  async findVersion(
    principal: Principal,
    target: { entity: string; project: string; name: string; version: number | 'latest' },
  ): Promise<ArtifactVersionRecord | undefined> {
    const entity = principal.entities.find((candidate) => candidate.name === target.entity);
    return entity && this.artifacts.find(entity.id, target.project, target.name, target.version);
  }

  /** Every version of an artifact, oldest first (none when there are none). */
  async allVersions(entity: { id: string }, project: string, name: string): Promise<ArtifactVersionRecord[]> {
    return this.artifacts.versions(entity.id, project, name);
  }

  async versions(
    principal: Principal,
    target: { entity: string; project: string; name: string },
  ): Promise<ArtifactVersion[]> {
    const entity = this.readableEntity(principal, target.entity);
    const versions = await this.artifacts.versions(entity.id, target.project, target.name);
    if (versions.length === 0) throw new AppError('not_found', 'Artifact not found');
    return versions.map((version) => toArtifactVersion(entity.name, version));
  }

  async download(
    principal: Principal,
    target: { entity: string; project: string; name: string; version: number | 'latest'; file: string },
  ): Promise<{ stream: Readable; size: number }> {
    const entity = this.readableEntity(principal, target.entity);
    const version = await this.artifacts.find(entity.id, target.project, target.name, target.version);
    const file = version?.files.find((candidate) => candidate.name === target.file);
    if (!version || !file) throw new AppError('not_found', 'Artifact file not found');
    return { stream: this.blobs.open(this.storageKey(version), file.name), size: file.size };
  }

  /**
   * Resolves a `training_data_url` for a submit: the artifact version and how to open its files, or the
   * field problems that make the submit a 422.
   */
  async resolveTrainingData(
    principal: Principal,
    url: string,
    loc: (string | number)[],
  ): Promise<{ version: ArtifactVersionRecord; key: string } | { problems: FieldProblem[] }> {
    const match = ARTIFACT_URL.exec(url);
    if (!match)
      return {
        problems: [
          {
            loc,
            msg: 'expected wandb-artifact:///{entity}/{project}/{name}:v{K} or :latest (no other scheme is fetched)',
            type: 'value_error',
          },
        ],
      };
    const [, entityName, project, name, , number] = match;
    const entity = principal.entities.find((candidate) => candidate.name === entityName);
    const version =
      entity && (await this.artifacts.find(entity.id, project, name, number === undefined ? 'latest' : Number(number)));
    if (!version)
      return {
        problems: [
          {
            loc,
            msg: `no artifact ${entityName}/${project}/${name}:${match[4]} that this key may use`,
            type: 'value_error',
          },
        ],
      };
    return { version, key: this.storageKey(version) };
  }

  openFile(key: string, file: string): Readable {
    return this.blobs.open(key, file);
  }
}
