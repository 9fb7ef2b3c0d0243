/**
 * A W&B run's history, kept: ART's `model.log(...)` writes to W&B whenever WANDB_API_KEY is set, in a run it names
 * after the model (`entity/project/<model name>`: 0.5.18's `name`, 0.5.20+'s `run_name`), and the `wandb` SDK streams
 * each logged row to `file_stream` as a line of `wandb-history.jsonl`. A line of a run named after one of the key's
 * models becomes rows of that model's run history, one per split it holds (`val/reward` → source `wandb:val`), at
 * ART's `training_step` (else W&B's own `_step`), so a held-out curve logged through W&B charts in the dashboard beside
 * `/log`'s. Kept per split: `<split>/<name>` keys; left out: W&B's own `_`-keys and ART's training sections (`loss/…`,
 * `data/…`, `time/…`, …), which the server records from its own jobs. The SDK retries a batch it is not sure of, so
 * each row names its line (offset, content) and is stored once. A run named after no model is read and dropped.
 */
import { createHash } from 'node:crypto';
import type { Clock } from '../clock.ts';
import { canActFor, type Principal } from '../services/auth-service.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { TrajectoryRepository } from '../store/trajectory-repository.ts';
import type { WandbRuns } from './runs.ts';

/** The history file of a run's file stream. */
export const HISTORY_FILE = 'wandb-history.jsonl';

/** ART's metric sections (`art.model.METRIC_SECTIONS` of 0.5.18 and 0.5.23, and its SFT prefix): training figures. */
const ART_TRAINING_SECTIONS = new Set([
  'costs',
  'data',
  'discarded',
  'loss',
  'objective',
  'offpolicy',
  'pipeline',
  'pipeline_settings',
  'queue',
  'reward',
  'sample_efficiency',
  'sft',
  'throughput',
  'time',
  'vllm',
]);

/** Rows per insert: far below SQLite's limit on bound values per statement. */
const INSERT_BATCH = 500;

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

export interface HistoryRow {
  step: number;
  split: string;
  metrics: Record<string, number>;
}

/** One history line's rows, one per split it holds; none when it names no step or holds no split's metric. */
export function historyRows(line: Json): HistoryRow[] {
  const step = [line.training_step, line._step].find((value) => Number.isInteger(value) && (value as number) >= 0);
  if (step === undefined) return [];
  const bySplit = new Map<string, Record<string, number>>();
  for (const [key, value] of Object.entries(line)) {
    const slash = key.indexOf('/');
    const split = key.slice(0, slash);
    if (slash <= 0 || split.startsWith('_') || ART_TRAINING_SECTIONS.has(split)) continue;
    if (typeof value !== 'number' || !Number.isFinite(value)) continue;
    bySplit.set(split, { ...bySplit.get(split), [key]: value });
  }
  return [...bySplit].map(([split, metrics]) => ({ step: step as number, split, metrics }));
}

/** The history lines of a file-stream request with their place in the file, parsed; anything else in it is skipped. */
function historyLines(body: unknown): { offset: number; text: string; line: Json }[] {
  const files = isObject(body) && isObject(body.files) ? body.files : {};
  const history = files[HISTORY_FILE];
  if (!isObject(history) || !Array.isArray(history.content)) return [];
  const start = Number.isInteger(history.offset) ? (history.offset as number) : 0;
  return history.content.flatMap((text, index) => {
    if (typeof text !== 'string') return [];
    try {
      const line = JSON.parse(text) as unknown;
      return isObject(line) ? [{ offset: start + index, text, line }] : [];
    } catch {
      return [];
    }
  });
}

export class WandbHistory {
  constructor(
    private readonly runs: Pick<WandbRuns, 'entity'>,
    private readonly models: Pick<ModelRepository, 'findByName'>,
    private readonly runMetrics: Pick<TrajectoryRepository, 'insertRunMetricsOnce'>,
    private readonly clock: Clock,
  ) {}

  /** A `file_stream` request of run `entity/project/run`: its history lines into the run history of the model so named. */
  async receive(principal: Principal, run: { entity: string; project: string; run: string }, body: unknown) {
    const entity = this.runs.entity(principal, run.entity);
    const lines = historyLines(body);
    if (lines.length === 0) return;
    const model = await this.models.findByName(entity.name, run.project, run.run);
    if (!model || !canActFor(principal, model.entity_id)) return;
    const rows = lines.flatMap(({ offset, text, line }) => {
      const digest = createHash('sha256').update(text).digest('hex').slice(0, 32);
      return historyRows(line).map(({ step, split, metrics }) => ({
        runId: model.run_id,
        step,
        source: `wandb:${split}`,
        metrics,
        dedupeKey: `wandb:${run.run}:${offset}:${digest}:${split}`,
      }));
    });
    const createdAt = this.clock.now().toISOString();
    for (let at = 0; at < rows.length; at += INSERT_BATCH)
      await this.runMetrics.insertRunMetricsOnce(rows.slice(at, at + INSERT_BATCH), createdAt);
  }
}
