/** The W&B API's services, wired together: the signed upload URLs are shared by runs and artifacts. */
import type { Clock } from '../clock.ts';
import type { BlobStore } from '../artifacts/blob-store.ts';
import type { ArtifactService } from '../services/artifact-service.ts';
import { UploadTokens } from './upload-tokens.ts';
import { WandbArtifacts } from './artifacts.ts';
import { WandbRuns } from './runs.ts';

export interface WandbServices {
  tokens: UploadTokens;
  runs: WandbRuns;
  artifacts: WandbArtifacts;
}

export function createWandbServices(deps: { artifacts: ArtifactService; blobs: BlobStore; clock: Clock; maxFileBytes: number }): WandbServices {
  const tokens = new UploadTokens(deps.clock);
  return { tokens, runs: new WandbRuns(tokens), artifacts: new WandbArtifacts(deps.artifacts, deps.blobs, tokens, deps.clock, deps.maxFileBytes) };
}
