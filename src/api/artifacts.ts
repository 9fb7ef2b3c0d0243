/** Artifact versions as upload and listing answer them (decisions.md § Artifacts). */
import { Type } from '@sinclair/typebox';

export const ArtifactVersion = Type.Object({
  entity: Type.String(),
  project: Type.String(),
  name: Type.String(),
  version: Type.String({ pattern: '^v\\d+$' }),
  files: Type.Array(Type.Object({ name: Type.String(), size: Type.Integer(), sha256: Type.String() })),
  /** `wandb-artifact:///{entity}/{project}/{name}:v{K}`, what `training_data_url` takes. */
  url: Type.String(),
  created_at: Type.String(),
});

export const ArtifactVersionList = Type.Object({ object: Type.Literal('list'), data: Type.Array(ArtifactVersion) });
