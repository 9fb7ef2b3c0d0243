/** The composition root: repositories and services wired from a store, a clock and the configuration. */
import path from 'node:path';
import { type BlobStore, LocalBlobStore } from './artifacts/blob-store.ts';
import type { Clock } from './clock.ts';
import type { Config } from './config.ts';
import { PromptWorker } from './conversation/prompt-worker.ts';
import { TemplateSandbox } from './conversation/template-sandbox.ts';
import { samplerKindOf } from './engine/vllm/config.ts';
import type { ServingDoors } from './http/serving-routes.ts';
import { JobQueue } from './jobs/queue.ts';
import type { JobRunner } from './jobs/worker.ts';
import { Metrics } from './metrics.ts';
import { AdapterImporter, engineAdapterCheck } from './services/adapter-import.ts';
import { ArtifactService } from './services/artifact-service.ts';
import { AuthService } from './services/auth-service.ts';
import { BaseModelRuntime, type RuntimeEngines } from './services/base-model-runtime.ts';
import { BaseModelRegistry } from './services/base-models.ts';
import { CheckpointExporter } from './services/checkpoint-export.ts';
import { DashboardService } from './services/dashboard-service.ts';
import { HealthService, type Probe } from './services/health-service.ts';
import { ModelLineage } from './services/model-lineage.ts';
import { ModelResolver } from './services/model-resolver.ts';
import { ModelService } from './services/model-service.ts';
import { RetentionService } from './services/retention.ts';
import { ServedModelsService } from './services/served-models-service.ts';
import { TrajectoryService } from './services/trajectory-service.ts';
import { ChatDoor } from './serving/chat/door.ts';
import { CompletionsDoor } from './serving/completions/door.ts';
import { MessagesDoor } from './serving/messages/door.ts';
import { ResponsesDoor } from './serving/responses/door.ts';
import { ServingService } from './serving/service.ts';
import { ArtifactRepository } from './store/artifact-repository.ts';
import { DashboardRepository } from './store/dashboard-repository.ts';
import type { Store } from './store/db.ts';
import { IdentityRepository } from './store/identity-repository.ts';
import { JobRepository } from './store/job-repository.ts';
import { ModelRepository } from './store/model-repository.ts';
import { ResponseRepository } from './store/response-repository.ts';
import { TinkerRepository } from './store/tinker-repository.ts';
import { TrainedTokenRepository } from './store/trained-token-repository.ts';
import { TrajectoryRepository } from './store/trajectory-repository.ts';
import { createTinkerServices, type TinkerServices } from './tinker/index.ts';
import { CheckpointPublisher } from './training/checkpoint-publisher.ts';
import { defaultLearningRate } from './training/defaults.ts';
import { payloadView, TrainingJobService } from './training/job-service.ts';
import { KlReferenceResolver } from './training/rl/kl-reference.ts';
import { createRlRunner } from './training/rl/runner.ts';
import { CheckpointWriter } from './training/session.ts';
import { createSftRunner } from './training/sft/runner.ts';
import { createWandbServices, type WandbServices } from './wandb/index.ts';

export interface Services {
  auth: AuthService;
  baseModels: BaseModelRegistry;
  models: ModelService;
  served: ServedModelsService;
  trajectories: TrajectoryService;
  health: HealthService;
  queue: JobQueue;
  trainingJobs: TrainingJobService;
  repositories: {
    models: ModelRepository;
    trajectories: TrajectoryRepository;
    jobs: JobRepository;
    trainedTokens: TrainedTokenRepository;
  };
  runtime: BaseModelRuntime;
  /** The serving doors (chat completions, completions, Responses, Messages) over the one pipeline. */
  doors: ServingDoors;
  runners: Record<'rl' | 'sft', JobRunner>;
  artifacts: ArtifactService;
  blobs: BlobStore;
  dashboard: DashboardService;
  /** Renders request-supplied chat templates; null unless TRUST_REQUEST_CHAT_TEMPLATE=on. Closed with the server. */
  templateSandbox: TemplateSandbox | null;
  /** Renders and tokenizes large chat prompts off the event loop (a thread started at the first). Closed with the server. */
  promptWorker: PromptWorker;
  metrics: Metrics;
  exports: CheckpointExporter;
  lineage: ModelLineage;
  imports: AdapterImporter;
  retention: RetentionService;
  tinker: TinkerServices;
  wandb: WandbServices;
}

