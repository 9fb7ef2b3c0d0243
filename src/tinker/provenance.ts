/**
 * StableReinforce's provenance, as tinker 0.38 defines it: a sample asked to `record_stability_info` records each
 * sequence it returns (the prompt, the sampled tokens, the sampler's logprobs) under the `sequence_id` the SDK stamps on
 * it; a `stable_reinforce` datum names, in runs tiling its targets (`loss_fn_input_spans`), which recorded prompt or
 * sampled tokens each target is. Resolving a datum checks every run against the record (its tokens must be the recorded
 * ones) and yields the row the loss trains on: the recorded logprobs in place of the client's, and only the sampled
 * positions weighted. Tinker scopes a record to the session that sampled it; here it is the key's entity's. A record
 * may be trained on for a day after it was sampled or last named by a training request.
 */
import type { Clock } from '../clock.ts';
import { AppError } from '../errors.ts';
import type { Principal } from '../services/auth-service.ts';
import type { TinkerRepository } from '../store/tinker-repository.ts';
import type { LossDatum } from '../training/tinker/losses.ts';
import type { ProtoDatum } from './proto.ts';

const DAY_MS = 24 * 60 * 60 * 1000;

export interface RecordedSequence {
  id: string;
  prompt: number[];
  tokens: number[];
  logprobs: number[];
}

export class TinkerProvenance {
  constructor(
    private readonly repository: TinkerRepository,
    private readonly clock: Clock,
  ) {}

  private stale(): string {
    return new Date(this.clock.now().getTime() - DAY_MS).toISOString();
  }

  async record(principal: Principal, sequences: RecordedSequence[]): Promise<void> {
    const now = this.clock.now().toISOString();
    await this.repository.recordSequences(
      sequences.map((sequence) => ({
        id: sequence.id,
        entity_id: principal.entityId,
        prompt: JSON.stringify(sequence.prompt),
        tokens: JSON.stringify(sequence.tokens),
        logprobs: JSON.stringify(sequence.logprobs),
        used_at: now,
      })),
      this.stale(),
    );
  }

  /** Each datum as `stable_reinforce` trains it, from its provenance and the records it names (a 400 names any fault). */
  async resolve(principal: Principal, data: ProtoDatum[]): Promise<LossDatum[]> {
    const ids = [...new Set(data.flatMap((datum) => (datum.lossFnInputSpans ?? []).map((span) => span.sequenceId)))];
    const rows = await this.repository.useSequences(
      principal.entities.map((entity) => entity.id),
      ids,
      this.stale(),
      this.clock.now().toISOString(),
    );
    const records = new Map(
      rows.map((row) => [
        row.id,
        {
          prompt: JSON.parse(row.prompt) as number[],
          tokens: JSON.parse(row.tokens) as number[],
          logprobs: JSON.parse(row.logprobs) as number[],
        },
      ]),
    );
    return data.map((datum, index) => resolveDatum(datum, index, records));
  }
}

type Records = Map<string, Omit<RecordedSequence, 'id'>>;

/** One datum's row: recorded logprobs at its sampled positions, weight 0 everywhere else. */
function resolveDatum(datum: ProtoDatum, index: number, records: Records): LossDatum {
  const bad = (message: string) => new AppError('bad_request', `data[${index}]: ${message}`);
  const spans = datum.lossFnInputSpans;
  if (!spans)
    throw bad(
      'stable_reinforce needs provenance: sample with record_stability_info=True and attach loss_fn_input_spans (Datum.with_provenance)',
    );
  const targets = datum.lossFnInputs.target_tokens?.values ?? [];
  const covered = spans.reduce((sum, span) => sum + span.length, 0);
  if (covered !== targets.length)
    throw bad(`loss_fn_input_spans cover ${covered} positions but target_tokens has ${targets.length}`);
  const logprobs = [...(datum.lossFnInputs.logprobs?.values ?? new Array(targets.length).fill(0))];
  const given = datum.lossFnInputs.weights?.values;
  const weights = new Array<number>(targets.length).fill(0);
  let at = 0;
  for (const [s, span] of spans.entries()) {
    const record = records.get(span.sequenceId);
    const where = `loss_fn_input_spans[${s}]`;
    if (!record)
      throw bad(
        `${where}: sequence_id ${JSON.stringify(span.sequenceId.slice(0, 100))} names no sequence this key sampled with record_stability_info in the last day`,
      );
    const source = span.kind === 'sampled' ? record.tokens : record.prompt;
    if (span.offset + span.length > source.length)
      throw bad(
        `${where}: positions ${span.offset}..${span.offset + span.length} are past the recorded ${span.kind} tokens (${source.length})`,
      );
    for (let k = 0; k < span.length; k += 1) {
      if (targets[at + k] !== source[span.offset + k])
        throw bad(`${where}: target_tokens[${at + k}] is not the recorded ${span.kind} token it names`);
      if (span.kind === 'sampled') {
        logprobs[at + k] = record.logprobs[span.offset + k];
        weights[at + k] = given ? given[at + k] : 1;
      }
    }
    at += span.length;
  }
  return {
    tokens: datum.tokens,
    lossFnInputs: { ...datum.lossFnInputs, logprobs: { values: logprobs }, weights: { values: weights } },
  };
}
