"""Logprobs of packed rows, and one optimizer step of the RL or SFT loss on an adapter.

Owns: Row (one packed row's per-token arrays), LossConfig and
AdamW (the one optimizer's hyperparameters, as wire.py parsed them: every value explicit),
chunked logprob/entropy computation, the per-token RL loss (CISPO or
PPO, importance-sampling levels, ratio cap and masking, k2 tau, truncated IS,
KL penalty against a reference policy: the adapter-off model or a reference
adapter, e.g. an earlier checkpoint), the SFT loss, the one AdamW step (`adamw_step`, gradient-norm clipping on the adapter's own optimizer
state; train_step here and steps.py's optim_step both take it), and the
divergence guard every optimizer step goes through (a non-finite loss or
gradient, or weights leaving lora.py's bound, fails the step and leaves the
adapter and its optimizer state exactly as they were).

Refuses to know: trajectories, chat templates, advantages from rewards and
row packing (the server computes those and sends per-token arrays), the wire
format and its defaults (wire.py parses; the server chooses every value),
adapter files.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch.utils.checkpoint import checkpoint

from . import parts, shard
from .group import SOLO, Group
from .lora import Adapter, LoraBatch, make_optimizer
from .model import ForwardContext, Transformer

# ~32 MiB of fp32 logits per chunk: a chunk's logits, softmax and their gradients are alive at once, several times
# this; larger chunks bought no speed on CPU (SmolLM2's 49152-token vocabulary: 170 positions a chunk).
LOGITS_CHUNK_ELEMENTS = 1 << 23


@dataclass
class LossConfig:
    """The RL knobs of rl-loss.md, every one sent by the server; None turns a knob off. Its fields are train_step's
    `loss_config` (protocol.json `LossConfig`, whose enums name the levels and sources below)."""

    ppo: bool
    epsilon: float  # the clip's lower bound is 1 - epsilon
    epsilon_high: float  # the clip's upper bound is 1 + epsilon_high
    importance_sampling_level: str  # token, sequence, average or geometric_average
    max_negative_advantage_importance_sampling_weight: float | None
    mask_prob_ratio: bool
    k2_tau: float | None
    truncated_importance_sampling: float | None
    kl_penalty_coef: float
    kl_penalty_source: str  # current_learner or sample

    def bounds(self) -> tuple:
        return 1.0 - self.epsilon, 1.0 + self.epsilon_high


@dataclass
class AdamW:
    """The optimizer's hyperparameters, from either wire form (train_step's `optimizer`, optim_step's `adam`)."""

    learning_rate: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    grad_clip_norm: float  # <= 0: no clipping


@dataclass
class Row:
    tokens_T: torch.Tensor
    segment_ids_T: torch.Tensor
    mask_T: torch.Tensor  # float 0/1
    weights_T: torch.Tensor
    advantages_T: torch.Tensor
    logprobs_T: torch.Tensor  # NaN where missing
    original_T: torch.Tensor | None  # NaN where missing; None when not sent


def continues(seg_T: torch.Tensor) -> torch.Tensor:
    """True where token t has a prediction: same segment as token t-1."""
    cont = torch.zeros(seg_T.shape[0], dtype=torch.bool, device=seg_T.device)
    cont[1:] = seg_T[1:] == seg_T[:-1]
    return cont


def _head_stats(model: Transformer, h_CD: torch.Tensor, targets_C: torch.Tensor):
    logits = model.logits(h_CD)
    lse = torch.logsumexp(logits, dim=-1)
    lp = logits.gather(-1, targets_C[:, None]).squeeze(-1) - lse
    with torch.no_grad():
        ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return lp, ent


