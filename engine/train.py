"""Logprobs of packed rows, and one optimizer step of the RL or SFT loss on an adapter.

Owns: Row (one packed row's per-token arrays, validated), LossConfig and
OptimizerConfig (null means default, as in ../shared/spec/rl-loss.md),
chunked logprob/entropy computation, the per-token RL loss (CISPO default,
PPO, importance-sampling levels, ratio cap and masking, k2 tau, truncated IS,
KL penalty against a reference policy: the adapter-off model or a reference
adapter, e.g. an earlier checkpoint), the SFT loss, and AdamW with
gradient-norm clipping on the adapter's own optimizer state.

Refuses to know: trajectories, chat templates, advantages from rewards and
row packing (the server computes those and sends per-token arrays), the wire
format, adapter files.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import torch
from torch.utils.checkpoint import checkpoint

from .lora import Adapter, LoraBatch, make_optimizer
from .model import ForwardContext, Transformer

LOGITS_CHUNK_ELEMENTS = 1 << 25  # ~128 MiB of fp32 logits per chunk
IS_LEVELS = ("token", "sequence", "average", "geometric_average")
KL_SOURCES = ("current_learner", "sample")


@dataclass
class LossConfig:
    ppo: bool = False
    epsilon: Optional[float] = None  # None: 0.2 for PPO, 1.0 for CISPO
    epsilon_high: Optional[float] = None  # None: epsilon for PPO, 4.0 for CISPO
    importance_sampling_level: str = "token"
    max_negative_advantage_importance_sampling_weight: Optional[float] = None
    mask_prob_ratio: bool = False
    k2_tau: Optional[float] = None
    truncated_importance_sampling: Optional[float] = None
    kl_penalty_coef: float = 0.0
    kl_penalty_source: str = "current_learner"

    @classmethod
    def from_request(cls, d: Optional[dict]) -> "LossConfig":
        d = dict(d or {})
        known = set(cls.__dataclass_fields__)
        unknown = sorted(k for k, v in d.items() if k not in known and v is not None)
        if unknown:
            raise ValueError(f"loss_config keys not implemented: {', '.join(unknown)}")
        c = cls(**{k: v for k, v in d.items() if k in known and v is not None})
        for name in ("epsilon", "epsilon_high", "max_negative_advantage_importance_sampling_weight", "k2_tau",
                     "truncated_importance_sampling", "kl_penalty_coef"):
            v = getattr(c, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                raise ValueError(f"loss_config.{name} must be a number")
        if c.importance_sampling_level not in IS_LEVELS:
            raise ValueError(f"importance_sampling_level must be one of {', '.join(IS_LEVELS)}")
        if c.kl_penalty_source not in KL_SOURCES:
            raise ValueError(f"kl_penalty_source must be one of {', '.join(KL_SOURCES)}")
        if c.kl_penalty_coef < 0:
            raise ValueError("kl_penalty_coef must be >= 0")
        c.ppo, c.mask_prob_ratio = bool(c.ppo), bool(c.mask_prob_ratio)
        return c

    def bounds(self) -> tuple:
        eps = self.epsilon if self.epsilon is not None else (0.2 if self.ppo else 1.0)
        high = self.epsilon_high if self.epsilon_high is not None else (eps if self.ppo else 4.0)
        return 1.0 - eps, 1.0 + high


@dataclass
class OptimizerConfig:
    learning_rate: float
    betas: tuple
    weight_decay: float
    max_grad_norm: float  # <= 0: no clipping

    @classmethod
    def from_request(cls, d: Optional[dict], loss: str) -> "OptimizerConfig":
        d = d or {}
        sft = loss == "sft"
        # rl-loss.md defaults: RL clips at 0.1 with weight decay 0.1; SFT clips at 1.0 without decay.
        c = cls(learning_rate=_num(d, "learning_rate", 5e-6), betas=tuple(d.get("betas") or (0.9, 0.99)),
                weight_decay=_num(d, "weight_decay", 0.0 if sft else 0.1),
                max_grad_norm=_num(d, "max_grad_norm", 1.0 if sft else 0.1))
        if len(c.betas) != 2 or not all(isinstance(b, (int, float)) and 0 <= b < 1 for b in c.betas):
            raise ValueError("optimizer.betas must be two numbers in [0, 1)")
        if c.learning_rate < 0 or c.weight_decay < 0:
            raise ValueError("optimizer learning_rate and weight_decay must be >= 0")
        return c


def _num(d: dict, key: str, default: float) -> float:
    v = d.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{key} must be a finite number")
    return float(v)


@dataclass
class Row:
    tokens_T: torch.Tensor
    segment_ids_T: torch.Tensor
    mask_T: torch.Tensor  # float 0/1
    weights_T: torch.Tensor
    advantages_T: torch.Tensor
    logprobs_T: torch.Tensor  # NaN where missing
    original_T: Optional[torch.Tensor]  # NaN where missing; None when not sent


def _floats(v, key: str, T: int, nullable: bool) -> torch.Tensor:
    if not isinstance(v, list) or len(v) != T:
        raise ValueError(f"{key} must be a list with one entry per token ({T})")
    out = []
    for x in v:
        if x is None and nullable:
            out.append(float("nan"))
        elif isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise ValueError(f"{key} has a non-numeric entry {x!r}")
        else:
            out.append(float(x))
    return torch.tensor(out, dtype=torch.float32)


def parse_rows(rows, vocab: int, max_len: int, loss: Optional[str]) -> List[Row]:
    """Validate wire rows; loss None means `forward` (tokens and segment_ids only)."""
    if not isinstance(rows, list) or not rows:
        raise ValueError("rows must be a non-empty list")
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise ValueError(f"rows[{i}] must be an object")
        toks = r.get("tokens")
        if not isinstance(toks, list) or not toks or any(isinstance(t, bool) or not isinstance(t, int) for t in toks):
            raise ValueError(f"rows[{i}].tokens must be a non-empty list of integers")
        if any(not 0 <= t < vocab for t in toks):
            raise ValueError(f"rows[{i}].tokens has an id outside the vocabulary (size {vocab})")
        T = len(toks)
        if T > max_len:
            raise ValueError(f"rows[{i}] has {T} tokens, more than the context length {max_len}")
        seg = r.get("segment_ids")
        if seg is None:
            seg = [0] * T
        if not isinstance(seg, list) or len(seg) != T or any(isinstance(s, bool) or not isinstance(s, int) for s in seg):
            raise ValueError(f"rows[{i}].segment_ids must be a list of integers, one per token")
        seg_T = torch.tensor(seg)
        row = Row(tokens_T=torch.tensor(toks), segment_ids_T=seg_T, mask_T=torch.zeros(T), weights_T=torch.ones(T),
                  advantages_T=torch.zeros(T), logprobs_T=torch.full((T,), float("nan")), original_T=None)
        if loss is not None:
            mask = r.get("mask")
            if not isinstance(mask, list) or len(mask) != T or any(m not in (0, 1) for m in mask):
                raise ValueError(f"rows[{i}].mask must be a list of 0/1, one per token")
            row.mask_T = torch.tensor([float(m) for m in mask])
            if bool((row.mask_T * (~_continues(seg_T)).float()).any()):
                raise ValueError(f"rows[{i}].mask is 1 at the first token of a segment (it has no prediction)")
            if r.get("weights") is not None:
                row.weights_T = _floats(r["weights"], f"rows[{i}].weights", T, nullable=False)
            if loss == "rl":
                if r.get("advantages") is None:
                    raise ValueError(f"rows[{i}].advantages is required for the rl loss")
                row.advantages_T = _floats(r["advantages"], f"rows[{i}].advantages", T, nullable=False)
                if r.get("logprobs") is not None:
                    row.logprobs_T = _floats(r["logprobs"], f"rows[{i}].logprobs", T, nullable=True)
                if r.get("original_logprobs") is not None:
                    row.original_T = _floats(r["original_logprobs"], f"rows[{i}].original_logprobs", T, nullable=True)
        out.append(row)
    return out


def _continues(seg_T: torch.Tensor) -> torch.Tensor:
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


def row_logprobs(model: Transformer, tokens_T: torch.Tensor, seg_T: torch.Tensor, lora) -> tuple:
    """(logprobs_T, entropy_T, valid_T): entry t scores tokens[t] given the earlier tokens of its segment."""
    device = model.device
    tokens_T, seg_T = tokens_T.to(device), seg_T.to(device)
    T = tokens_T.shape[0]
    h_TD = model(tokens_T[None], ForwardContext.packed(seg_T[None], model.args.sliding_window), lora)[0]
    h_pred, targets = h_TD[:-1], tokens_T[1:]
    chunk = max(1, LOGITS_CHUNK_ELEMENTS // model.args.vocab_size)
    lps, ents = [], []
    for s in range(0, T - 1, chunk):
        h_c, t_c = h_pred[s:s + chunk], targets[s:s + chunk]
        if torch.is_grad_enabled() and T - 1 > chunk:
            # Recompute this chunk's logits in backward instead of keeping all T x V of them.
            lp, ent = checkpoint(_head_stats, model, h_c, t_c, use_reentrant=False)
        else:
            lp, ent = _head_stats(model, h_c, t_c)
        lps.append(lp)
        ents.append(ent)
    zero = torch.zeros(1, device=device)
    lp_T = torch.cat([zero] + lps)
    ent_T = torch.cat([zero] + ents)
    valid_T = _continues(seg_T)
    return lp_T * valid_T, ent_T * valid_T, valid_T


@torch.no_grad()
def forward_logprobs(model: Transformer, rows: Sequence[Row], adapter: Optional[Adapter]) -> List[List[Optional[float]]]:
    lora = LoraBatch([adapter], model.dtype, model.device) if adapter is not None else None
    out = []
    for row in rows:
        lp_T, _, valid_T = row_logprobs(model, row.tokens_T, row.segment_ids_T, lora)
        out.append([v if ok else None for v, ok in zip(lp_T.tolist(), valid_T.tolist())])
    return out


def _segment_mean(x_T: torch.Tensor, mask_T: torch.Tensor, seg_T: torch.Tensor) -> torch.Tensor:
    """Per token: the mean of x over the trainable tokens of its segment."""
    _, inverse = torch.unique(seg_T, return_inverse=True)
    n = int(inverse.max()) + 1
    sums = torch.zeros(n, device=x_T.device, dtype=x_T.dtype).index_add(0, inverse, x_T * mask_T)
    counts = torch.zeros(n, device=x_T.device, dtype=x_T.dtype).index_add(0, inverse, mask_T)
    return (sums / counts.clamp(min=1.0))[inverse]


def rl_token_loss(new_T, old_T, original_T, adv_T, mask_T, seg_T, cfg: LossConfig,
                  ref_T: Optional[torch.Tensor]) -> tuple:
    """Per-token policy loss L_t of rl-loss.md (before weights and mask) and the row's KL metric."""
    old_T = torch.where(torch.isnan(old_T), new_T.detach(), old_T)  # missing: sampled by this policy
    delta_T = new_T - old_T
    ratio_T = torch.exp(delta_T)
    level = cfg.importance_sampling_level
    if level != "token":
        seq_ratio_T = torch.exp(_segment_mean(delta_T, mask_T, seg_T))
        if level == "sequence":
            ratio_T = seq_ratio_T
        elif level == "average":
            ratio_T = (ratio_T + seq_ratio_T) / 2
        else:
            ratio_T = ratio_T.sqrt() * seq_ratio_T.sqrt()
    lo, hi = cfg.bounds()
    # Falsy knobs are off, as in ART's trainer (0 means unset there too).
    if cfg.max_negative_advantage_importance_sampling_weight:
        ratio_T = ratio_T.clamp(max=cfg.max_negative_advantage_importance_sampling_weight)
    if cfg.mask_prob_ratio:
        ratio_T = torch.where((ratio_T > lo) & (ratio_T < hi), ratio_T, torch.zeros_like(ratio_T))
    adv_T = adv_T.clone()
    if cfg.k2_tau:
        adv_T = adv_T - cfg.k2_tau * delta_T.detach()
    kl = None
    if cfg.kl_penalty_coef > 0 and ref_T is not None:
        src_T = new_T.detach() if cfg.kl_penalty_source == "current_learner" else old_T
        kl_T = (src_T - ref_T) * mask_T
        kl = kl_T.sum() / (mask_T.sum() + 1e-18)
        adv_T = adv_T + cfg.kl_penalty_coef * (kl - kl_T) * mask_T
    if cfg.ppo:
        loss_T = -torch.min(ratio_T * adv_T, ratio_T.clamp(lo, hi) * adv_T)
    else:
        loss_T = -(ratio_T.detach().clamp(lo, hi) * adv_T * new_T)
    if cfg.truncated_importance_sampling:
        trunc_T = ratio_T
        if original_T is not None:
            original_T = torch.where(torch.isnan(original_T), new_T.detach(), original_T)
            trunc_T = torch.exp(old_T - original_T)
        loss_T = loss_T * trunc_T.clamp(max=cfg.truncated_importance_sampling).detach()
    return loss_T, kl


