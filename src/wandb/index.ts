/** The W&B API's services, wired together: the signed upload URLs are shared by runs and artifacts. */

import type { BlobStore } from '../artifacts/blob-store.ts';
import type { Clock } from '../clock.ts';
import type { ArtifactService } from '../services/artifact-service.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { TrajectoryRepository } from '../store/trajectory-repository.ts';
import { WandbArtifacts } from './artifacts.ts';
import { WandbHistory } from './history.ts';
import { WandbRuns } from './runs.ts';
import { UploadTokens } from './upload-tokens.ts';

export interface WandbServices {
  tokens: UploadTokens;
  runs: WandbRuns;
  artifacts: WandbArtifacts;
  history: WandbHistory;
}

export function createWandbServices(deps: {
  artifacts: ArtifactService;
  blobs: BlobStore;
  clock: Clock;
  maxFileBytes: number;
  models: ModelRepository;
  runMetrics: TrajectoryRepository;
}): WandbServices {
  const tokens = new UploadTokens(deps.clock);
  const runs = new WandbRuns(tokens);
  return {
    tokens,
    runs,
    artifacts: new WandbArtifacts(deps.artifacts, deps.blobs, tokens, deps.clock, deps.maxFileBytes),
    history: new WandbHistory(runs, deps.models, deps.runMetrics, deps.clock),
  };
}
