/**
 * Submitting, reading, following and cancelling training jobs. Validation happens here, before the job
 * exists, because ART does not retry POSTs: a job that can only fail should be refused at once. Each kind's
 * configuration is parsed by its own config.ts and stored through its own payload.ts; the dashboard's view of a
 * stored payload (`payloadView`) reads it as the runner will.
 */

import { withGroupDefaults } from '../api/models.ts';
import {
  type JobRow,
  type RlJobBody,
  type SftJobBody,
  type TrainingJob,
  toTrainingJob,
  toTrainingJobEvent,
} from '../api/training-jobs.ts';
import { AppError, JobError, notFound, validationError } from '../errors.ts';
import type { ArtifactService } from '../services/artifact-service.ts';
import type { Principal } from '../services/auth-service.ts';
import type { ModelService } from '../services/model-service.ts';
import { checkRenderable, checkTrajectoryGroups } from '../services/trajectory-shape.ts';
import type { JobRepository } from '../store/job-repository.ts';
import { parseRlConfig } from './rl/config.ts';
import type { KlReferenceResolver } from './rl/kl-reference.ts';
import { type RlJobPayload, readRlPayload, rlPayload } from './rl/payload.ts';
import { parseSftConfig, unimplementedKeyProblems } from './sft/config.ts';
import { countConversations, SFT_DATA_FILES } from './sft/data.ts';
import { readSftPayload, type SftJobPayload, sftPayload } from './sft/payload.ts';

/** The part of the job queue (jobs/queue.ts) that submitting needs: the queue stores what training hands it and knows no payload shape. */
export interface JobSubmission {
  enqueue(
    input:
      | { modelId: string; type: 'rl'; payload: RlJobPayload }
      | { modelId: string; type: 'sft'; payload: SftJobPayload },
  ): Promise<{ id: string }>;
}

export class TrainingJobService {
  constructor(
    private readonly models: ModelService,
    private readonly jobs: JobRepository,
    private readonly queue: JobSubmission,
    private readonly defaultLearningRate: (baseModel: string) => number,
    private readonly notify: { submitted(): void; cancel(jobId: string): Promise<JobRow | undefined> },
    private readonly artifacts: ArtifactService,
    /** The base model's vocabulary size from its tokenizer, or null when that cannot be read now (the job checks again). */
    private readonly vocabularySize: (baseModel: string) => Promise<number | null>,
    private readonly klReferences: KlReferenceResolver,
  ) {}

  async submitRl(principal: Principal, body: RlJobBody): Promise<{ id: string }> {
    const model = await this.models.getOwned(principal, body.model_id);
    const { config, problems } = parseRlConfig(body.experimental_config, () =>
      this.defaultLearningRate(model.base_model),
    );
    if (config.kl_ref_adapter_path !== null) {
      // Resolved now, to a model and step: the job reads that checkpoint even if names change before it runs.
      const resolved = await this.klReferences.resolve(principal, config.kl_ref_adapter_path, model.base_model);
      if ('problem' in resolved) problems.push(resolved.problem);
      else config.kl_reference = resolved.reference;
    }
    const groups = body.trajectory_groups.map(withGroupDefaults);
    const shape = checkTrajectoryGroups(
      groups,
      ['body', 'trajectory_groups'],
      await this.vocabularySize(model.base_model),
    );
    const identity = { entity: model.entity_name, project: model.project, name: model.name };
    problems.push(
      ...shape,
      ...(shape.length === 0 ? checkRenderable(groups, ['body', 'trajectory_groups'], identity) : []),
    );
    if (problems.length > 0) throw validationError(problems);
    const payload = rlPayload({ trajectory_groups: groups, config });
    const job = await this.queue.enqueue({ modelId: model.id, type: 'rl', payload });
    this.notify.submitted();
    return { id: job.id };
  }

  async submitSft(principal: Principal, body: SftJobBody): Promise<{ id: string }> {
    const model = await this.models.getOwned(principal, body.model_id);
    const problems = unimplementedKeyProblems(body.experimental_config);
    const resolved = await this.artifacts.resolveTrainingData(principal, body.training_data_url, [
      'body',
      'training_data_url',
    ]);
    if ('problems' in resolved) throw validationError([...problems, ...resolved.problems]);
    const file = SFT_DATA_FILES.find((name) => resolved.version.files.some((candidate) => candidate.name === name));
    if (!file) {
      throw validationError([
        ...problems,
        {
          loc: ['body', 'training_data_url'],
          msg: `the artifact has none of ${SFT_DATA_FILES.join(', ')}`,
          type: 'value_error',
        },
      ]);
    }
    const numConversations = await countConversations(this.artifacts.openFile(resolved.key, file));
    const parsed = parseSftConfig(body.config, numConversations, () => this.defaultLearningRate(model.base_model));
    problems.push(...parsed.problems);
    if (problems.length > 0) throw validationError(problems);
    const payload = sftPayload({
      artifact: { key: resolved.key, file },
      num_conversations: numConversations,
      ...parsed.config,
    });
    const job = await this.queue.enqueue({ modelId: model.id, type: 'sft', payload });
    this.notify.submitted();
    return { id: job.id };
  }

  /** The job if the principal may see its model; anything else is exactly as absent as a missing job. */
  async getOwned(principal: Principal, jobId: string): Promise<JobRow> {
    const job = await this.jobs.findById(jobId);
    if (!job) throw notFound('Training job');
    try {
      await this.models.getOwned(principal, job.model_id);
    } catch (error) {
      if (error instanceof AppError && error.code === 'not_found') throw notFound('Training job');
      throw error;
    }
    return job;
  }

  async get(principal: Principal, jobId: string): Promise<TrainingJob> {
    return toTrainingJob(await this.getOwned(principal, jobId));
  }

  async events(principal: Principal, jobId: string, after: string | undefined, limit: number) {
    const job = await this.getOwned(principal, jobId);
    const page = await this.jobs.events(job.id, after, limit);
    return { items: page.items.map(toTrainingJobEvent), hasMore: page.hasMore };
  }

  async cancel(principal: Principal, jobId: string): Promise<TrainingJob> {
    const job = await this.getOwned(principal, jobId);
    return toTrainingJob((await this.notify.cancel(job.id)) ?? job);
  }
}

/** What the dashboard shows of a job's request: its configuration as the job reads it and, for RL, how much data it got. */
export interface PayloadView {
  config: Record<string, unknown>;
  num_trajectory_groups: number | null;
  num_trajectories: number | null;
}

/** The view of a stored payload, read (and checked) as its runner reads it; null when it matches no version. */
export function payloadView(type: 'rl' | 'sft', raw: unknown): PayloadView | null {
  try {
    if (type === 'sft') {
      const { version: _version, artifact: _artifact, ...config } = readSftPayload(raw);
      return { config, num_trajectory_groups: null, num_trajectories: null };
    }
    const { config, trajectory_groups: groups } = readRlPayload(raw);
    return {
      config,
      num_trajectory_groups: groups.length,
      num_trajectories: groups.reduce((sum, group) => sum + group.trajectories.length, 0),
    };
  } catch (error) {
    if (error instanceof JobError) return null;
    throw error;
  }
}
