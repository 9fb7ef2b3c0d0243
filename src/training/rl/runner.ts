/**
 * Runs one RL job: trajectories → packed rows → one engine train step per row on the model's adapter
 * (resumed from its latest checkpoint with its optimizer state) → the next checkpoint, written atomically,
 * listed and servable before the job completes.
 */
import { setImmediate } from 'node:timers/promises';
import type { FullTrajectory, TrajectoryExchanges } from '../../api/models.ts';
import type { JobRow } from '../../api/training-jobs.ts';
import { TemplateError } from '../../conversation/template.ts';
import type { TrainRow } from '../../engine/protocol.ts';
import { JobError } from '../../errors.ts';
import type { JobQueue } from '../../jobs/queue.ts';
import type { RunContext, RunResult } from '../../jobs/worker.ts';
import type { LoadedBase } from '../../services/base-model-runtime.ts';
import type { SpreadPoint } from '../../services/trajectory-service.ts';
import type { TrainedTrajectory } from '../../store/trained-token-repository.ts';
import { generationsFor, type ModelIdentity, readExchanges } from '../../trajectories/exchanges.ts';
import { populationStd } from '../../trajectories/metrics.ts';
import { optimizerConfig } from '../defaults.ts';
import type { TrainingSequence } from '../render.ts';
import { trainingRenderer } from '../render.ts';
import { type CheckpointWriter, openJob, type TrainingSession } from '../session.ts';
import { capturedSequences } from './captured.ts';
import { engineLossConfig, type RlConfig } from './config.ts';
import {
  groupAdvantages,
  type PackedRow,
  type Placement,
  packRows,
  rowLength,
  type ScoredSequence,
  weighSequences,
} from './data.ts';
import { type RlJobPayload, readRlPayload } from './payload.ts';
import { rewardStdDevMultiplier, rowSizeMultiplier } from './rate-multipliers.ts';
import { type TrajectoryInput, TrajectoryTokenizeError, tokenizeTrajectory } from './tokens.ts';
import { trainedTokens } from './trained-tokens.ts';

const mean = (values: number[]) =>
  values.length === 0 ? 0 : values.reduce((sum, value) => sum + value, 0) / values.length;

export interface RlRunnerDeps {
  queue: JobQueue;
  checkpoints: CheckpointWriter;
  /** Keeps the trained trajectories, browsable per split and step. */
  storeTrajectories(
    modelId: string,
    split: string,
    step: number,
    groups: RlJobPayload['trajectory_groups'],
  ): Promise<void>;
  /** Keeps the trained tokens with the trainer's logprob after the job, for the tokens view. */
  storeTrainedTokens(modelId: string, step: number, trajectories: TrainedTrajectory[]): Promise<void>;
  /** The model's reward-spread history before this job, for `scale_learning_rate_by_reward_std_dev`. */
  rewardSpreadHistory(modelId: string): Promise<SpreadPoint[]>;
}

/** The job's data as token sequences, with the figures its metrics and events report. */
interface JobData {
  sequences: ScoredSequence[];
  groupMetrics: Record<string, number>;
  /** Trajectories with trained tokens that carry no sampler logprob, by location in the request. */
  withoutLogprobs: string[];
}

function tokenizeHistory(
  base: LoadedBase,
  history: TrajectoryInput & { tools?: unknown[] | null },
  kwargs: Record<string, unknown> | null,
  config: RlConfig,
  where: string,
): TrainingSequence[] {
  try {
    return tokenizeTrajectory(
      trainingRenderer({ tokenizer: base.tokenizer, template: base.template! }, history.tools, kwargs),
      history,
      config,
    );
  } catch (error) {
    if (error instanceof TemplateError || error instanceof TrajectoryTokenizeError)
      throw new JobError('bad_trajectory', `${where}: ${error.message}`);
    throw error;
  }
}

/**
 * The trainable sequences of a trajectory: a captured one's generations for `model` (captured.ts), or a legacy one and
 * its additional histories, rendered with its tools and template kwargs.
 */
