/** The W&B API's services, wired together: the signed upload URLs are shared by runs and artifacts. */
import type { Clock } from '../clock.ts';
import type { BlobStore } from '../artifacts/blob-store.ts';
import type { ArtifactService } from '../services/artifact-service.ts';
import type { SecretStore } from '../signing.ts';
import type { WandbRepository } from '../store/wandb-repository.ts';
import { UploadTokens } from './upload-tokens.ts';
import { WandbArtifacts } from './artifacts.ts';
import { WandbRuns } from './runs.ts';

export interface WandbServices {
  tokens: UploadTokens;
  runs: WandbRuns;
  artifacts: WandbArtifacts;
}

export function createWandbServices(deps: {
  artifacts: ArtifactService;
  blobs: BlobStore;
  pending: WandbRepository;
  secrets: SecretStore;
  clock: Clock;
  maxFileBytes: number;
}): WandbServices {
  const tokens = new UploadTokens(deps.clock, deps.secrets);
  return { tokens, runs: new WandbRuns(tokens), artifacts: new WandbArtifacts(deps.artifacts, deps.blobs, deps.pending, tokens, deps.clock, deps.maxFileBytes) };
}
