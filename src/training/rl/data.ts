/**
 * From scored trajectory groups to packed training rows, per rl-loss.md: group-relative advantages,
 * per-trajectory token weights, job-wide normalisation, advantage balance, and first-fit packing.
 * Pure functions: no engine, no database.
 */
import { populationStd } from '../../trajectories/metrics.ts';
import type { TrainingSequence } from '../render.ts';

export interface ScoredSequence extends TrainingSequence {
  advantage: number;
  /** Which trajectory it belongs to: additional histories share their trajectory's weight. */
  trajectory: number;
}

export interface PackedRow {
  tokens: number[];
  segment_ids: number[];
  mask: number[];
  weights: number[];
  advantages: number[];
  logprobs: (number | null)[];
}

const mean = (values: number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;

/** Aᵢ = rᵢ − μ, divided by (σ + 1e-6) when scaling; a group whose rewards are all equal yields zeros. */
export function groupAdvantages(rewards: number[], scaleRewards: boolean): number[] {
  if (rewards.length === 0) return [];
  const mu = mean(rewards);
  const sigma = populationStd(rewards);
  return rewards.map((reward) => (scaleRewards ? (reward - mu) / (sigma + 1e-6) : reward - mu));
}

/**
 * Per-token weights and advantages for every trainable token, normalised over the whole job:
 * wᵢ = 1/(trainable tokens of trajectory i + 1e-6), w ← w/mean(w); balance; A ← A/mean(|A|·w).
 */
export function weighSequences(
  sequences: ScoredSequence[],
  advantageBalance: number,
): { weights: number[][]; advantages: number[][] } {
  const trainableByTrajectory = new Map<number, number>();
  for (const sequence of sequences) {
    const count = sequence.mask.reduce((sum, m) => sum + m, 0);
    trainableByTrajectory.set(sequence.trajectory, (trainableByTrajectory.get(sequence.trajectory) ?? 0) + count);
  }
  const rawWeights = sequences.map((sequence) =>
    sequence.mask.map((m) => (m ? 1 / ((trainableByTrajectory.get(sequence.trajectory) ?? 0) + 1e-6) : 0)),
  );
  const trainable = sequences.flatMap((sequence, s) => sequence.mask.flatMap((m, t) => (m ? [{ s, t }] : [])));
  if (trainable.length === 0)
    return { weights: rawWeights, advantages: sequences.map((sequence) => sequence.mask.map(() => 0)) };

  const meanWeight = mean(trainable.map(({ s, t }) => rawWeights[s][t]));
  const weights = rawWeights.map((row) => row.map((w) => w / meanWeight));
  const balanced = sequences.map((sequence) => {
    let advantage = sequence.advantage;
    if (advantageBalance > 0 && advantage < 0) advantage *= 1 - advantageBalance;
    if (advantageBalance < 0 && advantage > 0) advantage *= 1 + advantageBalance;
    return advantage;
  });
  const scale = mean(trainable.map(({ s, t }) => Math.abs(balanced[s]) * weights[s][t]));
  const advantages = sequences.map((sequence, s) =>
    sequence.mask.map((m) => (m && scale > 0 ? balanced[s] / scale : 0)),
  );
  return { weights, advantages };
}

/** Row length: the longest sequence rounded up to 2048, capped by the context (or the configured length). */
export function rowLength(sequences: TrainingSequence[], contextLength: number, configured: number | null): number {
  if (configured !== null) return Math.min(configured, contextLength);
  const longest = sequences.reduce((most, sequence) => Math.max(most, sequence.tokens.length), 1);
  return Math.min(Math.ceil(longest / 2048) * 2048, contextLength);
}

/** Where packing put a sequence: its row, first position there, and how many of its tokens fit. */
export interface Placement {
  row: number;
  offset: number;
  length: number;
}

/**
 * First-fit packing in submission order; a sequence longer than a row is truncated to it. `placements`,
 * when given, receives each sequence's place, so per-token results can be traced back to trajectories.
 */
export function packRows(
  sequences: ScoredSequence[],
  weighted: { weights: number[][]; advantages: number[][] },
  length: number,
  placements?: Placement[],
): PackedRow[] {
  const rows: PackedRow[] = [];
  sequences.forEach((sequence, s) => {
    const take = Math.min(sequence.tokens.length, length);
    let row = rows.find((candidate) => candidate.tokens.length + take <= length);
    if (!row) {
      row = { tokens: [], segment_ids: [], mask: [], weights: [], advantages: [], logprobs: [] };
      rows.push(row);
    }
    const segment = row.segment_ids.length === 0 ? 0 : row.segment_ids[row.segment_ids.length - 1] + 1;
    placements?.push({ row: rows.indexOf(row), offset: row.tokens.length, length: take });
    for (let t = 0; t < take; t += 1) {
      // The first token of a segment has nothing to predict it.
      const trainableHere = t === 0 ? 0 : sequence.mask[t];
      row.tokens.push(sequence.tokens[t]);
      row.segment_ids.push(segment);
      row.mask.push(trainableHere);
      row.weights.push(trainableHere ? weighted.weights[s][t] : 0);
      row.advantages.push(trainableHere ? weighted.advantages[s][t] : 0);
      row.logprobs.push(sequence.logprobs[t]);
    }
  });
  return rows;
}