export function trajectorySequences(
  base: LoadedBase,
  trajectory: FullTrajectory,
  config: RlConfig,
  where: string,
  model: ModelIdentity,
): TrainingSequence[] {
  if (trajectory.exchanges) return capturedTrajectorySequences(base, trajectory.exchanges, config, where, model);
  const kwargs = { ...config.chat_template_kwargs, ...trajectory.chat_template_kwargs };
  const histories: (TrajectoryInput & { tools?: unknown[] | null })[] = [
    { messages_and_choices: trajectory.messages_and_choices ?? [], tools: trajectory.tools },
    ...trajectory.additional_histories,
  ];
  return histories.flatMap((history, historyIndex) =>
    tokenizeHistory(
      base,
      { ...history, tools: history.tools ?? trajectory.tools },
      kwargs,
      config,
      historyIndex ? `${where}.additional_histories[${historyIndex - 1}]` : where,
    ).filter((sequence) => sequence.mask.some(Boolean)),
  );
}

function capturedTrajectorySequences(
  base: LoadedBase,
  exchanges: TrajectoryExchanges,
  config: RlConfig,
  where: string,
  model: ModelIdentity,
): TrainingSequence[] {
  const read = readExchanges(exchanges, ['exchanges']);
  const chosen = generationsFor(read.generations, model, ['exchanges']);
  const problem = read.problems[0] ?? chosen.problem;
  if (problem) throw new JobError('bad_trajectory', `${where}.${problem.loc.join('.')}: ${problem.msg}`);
  try {
    return capturedSequences({ tokenizer: base.tokenizer, template: base.template! }, chosen.generations, config);
  } catch (error) {
    if (error instanceof TemplateError || error instanceof TrajectoryTokenizeError)
      throw new JobError('bad_trajectory', `${where}.${error.message}`);
    throw error;
  }
}

/**
 * Advantages per group, then the token sequences of every trajectory that still has something to learn. It yields
 * to the event loop after each trajectory: rendering a job's worth of multi-turn histories takes seconds, and the
 * chats and health checks served beside the job must not wait for all of it.
 */
async function jobData(payload: RlJobPayload, base: LoadedBase, model: ModelIdentity): Promise<JobData> {
  const { config } = payload;
  const sequences: ScoredSequence[] = [];
  const rewards: number[] = [];
  const groupSpreads: number[] = [];
  const withoutLogprobs: string[] = [];
  let trainableGroups = 0;
  let trajectoryIndex = 0;
  for (const [groupIndex, group] of payload.trajectory_groups.entries()) {
    const groupRewards = group.trajectories.map((trajectory) => trajectory.reward);
    for (const reward of groupRewards) rewards.push(reward);
    if (groupRewards.length > 1) groupSpreads.push(populationStd(groupRewards));
    if (new Set(groupRewards).size > 1) trainableGroups += 1;
    const advantages = groupAdvantages(groupRewards, config.scale_rewards);
    for (const [index, trajectory] of group.trajectories.entries()) {
      const advantage = advantages[index];
      const id = trajectoryIndex++;
      if (advantage === 0) continue;
      const where = `trajectory_groups[${groupIndex}].trajectories[${index}]`;
      const found = trajectorySequences(base, trajectory, config, where, model);
      for (const sequence of found) sequences.push({ ...sequence, advantage, trajectory: id });
      if (found.some((sequence) => sequence.mask.some((m, t) => m && sequence.logprobs[t] === null)))
        withoutLogprobs.push(where);
      await setImmediate();
    }
  }
  const groupMetrics = {
    reward: mean(rewards),
    reward_std_dev: mean(groupSpreads),
    num_groups_submitted: payload.trajectory_groups.length,
    num_groups_trainable: trainableGroups,
    frac_sampler_logprobs: samplerLogprobCoverage(sequences),
  };
  // As ART's trainer: when no trained token carries a sampler logprob, nothing trains unless the job allows it.
  const untrainable = groupMetrics.frac_sampler_logprobs === 0 && !config.allow_training_without_logprobs;
  return { sequences: untrainable ? [] : sequences, groupMetrics, withoutLogprobs };
}

