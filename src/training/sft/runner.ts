/**
 * Runs one SFT job: the artifact's conversations, streamed line by line, each rendered once with the chat
 * template (its assistant spans trained, everything else masked; sft/tokens.ts), one optimizer step per batch, then the next
 * checkpoint exactly as RL writes it.
 */
import type { Readable } from 'node:stream';
import type { JobRow } from '../../api/training-jobs.ts';
import type { JobEventData } from '../../api/training-vocabulary.ts';
import type { TrainRow } from '../../engine/protocol.ts';
import { JobError } from '../../errors.ts';
import type { JobQueue } from '../../jobs/queue.ts';
import type { RunContext, RunResult } from '../../jobs/worker.ts';
import type { LoadedBase } from '../../services/base-model-runtime.ts';
import type { HistoryStep } from '../checkpoint-publisher.ts';
import { optimizerConfig } from '../defaults.ts';
import { type TrainingSequence, trainingRenderer } from '../render.ts';
import { type CheckpointWriter, openJob } from '../session.ts';
import { type Conversation, readConversations } from './data.ts';
import { readSftPayload, type SftJobPayload } from './payload.ts';
import { tokenizeConversation } from './tokens.ts';

export interface SftRunnerDeps {
  queue: JobQueue;
  checkpoints: CheckpointWriter;
  openArtifactFile(key: string, file: string): Readable;
}

const mean = (values: number[]) =>
  values.length === 0 ? 0 : values.reduce((sum, value) => sum + value, 0) / values.length;

async function* batches(conversations: AsyncIterable<Conversation>, size: number): AsyncIterable<Conversation[]> {
  let batch: Conversation[] = [];
  for await (const conversation of conversations) {
    batch.push(conversation);
    if (batch.length === size) {
      yield batch;
      batch = [];
    }
  }
  if (batch.length > 0) yield batch;
}

function conversationRow(
  base: LoadedBase,
  conversation: Conversation,
  payload: SftJobPayload,
  file: string,
): TrainingSequence | null {
  const renderer = trainingRenderer(
    { tokenizer: base.tokenizer, template: base.template! },
    conversation.tools,
    payload.chat_template_kwargs,
  );
  try {
    return tokenizeConversation(renderer, conversation.messages, payload.assistant_turns);
  } catch (error) {
    throw new JobError(
      'bad_training_data',
      `${file} line ${conversation.line}: the conversation cannot be rendered (${(error as Error).message})`,
    );
  }
}

/** Where the run history gets the job's metrics: where ART's `metric_logging` asks (it no longer logs SFT metrics itself), else at the step written. */
function historyStep(logging: SftJobPayload['metric_logging']): HistoryStep {
  if (!logging) return 'own';
  if (!logging.enabled) return null;
  return logging.target_training_step ?? 'own';
}

export function createSftRunner(deps: SftRunnerDeps) {
  return async function runSft(job: JobRow, context: RunContext): Promise<RunResult> {
    const { payload, session } = await openJob(deps, job, context, { read: readSftPayload, renders: 'conversations' });
    const { base } = session;
    const numBatches = Math.ceil(payload.num_conversations / payload.batch_size);
    const rates = Array.isArray(payload.learning_rate) ? payload.learning_rate : null;
    await context.emit('training_started', { num_sequences: numBatches });
    await context.setProgress({ numSequences: numBatches });

    const file = payload.artifact.file;
    const stepMetrics: Record<string, number>[] = [];
    let step = 0;
    let dropped = 0;
    for await (const batch of batches(
      readConversations(file, deps.openArtifactFile(payload.artifact.key, file)),
      payload.batch_size,
    )) {
      if (context.signal.aborted) throw new JobError('cancelled');
      step += 1;
      if (rates && step > rates.length)
        throw new JobError(
          'bad_learning_rate',
          `config.learning_rate has ${rates.length} values but the data has more batches (${file} line ${batch[0].line} starts batch ${step})`,
        );
      const learningRate = rates ? rates[step - 1] : (payload.learning_rate as number);
      const rows: TrainRow[] = [];
      for (const conversation of batch) {
        const sequence = conversationRow(base, conversation, payload, file);
        // Too long for the context, or nothing to learn from: dropped and counted.
        if (!sequence || sequence.tokens.length > base.engine.context_length || !sequence.mask.some(Boolean)) {
          dropped += 1;
          continue;
        }
        const mask = sequence.mask.map((m, t) => (t === 0 ? 0 : m));
        rows.push({ tokens: sequence.tokens, segment_ids: sequence.tokens.map(() => 0), mask, weights: mask });
      }
      const data: JobEventData['gradient_step'] = {
        step,
        learning_rate: learningRate,
        num_trajectories: batch.length,
        num_dropped_trajectories: dropped,
      };
      if (rows.length > 0) {
        const { metrics } = await session.engine.request('train_step', {
          base: base.id,
          adapter: session.adapter,
          loss: 'sft',
          rows,
          optimizer: optimizerConfig('sft', learningRate),
        });
        for (const [key, value] of Object.entries(metrics))
          if (typeof value === 'number' && Number.isFinite(value)) data[key] = value;
        data.sft_loss = data.sft_loss ?? data.loss;
      }
      stepMetrics.push(data);
      await context.emit('gradient_step', data);
    }
    if (context.signal.aborted) throw new JobError('cancelled');
    if (rates && step !== rates.length)
      throw new JobError(
        'bad_learning_rate',
        `config.learning_rate has ${rates.length} values but the data has ${step} batches`,
      );

    const keys = new Set(stepMetrics.flatMap((metrics) => Object.keys(metrics)));
    keys.delete('step');
    const summary: Record<string, number> = {
      num_gradient_steps: stepMetrics.length,
      num_dropped_trajectories: dropped,
    };
    for (const key of keys)
      if (key !== 'num_dropped_trajectories')
        summary[key] = mean(stepMetrics.map((metrics) => metrics[key]).filter((value) => value !== undefined));
    await context.setProgress({ metrics: summary });
    return session.commit(summary, historyStep(payload.metric_logging));
  };
}