export interface ContextOptions {
  config: Config;
  store: Store;
  clock: Clock;
  /** The engines by role, or null when this process serves without one (ENGINE=off, or tests of the HTTP layer). */
  engines?: RuntimeEngines | null;
  /** How the system check asks whether the engines work (and what it shows of them); by default a `stats` round trip. */
  engineProbe?: Probe;
  /** Called after a job is queued, so a worker can start it without waiting for its next poll. */
  onJobSubmitted?: () => void;
  /** Called after a cancel of a running job was recorded, so a worker in this process stops it at once. */
  onCancelRequested?: (jobId: string) => void;
  /** Where failures of background work without a caller to answer (Tinker futures) are logged. */
  logError?: (message: string, error: unknown) => void;
}

function createRepositories(store: Store) {
  return {
    identity: new IdentityRepository(store.db),
    models: new ModelRepository(store.db),
    trajectories: new TrajectoryRepository(store.db),
    trainedTokens: new TrainedTokenRepository(store.db),
    jobs: new JobRepository(store.db, store.dialect),
    artifacts: new ArtifactRepository(store.db, store.dialect),
    dashboard: new DashboardRepository(store.db),
    tinker: new TinkerRepository(store.db),
    responses: new ResponseRepository(store.db),
  };
}

type Repositories = ReturnType<typeof createRepositories>;

function createRunners(
  queue: JobQueue,
  checkpoints: CheckpointWriter,
  repositories: Repositories,
  trajectories: TrajectoryService,
  artifacts: ArtifactService,
): Services['runners'] {
  return {
    rl: createRlRunner({
      queue,
      checkpoints,
      storeTrajectories: (modelId, split, step, groups) => trajectories.store(modelId, split, step, groups),
      storeTrainedTokens: (modelId, step, trained) => repositories.trainedTokens.replaceStep(modelId, step, trained),
      rewardSpreadHistory: (modelId) => trajectories.rewardSpreadHistory(modelId),
    }),
    sft: createSftRunner({ queue, checkpoints, openArtifactFile: (key, file) => artifacts.openFile(key, file) }),
  };
}

/** The serving doors with the workers the pipeline owns: the prompt worker, and the request-template sandbox (only when trusted). */
function createServing(
  config: Config,
  core: { resolver: ModelResolver; runtime: BaseModelRuntime; responses: ResponseRepository; clock: Clock },
): Pick<Services, 'doors' | 'templateSandbox' | 'promptWorker'> {
  const { resolver, runtime } = core;
  const templateSandbox = config.trustRequestChatTemplate ? new TemplateSandbox() : null;
  const promptWorker = new PromptWorker();
  const serving = new ServingService(resolver, runtime, {
    logprobsByDefault: config.logprobsByDefault,
    maxCompletionTokens: config.maxCompletionTokens,
    requestTemplates: templateSandbox,
    prompts: promptWorker,
  });
  const doors = {
    chat: new ChatDoor(serving),
    completions: new CompletionsDoor(serving),
    responses: new ResponsesDoor(serving, core.responses, () => core.clock.now()),
    messages: new MessagesDoor(serving),
  };
  return { doors, templateSandbox, promptWorker };
}