def _probs_corr(old: torch.Tensor, new: torch.Tensor) -> float:
    if old.numel() < 2:
        return 0.0
    a, b = old.exp().double(), new.exp().double()
    sa, sb = a.std(unbiased=False), b.std(unbiased=False)
    if not (torch.isfinite(sa) and torch.isfinite(sb)) or sa == 0 or sb == 0:
        return 0.0
    return float(((a - a.mean()) * (b - b.mean())).mean() / (sa * sb))


def train_step(model: Transformer, adapter: Adapter, loss: str, rows: Sequence[Row], loss_cfg: LossConfig,
               opt_cfg: OptimizerConfig, reference: Optional[Adapter] = None) -> Dict[str, float]:
    """One AdamW step over all rows (gradients accumulated row by row); the KL reference is `reference`, else the base."""
    t0 = time.perf_counter()
    device = model.device
    lora = LoraBatch([adapter], model.dtype, device)
    ref_lora = LoraBatch([reference], model.dtype, device) if reference is not None else None
    params = adapter.parameters()
    if adapter.optimizer is None:
        adapter.optimizer = make_optimizer(adapter)
    opt = adapter.optimizer
    for group in opt.param_groups:
        group.update(lr=opt_cfg.learning_rate, betas=opt_cfg.betas, weight_decay=opt_cfg.weight_decay)
    opt.zero_grad(set_to_none=True)

    total_mask = float(sum(r.mask_T.sum() for r in rows))
    tokens = sum(r.tokens_T.shape[0] for r in rows)
    R = len(rows)
    loss_sum = ent_sum = 0.0
    kls: List[float] = []
    corr_old: List[torch.Tensor] = []
    corr_new: List[torch.Tensor] = []
    old_valid = 0.0
    for row in rows:
        mask_T, w_T = row.mask_T.to(device), row.weights_T.to(device)
        ref_T = None
        if loss == "rl" and loss_cfg.kl_penalty_coef > 0:
            with torch.no_grad():
                ref_T = row_logprobs(model, row.tokens_T, row.segment_ids_T, ref_lora)[0]
        new_T, ent_T, _ = row_logprobs(model, row.tokens_T, row.segment_ids_T, lora)
        m_sum = mask_T.sum()
        if loss == "sft":
            # One normaliser for the whole batch: tokens count equally across rows.
            row_loss = (-new_T * w_T * mask_T).sum() / max(total_mask, 1e-18)
            ent_sum += float((ent_T * w_T * mask_T).sum())
            scaled = row_loss
            loss_sum += float(row_loss)
        else:
            old_T = row.logprobs_T.to(device)
            orig_T = row.original_T.to(device) if row.original_T is not None else None
            loss_T, kl = rl_token_loss(new_T, old_T, orig_T, row.advantages_T.to(device), mask_T,
                                       row.segment_ids_T.to(device), loss_cfg, ref_T)
            row_loss = (loss_T * w_T * mask_T).sum() / (m_sum + 1e-18)
            ent_sum += float((ent_T * w_T * mask_T).sum() / (m_sum + 1e-18))
            scaled = row_loss / R
            loss_sum += float(row_loss) / R
            if kl is not None:
                kls.append(float(kl))
            seen = (mask_T > 0) & ~torch.isnan(old_T)
            old_valid += float(seen.sum())
            corr_old.append(old_T[seen].detach())
            corr_new.append(new_T[seen].detach())
        if total_mask > 0:
            scaled.backward()

    grads = [p.grad for p in params if p.grad is not None]
    grad_norm = 0.0
    if total_mask > 0 and grads:
        if opt_cfg.max_grad_norm > 0:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, opt_cfg.max_grad_norm))
        else:
            grad_norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
        opt.step()
        adapter.version += 1
    # Nothing trainable: no step at all, so weights (and Adam moments) stay exactly as they were.
    opt.zero_grad(set_to_none=True)
    elapsed = time.perf_counter() - t0
    metrics = {
        "loss": loss_sum,
        "grad_norm": grad_norm,
        "entropy": ent_sum / max(total_mask, 1e-18) if loss == "sft" else ent_sum / R,
        "num_trainable_tokens": total_mask,
        "num_tokens": float(tokens),
        "tokens_per_second": tokens / elapsed if elapsed > 0 else 0.0,
        "learning_rate": opt_cfg.learning_rate,
        "step_seconds": elapsed,
    }
    if loss == "sft":
        metrics["sft_loss"] = loss_sum
    else:
        metrics["policy_loss"] = loss_sum
        metrics["probs_corr"] = _probs_corr(torch.cat(corr_old), torch.cat(corr_new)) if corr_old else 0.0
        metrics["frac_old_logprobs_valid"] = old_valid / total_mask if total_mask > 0 else 0.0
        if kls:
            metrics["kl_policy_ref"] = sum(kls) / len(kls)
    return metrics
