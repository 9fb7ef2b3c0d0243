/**
 * Runs one RL job: trajectories → packed rows → one engine train step per row on the model's adapter
 * (resumed from its latest checkpoint with its optimizer state) → the next checkpoint, written atomically,
 * listed and servable before the job completes.
 */
import type { JobRow } from '../store/job-repository.ts';
import type { RlJobPayload } from '../services/training-job-service.ts';
import type { RlConfig } from '../services/rl-config.ts';
import { tokenizeTrajectory, TrajectoryTokenizeError, type TrainingSequence } from '../chat/trajectory-tokens.ts';
import { populationStd } from '../services/trajectory-metrics.ts';
import { groupAdvantages, packRows, rowLength, weighSequences, type ScoredSequence } from './rl-data.ts';
import { JobError, type RunContext, type RunResult } from './worker.ts';
import type { CheckpointWriter } from './checkpoint-writer.ts';
import type { JobQueue } from './queue.ts';
import type { LossConfig, TrainRow } from '../engine/protocol.ts';

const mean = (values: number[]) => (values.length === 0 ? 0 : values.reduce((sum, value) => sum + value, 0) / values.length);

function lossConfig(config: RlConfig): LossConfig {
  return {
    ppo: config.ppo,
    epsilon: config.epsilon,
    epsilon_high: config.epsilonHigh,
    importance_sampling_level: config.importanceSamplingLevel,
    max_negative_advantage_importance_sampling_weight: config.maxNegativeAdvantageImportanceSamplingWeight,
    mask_prob_ratio: config.maskProbRatio,
    k2_tau: config.k2Tau,
    truncated_importance_sampling: config.truncatedImportanceSampling,
    kl_penalty_coef: config.klPenaltyCoef,
    kl_penalty_source: config.klPenaltySource,
  };
}

export interface RlRunnerDeps {
  queue: JobQueue;
  checkpoints: CheckpointWriter;
  /** Keeps the trained trajectories, browsable per split and step. */
  storeTrajectories(modelId: string, split: string, step: number, groups: RlJobPayload['trajectory_groups']): Promise<void>;
}

export function createRlRunner(deps: RlRunnerDeps) {
  return async function runRl(job: JobRow, context: RunContext): Promise<RunResult> {
    const payload = await deps.queue.readPayload<RlJobPayload>(job);
    const { config } = payload;
    const session = await deps.checkpoints.open(job.model_id, context.emit);
    const { base } = session;
    if (!base.template) throw new JobError('no_chat_template', `Base model ${base.id} has no chat template to render trajectories with`);

    // Advantages per group, then token sequences of every trajectory that still has something to learn.
    const sequences: ScoredSequence[] = [];
    const rewards: number[] = [];
    const groupSpreads: number[] = [];
    let trainableGroups = 0;
    let trajectoryIndex = 0;
    payload.trajectory_groups.forEach((group, groupIndex) => {
      const groupRewards = group.trajectories.map((trajectory) => trajectory.reward);
      rewards.push(...groupRewards);
      if (groupRewards.length > 1) groupSpreads.push(populationStd(groupRewards));
      if (new Set(groupRewards).size > 1) trainableGroups += 1;
      const advantages = groupAdvantages(groupRewards, config.scaleRewards);
      group.trajectories.forEach((trajectory, index) => {
        const advantage = advantages[index];
        const id = trajectoryIndex++;
        if (advantage === 0) return;
        const histories = [trajectory, ...(trajectory.additional_histories ?? [])];
        histories.forEach((history, historyIndex) => {
          let sequence: TrainingSequence | null;
          try {
            sequence = tokenizeTrajectory(base.tokenizer, base.template!, { messages_and_choices: history.messages_and_choices, tools: history.tools ?? trajectory.tools }, config);
          } catch (error) {
            if (error instanceof TrajectoryTokenizeError) {
              throw new JobError('bad_trajectory', `trajectory_groups[${groupIndex}].trajectories[${index}]${historyIndex ? `.additional_histories[${historyIndex - 1}]` : ''}: ${error.message}`);
            }
            throw error;
          }
          if (sequence && sequence.mask.some(Boolean)) sequences.push({ ...sequence, advantage, trajectory: id });
        });
      });
    });

    const length = rowLength(sequences, base.engine.context_length, config.packedSequenceLength);
    const rows = packRows(sequences, weighSequences(sequences, config.advantageBalance), length);
    await context.emit('training_started', { num_sequences: rows.length });
    await context.setProgress({ numSequences: rows.length });

    const groupMetrics = {
      reward: mean(rewards),
      reward_std_dev: mean(groupSpreads),
      num_groups_submitted: payload.trajectory_groups.length,
      num_groups_trainable: trainableGroups,
    };
    let trainRows: TrainRow[] = rows;
    if (config.precalculateLogprobs && rows.length > 0) {
      // The pre-update policy's logprobs become `old`; the sampler's are kept as `original`.
      const forward = await session.engine.forward({ base: base.id, adapter: session.adapter, rows: rows.map((row) => ({ tokens: row.tokens, segment_ids: row.segment_ids })) });
      trainRows = rows.map((row, r) => ({ ...row, original_logprobs: row.logprobs, logprobs: forward.logprobs[r] }));
    }

    const stepMetrics: Record<string, number>[] = [];
    for (const [index, row] of trainRows.entries()) {
      if (context.signal.aborted) throw new JobError('cancelled', 'Training job was cancelled');
      const { metrics } = await session.engine.trainStep({
        base: base.id,
        adapter: session.adapter,
        loss: 'rl',
        rows: [row],
        loss_config: lossConfig(config),
        optimizer: { learning_rate: config.learningRate, betas: [0.9, 0.99], weight_decay: 0.1, max_grad_norm: 0.1 },
      });
      const data = { step: index + 1, ...numericOnly(metrics), ...groupMetrics };
      stepMetrics.push(data);
      await context.emit('gradient_step', data);
    }
    if (context.signal.aborted) throw new JobError('cancelled', 'Training job was cancelled');

    const jobMetrics = summarize(stepMetrics, groupMetrics);
    await context.setProgress({ metrics: jobMetrics });
    await deps.storeTrajectories(job.model_id, 'train', session.fromStep, payload.trajectory_groups);
    return session.commit(jobMetrics);
  };
}

function numericOnly(metrics: Record<string, unknown>): Record<string, number> {
  return Object.fromEntries(Object.entries(metrics).filter((entry): entry is [string, number] => typeof entry[1] === 'number' && Number.isFinite(entry[1])));
}

/** The job's metrics for its checkpoint and the run history: step means, plus the data's own figures. */
function summarize(steps: Record<string, number>[], groupMetrics: Record<string, number>): Record<string, number> {
  const keys = new Set(steps.flatMap((step) => Object.keys(step)));
  keys.delete('step');
  const summary: Record<string, number> = { ...groupMetrics, num_gradient_steps: steps.length };
  for (const key of keys) if (!(key in groupMetrics)) summary[key] = mean(steps.map((step) => step[key]).filter((v) => v !== undefined));
  return summary;
}
