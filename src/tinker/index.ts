/** The Tinker API's services, wired from what the rest of the server already has. */
import type { Clock } from '../clock.ts';
import type { BaseModelRuntime } from '../services/base-model-runtime.ts';
import type { BaseModelRegistry } from '../services/base-models.ts';
import { CheckpointExporter } from '../services/checkpoint-export.ts';
import type { ModelService } from '../services/model-service.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { TinkerRepository } from '../store/tinker-repository.ts';
import type { CheckpointPublisher } from '../training/checkpoint-publisher.ts';
import { TinkerTrainer } from '../training/tinker/trainer.ts';
import { TinkerArchives } from './archives.ts';
import { TinkerFutures } from './futures.ts';
import { TinkerModels } from './models.ts';
import { TinkerProvenance } from './provenance.ts';
import { TinkerRest } from './rest.ts';
import { TinkerSampling } from './sampling.ts';
import { TinkerTraining } from './training.ts';

export interface TinkerServices {
  futures: TinkerFutures;
  models: TinkerModels;
  training: TinkerTraining;
  sampling: TinkerSampling;
  rest: TinkerRest;
  archives: TinkerArchives;
}

export interface TinkerDeps {
  repository: TinkerRepository;
  models: ModelRepository;
  modelService: ModelService;
  baseModels: BaseModelRegistry;
  runtime: BaseModelRuntime;
  checkpoints: CheckpointPublisher;
  clock: Clock;
  log: (message: string, error: unknown) => void;
}

export function createTinkerServices(deps: TinkerDeps): TinkerServices {
  const futures = new TinkerFutures(deps.repository, deps.clock, deps.log);
  const models = new TinkerModels(
    deps.repository,
    deps.models,
    deps.modelService,
    deps.baseModels,
    deps.runtime,
    deps.clock,
  );
  const provenance = new TinkerProvenance(deps.repository, deps.clock);
  const sampling = new TinkerSampling(
    deps.repository,
    models,
    deps.baseModels,
    deps.runtime,
    futures,
    provenance,
    deps.clock,
  );
  const trainer = new TinkerTrainer(deps.runtime, deps.models, deps.checkpoints);
  const training = new TinkerTraining(models, deps.repository, trainer, futures, sampling, provenance, deps.clock);
  const archives = new TinkerArchives(
    models,
    deps.repository,
    deps.models,
    new CheckpointExporter(deps.modelService, deps.models),
    deps.clock,
  );
  return {
    futures,
    models,
    training,
    sampling,
    rest: new TinkerRest(models, deps.repository, deps.models, deps.modelService),
    archives,
  };
}
