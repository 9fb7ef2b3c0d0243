/** The composition root: repositories and services wired from a store, a clock and the configuration. */
import type { Clock } from './clock.ts';
import type { Config } from './config.ts';
import type { Store } from './store/db.ts';
import { IdentityRepository } from './store/identity-repository.ts';
import { ModelRepository } from './store/model-repository.ts';
import { TrajectoryRepository } from './store/trajectory-repository.ts';
import { AuthService } from './services/auth-service.ts';
import { BaseModelRegistry } from './services/base-models.ts';
import { HealthService, type Probe } from './services/health-service.ts';
import { ModelService } from './services/model-service.ts';
import { TrajectoryService } from './services/trajectory-service.ts';

export interface Services {
  auth: AuthService;
  baseModels: BaseModelRegistry;
  models: ModelService;
  trajectories: TrajectoryService;
  health: HealthService;
}

export interface ContextOptions {
  config: Config;
  store: Store;
  clock: Clock;
  probes: { engine: Probe; queue: Probe };
}

export function createServices({ config, store, clock, probes }: ContextOptions): Services {
  const identityRepository = new IdentityRepository(store.db);
  const modelRepository = new ModelRepository(store.db);
  const trajectoryRepository = new TrajectoryRepository(store.db);
  const baseModels = new BaseModelRegistry(config.baseModels, config.defaultBaseModel);
  const models = new ModelService(modelRepository, baseModels, clock, config.dataDir);
  return {
    auth: new AuthService(identityRepository, clock),
    baseModels,
    models,
    trajectories: new TrajectoryService(models, modelRepository, trajectoryRepository, clock),
    health: new HealthService(store.db, probes),
  };
}
