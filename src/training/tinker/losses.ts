/**
 * The losses a Tinker training client's `forward_backward` runs, their `loss_fn_config` defaults, and each datum
 * as the engine takes it, checked here so that bad input is a 400 naming the datum and field. What a datum is on
 * the wire (protobuf or JSON) is the Tinker room's business: this file takes tokens and named value arrays.
 */
import type { ForwardBackwardRequest, StepLoss, StepLossConfigs, StepRow } from '../../engine/protocol.ts';
import { AppError } from '../../errors.ts';

/**
 * The losses we run and the defaults of their `loss_fn_config`. Tinker's docs fix PPO's ε at 0.2 (the ratio clipped
 * to [0.8, 1.2]), which we also take for CISPO; for DRO they name no default, only β = 0.05 in their example, which
 * we use; for GSPO (sequence ratio over `sequence_ratio_mask`) we take its paper's clip range, 3e-4 below and 4e-4
 * above 1. StableReinforce (tinker 0.38, the cookbook's default RL loss) names `kl_coeff` and no default: ours is 0,
 * no KL term (docs/tinker.md has the loss as we define it; its rows' logprobs are the ones the sampler recorded, which
 * the Tinker room puts in from each datum's provenance). The engine takes every key explicitly; which losses exist and
 * which keys each reads are the engine's (engine/protocol.json `StepLossConfigs`), so a loss or key missing here, or
 * one the engine lacks, fails to compile.
 */
export const LOSS_DEFAULTS = {
  cross_entropy: {},
  importance_sampling: {},
  ppo: { clip_low_threshold: 0.8, clip_high_threshold: 1.2 },
  cispo: { clip_low_threshold: 0.8, clip_high_threshold: 1.2 },
  dro: { beta: 0.05 },
  gspo: { clip_low_threshold: 1 - 3e-4, clip_high_threshold: 1 + 4e-4 },
  stable_reinforce: { kl_coeff: 0 },
} as const satisfies StepLossConfigs;
export type TinkerLoss = StepLoss;

/** A datum as the Tinker room decodes it: the input tokens, and `loss_fn_inputs` by name, one value per token. */
export interface LossDatum {
  tokens: number[];
  lossFnInputs: Record<string, { values: number[] }>;
}

/** A `forward_backward` as the engine takes it: the loss, every key of its config, and the checked rows. */
export interface LossBatch {
  loss: TinkerLoss;
  loss_config: ForwardBackwardRequest['loss_config'];
  rows: StepRow[];
}

/**
 * The batch of `loss_fn` over `data`: the loss must be one we run, its config keeps only the keys the loss reads
 * (the rest at their defaults), and every datum's lengths and token ids (against `vocab`, when known) are checked.
 */
export function lossBatch(
  lossFn: string,
  config: Record<string, number>,
  data: LossDatum[],
  vocab: number | null,
): LossBatch {
  if (!Object.hasOwn(LOSS_DEFAULTS, lossFn)) {
    throw new AppError(
      'bad_request',
      `Unknown loss_fn ${JSON.stringify(lossFn.slice(0, 100))}: one of ${Object.keys(LOSS_DEFAULTS).join(', ')}`,
    );
  }
  const loss = lossFn as TinkerLoss;
  const rows = data.map((datum, index) => stepRow(datum, index, loss, vocab));
  if (!rows.length) throw new AppError('bad_request', 'forward_backward needs at least one datum');
  const keys = Object.keys(LOSS_DEFAULTS[loss]);
  const given = Object.fromEntries(Object.entries(config).filter(([key]) => keys.includes(key)));
  return { loss, loss_config: { ...LOSS_DEFAULTS[loss], ...given }, rows };
}

/** A datum as the engine takes it, with every length and token id checked here (a 400 names the datum and field). */
function stepRow(datum: LossDatum, index: number, loss: TinkerLoss, vocab: number | null): StepRow {
  const length = datum.tokens.length;
  const bad = (message: string) => new AppError('bad_request', `data[${index}]: ${message}`);
  const field = (name: string, required: boolean): number[] | undefined => {
    const tensor = datum.lossFnInputs[name];
    if (!tensor) {
      if (required) throw bad(`loss_fn_inputs.${name} is required by ${loss}`);
      return undefined;
    }
    if (tensor.values.length !== length)
      throw bad(`loss_fn_inputs.${name} has ${tensor.values.length} values for ${length} input tokens`);
    return tensor.values;
  };
  if (!length) throw bad('model_input has no tokens');
  const rl = loss !== 'cross_entropy';
  const targets = field('target_tokens', true) ?? [];
  const ids = [...datum.tokens, ...targets];
  const outside = ids.find((id) => !Number.isInteger(id) || id < 0 || (vocab !== null && id >= vocab));
  if (outside !== undefined)
    throw bad(`token id ${outside} is outside the vocabulary (0..${vocab === null ? '?' : vocab - 1})`);
  const row: StepRow = {
    tokens: datum.tokens,
    target_tokens: targets,
    weights: field('weights', false) ?? new Array(length).fill(1),
  };
  if (rl) {
    row.logprobs = field('logprobs', true);
    row.advantages = field('advantages', true);
  }
  if (loss === 'gspo') row.sequence_ratio_mask = field('sequence_ratio_mask', true);
  return row;
}
