/**
 * The W&B features this server's W&B API does not serve, refused by name: it serves what `wandb.init`,
 * `run.log_artifact`, `Artifact.wait` and `run.finish` need to store an artifact, and nothing else of W&B.
 */
import { AppError, excerpt } from '../errors.ts';
import type { CreateArtifactInput } from './schemas.ts';

export function unsupported(feature: string): AppError {
  return new AppError(
    'bad_request',
    `${feature}: not supported by this server, which serves only the part of W&B's API that wandb.init, run.log_artifact, Artifact.wait and run.finish use to store an artifact`,
  );
}

/** What a createArtifact may not ask for here: other aliases than "latest", tags, TTLs, other digests, linking. */
export function refuseUnsupportedArtifactInput(input: CreateArtifactInput): void {
  const name = input.artifactCollectionName;
  if (!name)
    throw new AppError('bad_request', 'createArtifact: artifactCollectionName (the artifact name) is required');
  const aliases = (input.aliases ?? []).filter(
    (alias) => alias.alias !== 'latest' || alias.artifactCollectionName !== name,
  );
  if (aliases.length > 0)
    throw unsupported(
      `Artifact aliases other than "latest" (${aliases.map((alias) => JSON.stringify(excerpt(alias.alias))).join(', ')})`,
    );
  if (input.artifactCollectionNames?.some((other) => other !== name))
    throw unsupported('Logging one artifact to several collections');
  if (input.digestAlgorithm != null && input.digestAlgorithm !== 'MANIFEST_MD5')
    throw unsupported(`The ${input.digestAlgorithm} artifact digest (only MANIFEST_MD5)`);
  if ((input.tags ?? []).length > 0) throw unsupported('Artifact tags');
  if (input.labels != null) throw unsupported('Artifact labels');
  if (input.ttlDurationSeconds != null) throw unsupported('Artifact TTLs');
  if (input.distributedID != null) throw unsupported('Distributed artifacts (distributed_id)');
  if (input.storageRegion != null) throw unsupported('Artifact storage regions');
}
