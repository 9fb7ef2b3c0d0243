/** The Tinker API's services, wired from what the rest of the server already has. */
import type { Clock } from '../../clock.ts';
import type { CheckpointPublisher } from '../checkpoint-publisher.ts';
import type { ModelRepository } from '../../store/model-repository.ts';
import type { TinkerRepository } from '../../store/tinker-repository.ts';
import type { BaseModelRegistry } from '../base-models.ts';
import type { BaseModelRuntime } from '../base-model-runtime.ts';
import type { ModelService } from '../model-service.ts';
import { CheckpointExporter } from '../checkpoint-export.ts';
import { TinkerArchives } from './tinker-archives.ts';
import { TinkerFutures } from './futures.ts';
import { TinkerModels } from './tinker-models.ts';
import { TinkerRest } from './tinker-rest.ts';
import { TinkerSampling } from './tinker-sampling.ts';
import { TinkerTraining } from './tinker-training.ts';

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
  const models = new TinkerModels(deps.repository, deps.models, deps.modelService, deps.baseModels, deps.runtime, deps.clock);
  const sampling = new TinkerSampling(deps.repository, models, deps.baseModels, deps.runtime, futures, deps.clock);
  const training = new TinkerTraining(models, deps.repository, deps.models, deps.runtime, deps.checkpoints, futures, sampling, deps.clock);
  const archives = new TinkerArchives(models, deps.repository, deps.models, new CheckpointExporter(deps.modelService, deps.models), deps.clock);
  return { futures, models, training, sampling, rest: new TinkerRest(models, deps.repository, deps.models, deps.modelService), archives };
}