/** The fraction of trained tokens that carry the sampler's logprob (1 when nothing is trained). */
function samplerLogprobCoverage(sequences: TrainingSequence[]): number {
  let trained = 0;
  let covered = 0;
  for (const sequence of sequences) {
    sequence.mask.forEach((m, t) => {
      if (t === 0 || !m) return; // the first token of a sequence is never trained (packRows)
      trained += 1;
      if (sequence.logprobs[t] !== null) covered += 1;
    });
  }
  return trained === 0 ? 1 : covered / trained;
}

export function createRlRunner(deps: RlRunnerDeps) {
  return async function runRl(job: JobRow, context: RunContext): Promise<RunResult> {
    const { payload, session } = await openJob(deps, job, context, { read: readRlPayload, renders: 'trajectories' });
    const { base } = session;
    const { config } = payload;
    const data = await jobData(payload, base, session.model);
    const reference = config.kl_penalty_coef > 0 ? await klReference(config, session) : null;
    const learningRate =
      config.learning_rate *
      (config.scale_learning_rate_by_reward_std_dev
        ? await spreadMultiplier(deps, job.model_id, session.fromStep, data)
        : 1);
    const packed = await packJob(config, data, session, context);
    const stepMetrics = await trainRows(
      config,
      { rows: packed.trainRows, reference, groupMetrics: data.groupMetrics, learningRate },
      session,
      context,
    );

    const jobMetrics = summarize(stepMetrics, data.groupMetrics);
    await context.setProgress({ metrics: jobMetrics });
    const forward = (forwardRows: { tokens: number[]; segment_ids?: number[] }[]) =>
      session.engine.request('forward', { base: base.id, adapter: session.adapter, rows: forwardRows });
    const trained = await trainedTokens(
      { rows: packed.rows, sequences: data.sequences, placements: packed.placements },
      forward,
      trajectoryLocator(payload),
    );
    await deps.storeTrajectories(job.model_id, 'train', session.fromStep, payload.trajectory_groups);
    await deps.storeTrainedTokens(job.model_id, session.fromStep, trained);
    return session.commit(jobMetrics);
  };
}

/** The job's rows as packed (for the trained-tokens view) and as trained (with the pre-update policy's logprobs as `old` when asked). */
interface PackedJob {
  rows: PackedRow[];
  placements: Placement[];
  trainRows: TrainRow[];
}

/** Packs the sequences into rows, announces the job, and precalculates the old logprobs when the config asks. */
async function packJob(
  config: RlConfig,
  data: JobData,
  session: TrainingSession,
  context: RunContext,
): Promise<PackedJob> {
  const { base } = session;
  const length = rowLength(data.sequences, base.engine.context_length, config.packed_sequence_length);
  const placements: Placement[] = [];
  const rows = packRows(data.sequences, weighSequences(data.sequences, config.advantage_balance), length, placements);
  await context.emit('training_started', { num_sequences: rows.length });
  await context.setProgress({ numSequences: rows.length });
  if (data.withoutLogprobs.length > 0) {
    // Never silent: these trained tokens have ratio 1 (old = new), so the update is not importance-weighted.
    await context.emit('sampler_logprobs_missing', {
      trajectories: data.withoutLogprobs,
      frac_sampler_logprobs: data.groupMetrics.frac_sampler_logprobs,
    });
  }
  if (!config.precalculate_logprobs || rows.length === 0) return { rows, placements, trainRows: rows };
  // The pre-update policy's logprobs become `old`; the sampler's are kept as `original`.
  const forward = await session.engine.request('forward', {
    base: base.id,
    adapter: session.adapter,
    rows: rows.map((row) => ({ tokens: row.tokens, segment_ids: row.segment_ids })),
  });
  return {
    rows,
    placements,
    trainRows: rows.map((row, r) => ({ ...row, original_logprobs: row.logprobs, logprobs: forward.logprobs[r] })),
  };
}

