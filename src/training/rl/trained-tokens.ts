/**
 * The trainer's logprob after a job's last step for each trained token, traced back to its trajectory, for the
 * dashboard's tokens view. Bounded: whole trajectories in submission order up to TRAINED_TOKENS_PER_JOB tokens
 * (about 26 bytes a token as stored JSON, so at most ≈ 430 KB a job), and one engine forward over only the rows
 * holding them.
 */
import type { ForwardReply, ForwardRequest } from '../../engine/protocol.ts';
import type { TrainedTrajectory } from '../../store/trained-token-repository.ts';
import type { PackedRow, Placement, ScoredSequence } from './data.ts';

export const TRAINED_TOKENS_PER_JOB = 16_384;

/** Logprobs travel and are stored to 1e-5: far below what a colour or a readout shows. */
const round = (value: number) => Math.round(value * 1e5) / 1e5;

interface Packed {
  rows: PackedRow[];
  sequences: ScoredSequence[];
  placements: Placement[];
}

/** Sequence indices per trajectory, trajectories in submission order, kept while their trained tokens fit the cap. */
function keptTrajectories({ rows, sequences, placements }: Packed, cap: number): number[][] {
  const byTrajectory = new Map<number, number[]>();
  sequences.forEach((sequence, s) => {
    byTrajectory.set(sequence.trajectory, [...(byTrajectory.get(sequence.trajectory) ?? []), s]);
  });
  const kept: number[][] = [];
  let total = 0;
  for (const members of byTrajectory.values()) {
    const count = members.reduce(
      (sum, s) =>
        sum +
        rows[placements[s].row].mask
          .slice(placements[s].offset, placements[s].offset + placements[s].length)
          .reduce((a, m) => a + m, 0),
      0,
    );
    if (total + count > cap) break;
    total += count;
    if (count > 0) kept.push(members);
  }
  return kept;
}

export async function trainedTokens(
  packed: Packed,
  forward: (rows: ForwardRequest['rows']) => Promise<ForwardReply>,
  locate: (trajectory: number) => { groupIndex: number; trajectoryIndex: number },
  cap = TRAINED_TOKENS_PER_JOB,
): Promise<TrainedTrajectory[]> {
  const kept = keptTrajectories(packed, cap);
  const rowIndices = [...new Set(kept.flat().map((s) => packed.placements[s].row))];
  if (rowIndices.length === 0) return [];
  const { logprobs } = await forward(
    rowIndices.map((r) => ({ tokens: packed.rows[r].tokens, segment_ids: packed.rows[r].segment_ids })),
  );
  return kept.map((members) => {
    const trained: TrainedTrajectory = {
      ...locate(packed.sequences[members[0]].trajectory),
      advantage: 0,
      token_ids: [],
      sampler_logprobs: [],
      trainer_logprobs: [],
    };
    for (const s of members) {
      const { row: r, offset, length } = packed.placements[s];
      const row = packed.rows[r];
      const after = logprobs[rowIndices.indexOf(r)];
      for (let p = offset; p < offset + length; p += 1) {
        const value = after[p];
        if (!row.mask[p] || typeof value !== 'number') continue;
        trained.advantage = row.advantages[p];
        trained.token_ids.push(row.tokens[p]);
        trained.sampler_logprobs.push(row.logprobs[p] === null ? null : round(row.logprobs[p]!));
        trained.trainer_logprobs.push(round(value));
      }
    }
    return trained;
  });
}