def logits_chunk(model: Transformer, requested: int | None) -> int:
    """Positions per logits chunk: the request's (ART's logprob_calculation_chunk_size), never past the memory bound."""
    bound = max(1, LOGITS_CHUNK_ELEMENTS // model.args.vocab_size)
    return bound if requested is None else min(requested, bound)


def row_logprobs(
    model: Transformer, tokens_T: torch.Tensor, seg_T: torch.Tensor, lora, chunk_size: int | None = None
) -> tuple:
    """(logprobs_T, entropy_T, valid_T): entry t scores tokens[t] given the earlier tokens of its segment."""
    device = model.device
    tokens_T, seg_T = tokens_T.to(device), seg_T.to(device)
    T = tokens_T.shape[0]
    h_TD = model(tokens_T[None], ForwardContext.packed(seg_T[None], model.args.sliding_window), lora)[0]
    h_pred, targets = h_TD[:-1], tokens_T[1:]
    chunk = logits_chunk(model, chunk_size)
    lps, ents = [], []
    for s in range(0, T - 1, chunk):
        h_c, t_c = h_pred[s : s + chunk], targets[s : s + chunk]
        if torch.is_grad_enabled() and chunk < T - 1:
            # Recompute this chunk's logits in backward instead of keeping all T x V of them.
            lp, ent = checkpoint(_head_stats, model, h_c, t_c, use_reentrant=False)
        else:
            lp, ent = _head_stats(model, h_c, t_c)
        lps.append(lp)
        ents.append(ent)
    zero = torch.zeros(1, device=device)
    lp_T = torch.cat([zero] + lps)
    ent_T = torch.cat([zero] + ents)
    valid_T = continues(seg_T)
    return lp_T * valid_T, ent_T * valid_T, valid_T


@torch.no_grad()
def forward_logprobs(
    model: Transformer, rows: Sequence[Row], adapter: Adapter | None, group: Group = SOLO
) -> list[list[float | None]]:
    """Per row, per token: log p(token | the earlier tokens of its segment), None at a segment's first token."""
    mine = []
    with shard.computing(group, adapter):
        lora = LoraBatch([adapter], model.dtype, model.device) if adapter is not None else None
        for batch in parts.plan(rows, group):
            tokens_T, seg_T, spans = parts.packed(batch, model.device)
            lp_T, _, valid_T = row_logprobs(model, tokens_T, seg_T, lora)
            for part, (a, b) in zip(batch, spans):
                values = [v if ok else None for v, ok in zip(lp_T[a:b].tolist(), valid_T[a:b].tolist(), strict=True)]
                mine.append((part.row, part.begin, values))
    shard.after_forward(model)
    out: list[list[float | None]] = [[None] * int(row.tokens_T.shape[0]) for row in rows]
    for every in group.gather(mine):
        for r, begin, values in every:
            out[r][begin : begin + len(values)] = values
    return out


def _segment_mean(x_T: torch.Tensor, mask_T: torch.Tensor, seg_T: torch.Tensor) -> torch.Tensor:
    """Per token: the mean of x over the trainable tokens of its segment."""
    _, inverse = torch.unique(seg_T, return_inverse=True)
    n = int(inverse.max()) + 1
    sums = torch.zeros(n, device=x_T.device, dtype=x_T.dtype).index_add(0, inverse, x_T * mask_T)
    counts = torch.zeros(n, device=x_T.device, dtype=x_T.dtype).index_add(0, inverse, mask_T)
    return (sums / counts.clamp(min=1.0))[inverse]


LOG_RATIO_BOUND = 20.0  # ART 0.5.23 clamps log-ratios here before exp (fp32 range; exp(20) ≈ 4.9e8)


@dataclass
class TokenLossStats:
    """What rl_token_loss measured besides the loss, for a step's metrics (all detached)."""

    kl: torch.Tensor | None  # the row's mean KL to the reference over trainable tokens; None: no penalty
    ratio_T: torch.Tensor  # the importance ratio after the sampling level, before caps and masks
    clipped_T: torch.Tensor  # bool: the ratio lies outside the loss's clip range (PPO: on the side the sign of A clips)
    truncated_T: torch.Tensor | None  # bool: truncated importance sampling lowered this token's weight; None: off


def _importance_ratio(delta_T, mask_T, seg_T, level: str) -> torch.Tensor:
    ratio_T = torch.exp(delta_T.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    if level == "token":
        return ratio_T
    seq_ratio_T = torch.exp(_segment_mean(delta_T, mask_T, seg_T).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    if level == "sequence":
        return seq_ratio_T
    if level == "average":
        return (ratio_T + seq_ratio_T) / 2
    return ratio_T.sqrt() * seq_ratio_T.sqrt()


def local_mean(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """A row's mean from its sums, where this rank holds the whole row."""
    return total / (count + 1e-18)


def _kl_adjusted(adv_T, new_T, old_T, mask_T, cfg: LossConfig, ref_T, row_mean: Callable = local_mean):
    """A + β·(mean kl − kl_t) with kl_t = (src − ref)·m; returns (advantages, mean kl or None)."""
    if not (cfg.kl_penalty_coef > 0 and ref_T is not None):
        return adv_T, None
    src_T = new_T.detach() if cfg.kl_penalty_source == "current_learner" else old_T.detach()
    kl_T = (src_T - ref_T) * mask_T
    kl = row_mean(kl_T.sum(), mask_T.sum())
    return adv_T + cfg.kl_penalty_coef * (kl - kl_T) * mask_T, kl


def _clipped(ratio_T, adv_T, cfg: LossConfig) -> torch.Tensor:
    lo, hi = cfg.bounds()
    r, a = ratio_T.detach(), adv_T.detach()
    if cfg.ppo:
        return ((a > 0) & (r > hi)) | ((a < 0) & (r < lo))
    return (r < lo) | (r > hi)


def rl_token_loss(
    new_T, old_T, original_T, adv_T, mask_T, seg_T, cfg: LossConfig, ref_T, row_mean: Callable = local_mean
) -> tuple:
    """Per-token policy loss L_t of rl-loss.md (before weights and mask), and its TokenLossStats; `row_mean` turns the
    row's sums into its mean (over ranks, where each holds part of the row)."""
    old_T = torch.where(torch.isnan(old_T), new_T.detach(), old_T)  # missing: sampled by this policy
    delta_T = new_T - old_T
    ratio_T = raw_ratio_T = _importance_ratio(delta_T, mask_T, seg_T, cfg.importance_sampling_level)
    lo, hi = cfg.bounds()
    # Falsy knobs are off, as in ART's trainer (0 means unset there too).
    if cfg.max_negative_advantage_importance_sampling_weight:
        ratio_T = ratio_T.clamp(max=cfg.max_negative_advantage_importance_sampling_weight)
    if cfg.mask_prob_ratio:
        ratio_T = torch.where((ratio_T > lo) & (ratio_T < hi), ratio_T, torch.zeros_like(ratio_T))
    if cfg.k2_tau:
        adv_T = adv_T - cfg.k2_tau * delta_T.detach()
    adv_T, kl = _kl_adjusted(adv_T, new_T, old_T, mask_T, cfg, ref_T, row_mean)
    if cfg.ppo:
        loss_T = -torch.min(ratio_T * adv_T, ratio_T.clamp(lo, hi) * adv_T)
    else:
        loss_T = -(ratio_T.detach().clamp(lo, hi) * adv_T * new_T)
    truncated_T = None
    # ART 0.5.23 truncates only the precalculated/sampler ratio; without original logprobs it skips the step.
    if cfg.truncated_importance_sampling and original_T is not None:
        original_T = torch.where(torch.isnan(original_T), new_T.detach(), original_T)
        tis_T = torch.exp(old_T - original_T).detach()
        truncated_T = tis_T > cfg.truncated_importance_sampling
        loss_T = loss_T * tis_T.clamp(max=cfg.truncated_importance_sampling)
    stats = TokenLossStats(
        kl=kl, ratio_T=raw_ratio_T.detach(), clipped_T=_clipped(raw_ratio_T, adv_T, cfg), truncated_T=truncated_T
    )
    return loss_T, stats


def _probs_corr(old: torch.Tensor, new: torch.Tensor) -> float:
    if old.numel() < 2:
        return 0.0
    a, b = old.exp().double(), new.exp().double()
    sa, sb = a.std(unbiased=False), b.std(unbiased=False)
    if not (torch.isfinite(sa) and torch.isfinite(sb)) or sa == 0 or sb == 0:
        return 0.0
    return float(((a - a.mean()) * (b - b.mean())).mean() / (sa * sb))


@dataclass
class _Tally:
    """What a train step sums over its rows for the metrics it reports."""

    loss: float = 0.0
    entropy: float = 0.0
    row: int = 0  # the row being tallied
    kls: dict[int, float] = field(default_factory=dict)  # per row with a KL penalty: its mean KL
    old_valid: float = 0.0  # trained tokens that came with a sampler logprob
    corr_old: list[torch.Tensor] = field(default_factory=list)
    corr_new: list[torch.Tensor] = field(default_factory=list)
    ratio_tokens: float = 0.0  # trained tokens (mask and weight nonzero) the ratio figures are over
    ratio_sum: float = 0.0
    clipped: float = 0.0
    truncated: float | None = None  # None: truncated importance sampling did not run


def train_step(
    model: Transformer,
    adapter: Adapter,
    loss: str,
    rows: Sequence[Row],
    loss_cfg: LossConfig | None,
    opt_cfg: AdamW,
    reference: Adapter | None = None,
    logprob_chunk_size: int | None = None,
    group: Group = SOLO,
) -> dict[str, float]:
    """One AdamW step over all rows (gradients accumulated row by row); the KL reference is `reference`, else the base.

    `loss_cfg` is the RL loss's configuration (None for SFT); `logprob_chunk_size` the positions whose logits are
    computed at once (None: as many as the memory bound allows). With several ranks each computes its `pieces` of the
    rows with the whole rows' normalisers, and the gradients and figures are summed over ranks: the step is the one
    a single rank takes.
    """
    t0 = time.perf_counter()
    for p in adapter.trainable() + adapter.parameters():  # this step's gradient is its rows' alone
        p.grad = None
    total_mask = float(sum(r.mask_T.sum() for r in rows))
    tally = _Tally()
    batches = parts.plan(rows, group)
    with shard.computing(group, adapter, reference):
        lora = LoraBatch([adapter], model.dtype, model.device)
        refs, means = {}, {}
        if loss == "rl" and loss_cfg.kl_penalty_coef > 0:
            ref_lora = LoraBatch([reference], model.dtype, model.device) if reference is not None else None
            refs, means = _references(model, batches, (lora, ref_lora), len(rows), loss_cfg, logprob_chunk_size, group)
        for batch in batches:
            tokens_T, seg_T, spans = parts.packed(batch, model.device)
            new_T, ent_T, _ = row_logprobs(model, tokens_T, seg_T, lora, logprob_chunk_size)
            # An empty batch computes nothing of the loss, but its backward gathers what every rank's does.
            total = new_T.sum() * 0.0 if not batch else 0.0
            for part, (a, b) in zip(batch, spans):
                tally.row = part.row
                whole = (rows[part.row], len(rows), total_mask)
                ref = (refs.get((part.row, part.begin)), means.get(part.row))
                total = total + _part_loss(loss, part.data, (new_T[a:b], ent_T[a:b]), whole, loss_cfg, ref, tally)
            if total_mask > 0:
                total.backward()
        if total_mask > 0:
            shard.reduce_gradients(adapter, group)
    shard.after_forward(model)
    tally = _summed(tally, group)
    # Nothing trainable: no step at all, so weights, Adam moments and the step count stay as they were.
    grad_norm = adamw_step(adapter, opt_cfg, tally.loss, group) if total_mask > 0 else 0.0
    metrics = _step_metrics(loss, rows, tally, total_mask, grad_norm, opt_cfg, time.perf_counter() - t0)
    if logprob_chunk_size is not None:
        metrics["logprob_chunk_size"] = float(logits_chunk(model, logprob_chunk_size))
    return metrics


def _part_loss(loss: str, piece: Row, outputs: tuple, whole: tuple, cfg, ref: tuple, tally: _Tally) -> torch.Tensor:
    """A row's part's scaled loss; `outputs` is its (logprobs_T, entropy_T), `whole` (its row, the row count, every
    row's trainable tokens), whose sums normalise it, `ref` its KL reference logprobs and, where the row is cut across
    ranks, the row's mean KL (Nones without a KL penalty)."""
    new_T, ent_T = outputs
    row, R, total_mask = whole
    device = new_T.device
    mask_T, w_T = piece.mask_T.to(device), piece.weights_T.to(device)
    if loss == "sft":
        return _sft_row_loss(new_T, ent_T, mask_T, w_T, total_mask, tally)
    ref_T, mean = ref
    row_mean = local_mean if mean is None else lambda total, count: mean
    return _rl_row_loss(piece, new_T, ent_T, (mask_T, w_T, float(row.mask_T.sum())), cfg, ref_T, R, tally, row_mean)


def _references(model, batches: list, loras: tuple, R: int, cfg: LossConfig, chunk, group: Group) -> tuple[dict, dict]:
    """The KL reference's logprobs of every part ({(row, begin): ref_T}), before the step, and with several ranks
    each row's mean KL over all its parts ({row: mean}), since a row may be cut across ranks (with one rank each
    row's loss takes its mean from its own tokens)."""
    lora, ref_lora = loras
    refs, sums_R2 = {}, torch.zeros(R, 2)
    with torch.no_grad():
        for batch in batches:
            tokens_T, seg_T, spans = parts.packed(batch, model.device)
            ref_T = row_logprobs(model, tokens_T, seg_T, ref_lora, chunk)[0]
            new_T = row_logprobs(model, tokens_T, seg_T, lora, chunk)[0] if group.world_size > 1 else None
            for part, (a, b) in zip(batch, spans):
                refs[(part.row, part.begin)] = ref_T[a:b]
                if new_T is not None:
                    sums_R2[part.row] += _kl_sums(part.data, new_T[a:b], ref_T[a:b], cfg)
    if group.world_size == 1:
        return refs, {}
    group.sum_(sums_R2)
    return refs, {r: local_mean(sums_R2[r, 0], sums_R2[r, 1]).to(model.device) for r in range(R)}


def _kl_sums(piece: Row, new_T, ref_T, cfg: LossConfig) -> torch.Tensor:
    """[sum of kl_t, trainable tokens] over a part: _kl_adjusted's sums, with its source's missing logprobs filled."""
    device = new_T.device
    mask_T = piece.mask_T.to(device)
    old_T = piece.logprobs_T.to(device)
    src_T = new_T if cfg.kl_penalty_source == "current_learner" else torch.where(torch.isnan(old_T), new_T, old_T)
    return torch.stack([((src_T - ref_T) * mask_T).sum(), mask_T.sum()]).cpu()


def _sft_row_loss(new_T, ent_T, mask_T, w_T, total_mask: float, tally: _Tally) -> torch.Tensor:
    # One normaliser for the whole batch: tokens count equally across rows.
    row_loss = (-new_T * w_T * mask_T).sum() / max(total_mask, 1e-18)
    tally.entropy += float((ent_T * w_T * mask_T).sum())
    tally.loss += float(row_loss.detach())
    return row_loss


def _rl_row_loss(row: Row, new_T, ent_T, masks: tuple, cfg: LossConfig, ref_T, R: int, tally: _Tally, row_mean):
    """The row's mean token loss over its trainable tokens, divided by the row count R (rows count equally); `masks`
    is (mask_T, weights_T, the whole row's trainable tokens)."""
    mask_T, w_T, m_sum = masks
    device = new_T.device
    old_T = row.logprobs_T.to(device)
    orig_T = row.original_T.to(device) if row.original_T is not None else None
    seg_T = row.segment_ids_T.to(device)
    loss_T, stats = rl_token_loss(
        new_T, old_T, orig_T, row.advantages_T.to(device), mask_T, seg_T, cfg, ref_T, row_mean
    )
    row_loss = (loss_T * w_T * mask_T).sum() / (m_sum + 1e-18)
    tally.entropy += float((ent_T * w_T * mask_T).sum() / (m_sum + 1e-18))
    tally.loss += float(row_loss.detach()) / R
    _tally_ratios(tally, stats, (mask_T > 0) & (w_T != 0))
    seen = (mask_T > 0) & ~torch.isnan(old_T)
    tally.old_valid += float(seen.sum())
    tally.corr_old.append(old_T[seen].detach())
    tally.corr_new.append(new_T[seen].detach())
    return row_loss / R


def _tally_ratios(tally: _Tally, stats: TokenLossStats, trained_T: torch.Tensor) -> None:
    """ART 0.5.23's off-policy figures over the trained tokens: mean ratio, clipped and truncated fractions."""
    if stats.kl is not None:
        tally.kls[tally.row] = float(stats.kl)
    tally.ratio_tokens += float(trained_T.sum())
    tally.ratio_sum += float(stats.ratio_T[trained_T].sum())
    tally.clipped += float(stats.clipped_T[trained_T].sum())
    if stats.truncated_T is not None:
        tally.truncated = (tally.truncated or 0.0) + float(stats.truncated_T[trained_T].sum())


def _summed(tally: _Tally, group: Group) -> _Tally:
    """Every rank's tally as one: sums summed, per-row KL means merged, the tokens for probs_corr in row order."""
    if group.world_size == 1:
        return tally
    names = ("loss", "entropy", "old_valid", "ratio_tokens", "ratio_sum", "clipped")
    ran = tally.truncated is not None
    sums = group.sum_floats([getattr(tally, n) for n in names] + [tally.truncated or 0.0, float(ran)])
    out = _Tally(**dict(zip(names, sums[: len(names)])))
    out.truncated = sums[-2] if sums[-1] > 0 else None
    for kls, old, new in group.gather((tally.kls, tally.corr_old, tally.corr_new)):
        out.kls.update(kls)
        out.corr_old += old
        out.corr_new += new
    return out


def adamw_step(adapter: Adapter, p: AdamW, loss: float | None = None, group: Group = SOLO) -> float:
    """One AdamW step (decoupled weight decay) of the adapter's own optimizer (its moments persist across steps) on
    the accumulated gradient, clipped to grad_clip_norm when > 0; counts the step and zeroes the gradient. Returns
    the gradient norm before clipping. A non-finite loss or gradient, or a weight leaving the bound, fails the step
    and leaves the adapter, its moments and its step count as they were (the gradient is discarded all the same)."""
    if adapter.optimizer is None:
        adapter.optimizer = make_optimizer(adapter)
    opt = adapter.optimizer
    for param_group in opt.param_groups:
        param_group.update(lr=p.learning_rate, betas=(p.beta1, p.beta2), eps=p.eps, weight_decay=p.weight_decay)
    grads = [q.grad for q in adapter.trainable() if q.grad is not None]
    grad_norm = 0.0
    try:
        if grads:
            total = group.norm(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
            grad_norm = float(total)
            if p.grad_clip_norm > 0:  # as torch.nn.utils.clip_grad_norm_ scales them, with the norm over every rank
                torch._foreach_mul_(grads, torch.clamp(p.grad_clip_norm / (total + 1e-6), max=1.0))
            check_divergence(grad_norm, loss)
        guarded_step(adapter, opt, group)  # parameters without a gradient are left alone, as AdamW does
    finally:
        opt.zero_grad(set_to_none=True)
    adapter.version += 1
    return grad_norm


class TrainingDiverged(Exception):
    """A step whose loss or gradient is not finite, or whose update would push a weight out of lora.py's bound;
    the adapter and its optimizer state are left as they were. Answered with the error code `diverged`."""


def check_divergence(grad_norm: float, loss: float | None = None) -> None:
    """Before an optimizer step: its gradient norm (and loss, where the step has one) must be finite."""
    for name, value in (("loss", loss), ("gradient norm", grad_norm)):
        if value is not None and not math.isfinite(value):
            raise TrainingDiverged(f"training diverged: the {name} is {value}; the step was not applied")


def guarded_step(adapter: Adapter, opt: torch.optim.Optimizer, group: Group = SOLO) -> None:
    """opt.step(), undone (weights and moments restored bit for bit) when a weight leaves the bound (on any rank)."""
    params = adapter.trainable()
    saved_weights = [p.detach().clone() for p in params]
    saved_state = {p: {k: v.clone() if torch.is_tensor(v) else v for k, v in st.items()} for p, st in opt.state.items()}
    opt.step()
    problem = shard.weights_problem(adapter, group)
    if problem is None:
        return
    with torch.no_grad():
        for p, w in zip(params, saved_weights):
            p.copy_(w)
    opt.state.clear()
    opt.state.update(saved_state)
    raise TrainingDiverged(f"training diverged: the step would leave {problem}; the step was not applied")


def _step_metrics(
    loss: str, rows: Sequence[Row], tally: _Tally, total_mask: float, grad_norm: float, opt_cfg: AdamW, elapsed: float
) -> dict[str, float]:
    tokens = sum(r.tokens_T.shape[0] for r in rows)
    metrics = {
        "loss": tally.loss,
        "grad_norm": grad_norm,
        "entropy": tally.entropy / max(total_mask, 1e-18) if loss == "sft" else tally.entropy / len(rows),
        "num_trainable_tokens": total_mask,
        "num_tokens": float(tokens),
        "tokens_per_second": tokens / elapsed if elapsed > 0 else 0.0,
        "learning_rate": opt_cfg.learning_rate,
        "step_seconds": elapsed,
    }
    if loss == "sft":
        metrics["sft_loss"] = tally.loss
        return metrics
    metrics["policy_loss"] = tally.loss
    old_N = torch.cat(tally.corr_old) if tally.corr_old else torch.zeros(0)
    new_N = torch.cat(tally.corr_new) if tally.corr_new else torch.zeros(0)
    metrics["probs_corr"] = _probs_corr(old_N, new_N)  # 0.0 for fewer than two tokens
    metrics["frac_old_logprobs_valid"] = tally.old_valid / total_mask if total_mask > 0 else 0.0
    if old_N.numel():
        # Mean |trainer − sampler| logprob per token; at a job's first step (the weights the sampler used) it is the
        # numeric gap between the two engines, which the loss's importance ratios otherwise silently absorb. Absent
        # when no trained token carried a sampler logprob (the mean of nothing would be NaN).
        metrics["sampler_logprob_gap"] = float((new_N - old_N).abs().mean())
    if tally.kls:
        metrics["kl_policy_ref"] = sum(tally.kls[r] for r in sorted(tally.kls)) / len(tally.kls)
    denominator = max(tally.ratio_tokens, 1.0)
    metrics["importance_ratio_mean"] = tally.ratio_sum / denominator
    metrics["clipped_token_fraction"] = tally.clipped / denominator
    if tally.truncated is not None:
        metrics["truncated_token_fraction"] = tally.truncated / denominator
    return metrics