/** What the train steps of a job send besides its config: the rows, the KL reference adapter, the group figures each step reports, the job's rate. */
interface TrainInput {
  rows: TrainRow[];
  reference: Awaited<ReturnType<TrainingSession['reference']>>;
  groupMetrics: Record<string, number>;
  learningRate: number;
}

/** One engine train step per row, each reported as a `gradient_step` event; their metrics in order. */
async function trainRows(
  config: RlConfig,
  { rows, reference, groupMetrics, learningRate }: TrainInput,
  session: TrainingSession,
  context: RunContext,
): Promise<Record<string, number>[]> {
  const stepMetrics: Record<string, number>[] = [];
  for (const [index, row] of rows.entries()) {
    if (context.signal.aborted) throw new JobError('cancelled');
    const { metrics } = await session.engine.request('train_step', {
      base: session.base.id,
      adapter: session.adapter,
      loss: 'rl',
      rows: [row],
      loss_config: engineLossConfig(config),
      optimizer: optimizerConfig(
        'rl',
        learningRate * rowSizeMultiplier(row, config.num_trajectories_learning_rate_multiplier_power),
      ),
      logprob_chunk_size: config.logprob_calculation_chunk_size,
      ...reference,
    });
    const data = { step: index + 1, ...numericOnly(metrics), ...groupMetrics };
    stepMetrics.push(data);
    await context.emit('gradient_step', data);
  }
  if (context.signal.aborted) throw new JobError('cancelled');
  return stepMetrics;
}

/** From a sequence's trajectory number (its place in the request, counted across groups) to its group and index. */
function trajectoryLocator(
  payload: RlJobPayload,
): (trajectory: number) => { groupIndex: number; trajectoryIndex: number } {
  const locations = payload.trajectory_groups.flatMap((group, groupIndex) =>
    group.trajectories.map((_, trajectoryIndex) => ({ groupIndex, trajectoryIndex })),
  );
  return (trajectory) => locations[trajectory];
}

/**
 * The KL reference: the checkpoint `kl_ref_adapter_path` named, else the step named, else `lag` behind the step
 * trained from (floored at 0, as ART's PipelineTrainer and ServerlessBackend resolve it), else the base model.
 */
function klReference(config: RlConfig, session: TrainingSession): ReturnType<TrainingSession['reference']> {
  if (config.kl_reference) return session.reference(config.kl_reference.step, config.kl_reference.model_id);
  if (config.kl_penalty_reference_step !== null) return session.reference(config.kl_penalty_reference_step);
  if (config.kl_penalty_step_lag !== null)
    return session.reference(Math.max(0, session.fromStep - config.kl_penalty_step_lag));
  return session.reference(0);
}

/** `scale_learning_rate_by_reward_std_dev`: the model's spread history with this job's spread at the step it trains from. */
async function spreadMultiplier(deps: RlRunnerDeps, modelId: string, fromStep: number, data: JobData): Promise<number> {
  const history = await deps.rewardSpreadHistory(modelId);
  return rewardStdDevMultiplier([...history, { step: fromStep, value: data.groupMetrics.reward_std_dev }]);
}

function numericOnly(metrics: Record<string, unknown>): Record<string, number> {
  return Object.fromEntries(
    Object.entries(metrics).filter(
      (entry): entry is [string, number] => typeof entry[1] === 'number' && Number.isFinite(entry[1]),
    ),
  );
}

/** The job's metrics for its checkpoint and the run history: step means, plus the data's own figures. */
function summarize(steps: Record<string, number>[], groupMetrics: Record<string, number>): Record<string, number> {
  const keys = new Set(steps.flatMap((step) => Object.keys(step)));
  keys.delete('step');
  const summary: Record<string, number> = { ...groupMetrics, num_gradient_steps: steps.length };
  for (const key of keys)
    if (!(key in groupMetrics)) summary[key] = mean(steps.map((step) => step[key]).filter((v) => v !== undefined));
  return summary;
}