/** What the other services are built on: repositories, the queue, the engines' runtime, models and checkpoints. */
function createCore({ config, store, clock, engines = null, onCancelRequested }: ContextOptions) {
  const repositories = createRepositories(store);
  const baseModels = new BaseModelRegistry(config.baseModels, config.defaultBaseModel, engines?.support ?? null);
  const queue = new JobQueue(repositories.jobs, clock, path.join(config.dataDir, 'jobs'), {
    leaseMs: config.jobLeaseMs,
  });
  /** Records the cancel, then tells this process's worker so a running job stops at once. */
  const cancelJob = async (jobId: string) => {
    const after = await queue.cancel(jobId);
    if (after?.status === 'RUNNING') onCancelRequested?.(jobId);
    return after;
  };
  const runtime = new BaseModelRuntime(baseModels, engines, config.serving.dtype);
  const cancelJobsOf = async (modelId: string) => {
    for (const job of await repositories.jobs.unfinishedJobsOfModel(modelId)) await cancelJob(job.id);
  };
  const models = new ModelService(repositories.models, baseModels, clock, config.dataDir, cancelJobsOf, (baseId) =>
    runtime.checkSampler(baseId),
  );
  const blobs = new LocalBlobStore(path.join(config.dataDir, 'artifacts'));
  const retention = new RetentionService(models, repositories.models, config.retention);
  const publisher = new CheckpointPublisher(
    repositories.models,
    models,
    repositories.trajectories,
    runtime,
    clock,
    retention,
  );
  return {
    repositories,
    baseModels,
    queue,
    cancelJob,
    runtime,
    models,
    resolver: new ModelResolver(repositories.models, baseModels),
    blobs,
    artifacts: new ArtifactService(repositories.artifacts, blobs, clock),
    trajectories: new TrajectoryService(models, repositories.models, repositories.trajectories, clock),
    retention,
    publisher,
    checkpoints: new CheckpointWriter(repositories.models, runtime, publisher),
  };
}

type Core = ReturnType<typeof createCore>;

/** Training jobs, their runners and the dashboard that shows them. */
function createTraining(core: Core, tinker: TinkerServices, onJobSubmitted?: () => void) {
  const { repositories, baseModels, queue, runtime, models, artifacts } = core;
  return {
    queue,
    trainingJobs: new TrainingJobService(
      models,
      repositories.jobs,
      queue,
      (baseId) => defaultLearningRate(baseModels.modelConfig(baseId)),
      { submitted: () => onJobSubmitted?.(), cancel: core.cancelJob },
      artifacts,
      (baseId) => runtime.vocabularySize(baseId),
      new KlReferenceResolver(core.resolver, tinker.models),
    ),
    dashboard: new DashboardService(
      repositories.dashboard,
      repositories.trainedTokens,
      models,
      baseModels,
      payloadView,
    ),
    runners: createRunners(queue, core.checkpoints, repositories, core.trajectories, artifacts),
  };
}

export function createServices(options: ContextOptions): Services {
  const { config, store, clock, engines = null, engineProbe, logError = () => {} } = options;
  const core = createCore(options);
  const { repositories, baseModels, runtime, models, resolver, blobs, artifacts } = core;
  const probeEngine: Probe =
    engineProbe ??
    (async () => {
      await runtime.sampler().request('stats', {});
      await runtime.trainer().request('stats', {});
    });
  const adapterCheck = engineAdapterCheck(() => runtime.trainer());
  const tinker = createTinkerServices({
    repository: repositories.tinker,
    models: repositories.models,
    modelService: models,
    baseModels,
    runtime,
    checkpoints: core.publisher,
    clock,
    log: logError,
  });
  return {
    auth: new AuthService(repositories.identity, clock),
    baseModels,
    models,
    served: new ServedModelsService(
      repositories.models,
      baseModels,
      resolver,
      clock.now().toISOString(),
      (baseId) => runtime.toolCallParser(baseId),
      (baseId) => samplerKindOf(config.vllm, baseId),
    ),
    trajectories: core.trajectories,
    health: new HealthService(store.db, {
      engine: probeEngine,
      queue: async () => void (await repositories.jobs.countByStatus()),
    }),
    ...createTraining(core, tinker, options.onJobSubmitted),
    artifacts,
    blobs,
    repositories,
    runtime,
    ...createServing(config, { resolver, runtime, responses: repositories.responses, clock }),
    exports: new CheckpointExporter(models, repositories.models),
    lineage: new ModelLineage(models, repositories.models, baseModels, adapterCheck),
    retention: core.retention,
    tinker,
    wandb: createWandbServices({
      artifacts,
      blobs,
      clock,
      maxFileBytes: config.artifactMaxFileBytes,
      models: repositories.models,
      runMetrics: repositories.trajectories,
    }),
    imports: new AdapterImporter(
      models,
      baseModels,
      adapterCheck,
      path.join(config.dataDir, 'imports'),
      config.artifactMaxFileBytes,
    ),
    metrics: new Metrics({
      countJobs: () => repositories.jobs.countByStatus(),
      engineStats: async () => (engines ? runtime.sampler().request('stats', {}) : null),
    }),
  };
}
