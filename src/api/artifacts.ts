/** Artifact versions as upload and listing answer them (decisions.md § Artifacts). */
import { type Static, Type } from '@sinclair/typebox';

export const ArtifactFile = Type.Object({ name: Type.String(), size: Type.Integer(), sha256: Type.String() });
export type ArtifactFile = Static<typeof ArtifactFile>;
/** A file as a version stores it: also its base64 MD5 (W&B's digest), kept since W&B uploads came (older rows lack it). */
export type StoredArtifactFile = ArtifactFile & { md5?: string };

export const ArtifactVersion = Type.Object({
  entity: Type.String(),
  project: Type.String(),
  name: Type.String(),
  version: Type.String({ pattern: '^v\\d+$' }),
  files: Type.Array(ArtifactFile),
  /** `wandb-artifact:///{entity}/{project}/{name}:v{K}`, what `training_data_url` takes. */
  url: Type.String(),
  created_at: Type.String(),
});
export type ArtifactVersion = Static<typeof ArtifactVersion>;

/** A stored version as the API answers it, named by the entity's name (the record holds its id). */
export function toArtifactVersion(entityName: string, record: ArtifactVersionRecord): ArtifactVersion {
  const tag = `v${record.version}`;
  return {
    entity: entityName,
    project: record.project,
    name: record.name,
    version: tag,
    files: record.files.map(({ name, size, sha256 }) => ({ name, size, sha256 })),
    url: `wandb-artifact:///${entityName}/${record.project}/${record.name}:${tag}`,
    created_at: record.createdAt,
  };
}

export const ArtifactVersionList = Type.Object({ object: Type.Literal('list'), data: Type.Array(ArtifactVersion) });

/** An artifact version as the repository answers it (files parsed). */
export interface ArtifactVersionRecord {
  id: string;
  entityId: string;
  project: string;
  name: string;
  version: number;
  files: StoredArtifactFile[];
  /** W&B's artifact type and metadata (JSON text) when the version came through the W&B API; null otherwise. */
  type: string | null;
  metadata: string | null;
  createdAt: string;
}
