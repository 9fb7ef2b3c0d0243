"""Per-request sampling: parameters, per-sequence state, and one batched sampling step.

Owns: SamplingParams (wire.py builds it from a request), the per-sequence state
(seeded generator, generated ids, penalty counts), and `sample_step`, which
turns a batch of next-token logits into tokens + raw logprobs. Processing
order follows vLLM: bans (allowed ids, bad words, min_tokens) and logit_bias,
then repetition/frequency/presence penalties, then a constraint's mask, then
temperature, top-k, top-p, min-p. Reported logprobs are always the raw
log-softmax of the model's logits, before any of that, so they equal what the
trainer computes. Every step is row-wise and applies bans, constraint masks and
filters by selection (where / masked_fill), never by multiplying a 0/1 mask in,
so one row's values never reach another's (generate.py fails a row with
non-finite logits before it gets here).

Refuses to know: the model, the KV cache, scheduling, when a sequence stops
(generate.py decides that from the returned token).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .schema import GENERATE_DEFAULTS as _DEFAULT
from .schema import GREEDY_TEMPERATURE_BELOW  # temperatures this small sample the argmax (bounds.json), as vLLM does


@dataclass
class SamplingParams:
    """One request's sampling settings, as wire.py parsed them from a request carrying every field (vLLM's names).

    The knobs below `n` default to what protocol.json says a caller's omission means ("off"), only for
    engine/pretrain.py's eval, which builds its params in-process: its source is part of the tiny model's weights
    key (models/make-tiny.ts), so it cannot change without retraining that model. The wire never relies on them.
    """

    max_tokens: int | None  # None: until the context is full
    temperature: float
    seed: int | None  # None: a fresh random seed
    n: int
    min_tokens: int = _DEFAULT["min_tokens"]
    ignore_eos: bool = _DEFAULT["ignore_eos"]
    stop_token_ids: tuple[int, ...] = tuple(_DEFAULT["stop_token_ids"])
    top_p: float = _DEFAULT["top_p"]
    top_k: int = _DEFAULT["top_k"]  # -1: off
    min_p: float = _DEFAULT["min_p"]
    presence_penalty: float = _DEFAULT["presence_penalty"]
    frequency_penalty: float = _DEFAULT["frequency_penalty"]
    repetition_penalty: float = _DEFAULT["repetition_penalty"]
    logit_bias: dict[int, float] = field(default_factory=dict)  # {}
    allowed_token_ids: list[int] | None = _DEFAULT["allowed_token_ids"]  # None: every token
    bad_words_ids: list[list[int]] = field(default_factory=list)  # []
    logprobs: int | None = _DEFAULT["logprobs"]  # top-k logprobs per sampled token; None: none
    prompt_logprobs: int | None = _DEFAULT["prompt_logprobs"]

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE_BELOW

    @property
    def penalized(self) -> bool:
        return self.presence_penalty != 0 or self.frequency_penalty != 0 or self.repetition_penalty != 1


def static_bias(params: SamplingParams, vocab: int, device) -> torch.Tensor | None:
    """One dense [V] additive bias for logit_bias, allowed ids and single-token bad words (shared by n samples)."""
    single_bad = [w[0] for w in params.bad_words_ids if len(w) == 1]
    if not params.logit_bias and params.allowed_token_ids is None and not single_bad:
        return None
    bias_V = torch.zeros(vocab)
    if params.logit_bias:
        ids = torch.tensor(list(params.logit_bias.keys()), dtype=torch.long)
        bias_V[ids] = torch.tensor(list(params.logit_bias.values()))
    if params.allowed_token_ids is not None:
        banned = torch.ones(vocab, dtype=torch.bool)
        banned[torch.tensor(params.allowed_token_ids, dtype=torch.long)] = False
        bias_V.masked_fill_(banned, float("-inf"))
    if single_bad:
        bias_V[torch.tensor(single_bad, dtype=torch.long)] = float("-inf")
    return bias_V.to(device)


def new_seed() -> int:
    return int.from_bytes(os.urandom(8), "little") >> 1


class SeqSampler:
    """Mutable sampling state of one sequence."""

    def __init__(
        self,
        params: SamplingParams,
        prompt: Sequence[int],
        index: int,
        vocab: int,
        bias_V: torch.Tensor | None,
        prompt_mask_V: torch.Tensor | None,
        device,
    ):
        self.params = params
        seed = new_seed() if params.seed is None else (params.seed * 1_000_003 + index) % (1 << 63)
        # CPU generators: the same seed gives the same tokens on any device and in any batch.
        self.generator = torch.Generator().manual_seed(seed)
        self.output: list[int] = []
        self.bias_V = bias_V
        self.prompt_mask_V = prompt_mask_V
        self.counts_V = torch.zeros(vocab, device=device) if params.penalized else None

    def append(self, token: int) -> None:
        self.output.append(token)
        if self.counts_V is not None:
            self.counts_V[token] += 1


def prompt_mask(params: SamplingParams, prompt: Sequence[int], vocab: int, device) -> torch.Tensor | None:
    if params.repetition_penalty == 1:
        return None
    mask_V = torch.zeros(vocab, dtype=torch.bool)
    if len(prompt):
        mask_V[torch.tensor(list(prompt), dtype=torch.long)] = True
    return mask_V.to(device)


@dataclass
class SampleResult:
    tokens: list[int]
    logprobs: list[float]
    top: list[list[list] | None]  # per row: [[id, logprob], ...] or None


def sample_step(
    logits_BV: torch.Tensor,
    rows: Sequence[SeqSampler],
    eos_ids: Sequence[int],
    allowed: tuple[Sequence[int], torch.Tensor] | None = None,
) -> SampleResult:
    """Sample one token per row; row b's state is rows[b]. `allowed`, when given, is (constrained rows, their bool
    [C, V] masks, a constraint's): those rows sample only among their tokens, whatever their other settings."""
    logits_BV = logits_BV.float()
    raw_BV = torch.log_softmax(logits_BV, dim=-1)
    x_BV = logits_BV.clone()
    banned_any = _apply_bans(x_BV, rows, eos_ids)
    _apply_penalties(x_BV, rows)
    if banned_any:
        # A row whose every token got banned samples from its raw logits rather than from NaNs.
        dead_B = torch.isneginf(x_BV).all(dim=-1)
        if bool(dead_B.any()):
            x_BV[dead_B] = logits_BV[dead_B]
    if allowed is not None:
        _apply_constraints(x_BV, logits_BV, allowed)
    tokens_B = _pick_tokens(x_BV, rows)
    chosen_lp = raw_BV.gather(1, tokens_B[:, None]).squeeze(1)
    return SampleResult(tokens=tokens_B.tolist(), logprobs=chosen_lp.tolist(), top=_top_logprobs(raw_BV, rows))


def _apply_bans(x_BV: torch.Tensor, rows: Sequence[SeqSampler], eos_ids: Sequence[int]) -> bool:
    """Static biases, min_tokens' stop bans and multi-token bad words, in place; True if anything got banned."""
    bias_rows = [b for b, r in enumerate(rows) if r.bias_V is not None]
    banned_any = bool(bias_rows)
    if bias_rows:
        idx = torch.tensor(bias_rows, device=x_BV.device)
        x_BV[idx] += torch.stack([rows[b].bias_V for b in bias_rows])
    for b, r in enumerate(rows):
        p = r.params
        if len(r.output) < p.min_tokens:
            banned = list(p.stop_token_ids) + ([] if p.ignore_eos else list(eos_ids))
            if banned:
                x_BV[b, banned] = float("-inf")
                banned_any = True
        for word in p.bad_words_ids:
            if (
                len(word) > 1
                and len(r.output) >= len(word) - 1
                and r.output[len(r.output) - len(word) + 1 :] == word[:-1]
            ):
                x_BV[b, word[-1]] = float("-inf")
                banned_any = True
    return banned_any


def _apply_penalties(x_BV: torch.Tensor, rows: Sequence[SeqSampler]) -> None:
    """Repetition, frequency and presence penalties of the rows that ask for them, in place."""
    pen_rows = [b for b, r in enumerate(rows) if r.counts_V is not None]
    if not pen_rows:
        return
    device, V = x_BV.device, x_BV.shape[1]
    idx = torch.tensor(pen_rows, device=device)
    counts_PV = torch.stack([rows[b].counts_V for b in pen_rows])
    xs_PV = x_BV[idx]
    rep = torch.tensor([rows[b].params.repetition_penalty for b in pen_rows], device=device)[:, None]
    seen_PV = counts_PV > 0
    prompt_rows = [rows[b].prompt_mask_V for b in pen_rows]
    if any(m is not None for m in prompt_rows):
        seen_PV = seen_PV | torch.stack(
            [m if m is not None else torch.zeros(V, dtype=torch.bool, device=device) for m in prompt_rows]
        )
    # Repetition penalty (CTRL / HF / vLLM): shrink positive logits, push negative ones further down.
    xs_PV = torch.where(seen_PV, torch.where(xs_PV > 0, xs_PV / rep, xs_PV * rep), xs_PV)
    freq = torch.tensor([rows[b].params.frequency_penalty for b in pen_rows], device=device)[:, None]
    pres = torch.tensor([rows[b].params.presence_penalty for b in pen_rows], device=device)[:, None]
    x_BV[idx] = xs_PV - freq * counts_PV - pres * (counts_PV > 0).float()


def _apply_constraints(
    x_BV: torch.Tensor, logits_BV: torch.Tensor, allowed: tuple[Sequence[int], torch.Tensor]
) -> None:
    """Constrained rows keep only their allowed tokens, in place. Masks are applied by selection (torch.where) on
    the constrained rows alone, never by arithmetic, so no row's values can reach another row."""
    rows, keep_CV = allowed
    if not rows:
        return
    every_row = len(rows) == x_BV.shape[0]  # then rows is 0..B-1: no gather and scatter needed
    idx = None if every_row else torch.tensor(list(rows), device=x_BV.device)
    pick = (lambda t_BV: t_BV) if every_row else (lambda t_BV: t_BV.index_select(0, idx))
    banned = torch.full((), float("-inf"), dtype=x_BV.dtype, device=x_BV.device)
    kept_CV = torch.where(keep_CV, pick(x_BV), banned)
    # Bans that leave nothing the constraint allows yield to it: the output must stay inside.
    dead_C = torch.isneginf(kept_CV.amax(dim=-1))
    if bool(dead_C.any()):
        kept_CV = torch.where(dead_C[:, None], torch.where(keep_CV, pick(logits_BV), banned), kept_CV)
    if every_row:
        x_BV.copy_(kept_CV)
    else:
        x_BV.index_copy_(0, idx, kept_CV)


def _pick_tokens(x_BV: torch.Tensor, rows: Sequence[SeqSampler]) -> torch.Tensor:
    """Argmax for greedy rows, a seeded draw for the others."""
    B, device = x_BV.shape[0], x_BV.device
    tokens_B = torch.empty(B, dtype=torch.long, device=device)
    greedy = [b for b, r in enumerate(rows) if r.params.greedy]
    rand = [b for b, r in enumerate(rows) if not r.params.greedy]
    if greedy:
        g_idx = torch.tensor(greedy, device=device)
        tokens_B[g_idx] = x_BV[g_idx].argmax(dim=-1)
    if len(rand) == B:
        return _sample_rows(x_BV, rows)
    if rand:
        r_idx = torch.tensor(rand, device=device)
        tokens_B[r_idx] = _sample_rows(x_BV[r_idx], [rows[b] for b in rand])
    return tokens_B


def _top_logprobs(raw_BV: torch.Tensor, rows: Sequence[SeqSampler]) -> list[list[list] | None]:
    tops: list[list[list] | None] = [None] * raw_BV.shape[0]
    ks = [r.params.logprobs or 0 for r in rows]
    kmax = max(ks)
    if kmax > 0:
        vals, ids = raw_BV.topk(kmax, dim=-1)
        vals, ids = vals.tolist(), ids.tolist()
        for b, k in enumerate(ks):
            if k:
                tops[b] = [[ids[b][j], vals[b][j]] for j in range(k)]
    return tops


def _uniforms(rows: Sequence[SeqSampler], device) -> torch.Tensor:
    # One draw from each row's own generator: a row's tokens never depend on its batch.
    return torch.tensor([torch.rand(1, generator=r.generator).item() for r in rows], dtype=torch.float32, device=device)


def _inverse_cdf(probs_RV: torch.Tensor, u_R: torch.Tensor) -> torch.Tensor:
    cdf = torch.cumsum(probs_RV, dim=-1)
    picked = torch.searchsorted(cdf, (u_R * cdf[:, -1])[:, None], right=True).squeeze(1)
    picked = picked.clamp_(max=probs_RV.shape[1] - 1)
    # A draw that lands past the last positive mass (rounding) falls back to the mode.
    bad = probs_RV.gather(1, picked[:, None]).squeeze(1) <= 0
    return torch.where(bad, probs_RV.argmax(dim=-1), picked)


TOP_P_TRIES = 8


def _sample_rows(x_RV: torch.Tensor, rows: Sequence[SeqSampler]) -> torch.Tensor:
    """Temperature, top-k, min-p, and top-p by rejection; one token per row.

    Top-p without sorting the vocabulary: draw from the top-k/min-p
    distribution and accept when the mass of strictly more probable tokens is
    below top_p, i.e. when the draw lies in the nucleus (so tokens tied with
    the nucleus' last one are all in it, as top-k keeps ties). An accepted draw is
    distributed exactly as the nucleus-restricted distribution, and the
    expected number of draws is 1 / (nucleus mass). Rows still rejected after
    a few draws (flat distributions, small top_p) are filtered by a sort.
    """
    device = x_RV.device
    temps = torch.tensor([r.params.temperature for r in rows], device=device)[:, None]
    x_RV = _filter_top_k(x_RV / temps, [r.params.top_k for r in rows])
    probs = torch.softmax(x_RV, dim=-1)  # top-p's nucleus is measured on this distribution
    draw = probs
    min_p = [r.params.min_p for r in rows]
    if any(m > 0 for m in min_p):
        floor = torch.tensor(min_p, device=device)[:, None] * probs.max(dim=-1, keepdim=True).values
        draw = probs.masked_fill(probs < floor, 0.0)
    picked = _inverse_cdf(draw, _uniforms(rows, device))
    top_p = torch.tensor([r.params.top_p for r in rows], device=device)
    pending = [i for i, r in enumerate(rows) if r.params.top_p < 1.0]
    for _ in range(TOP_P_TRIES):
        if not pending:
            return picked
        p_idx = torch.tensor(pending, device=device)
        pp = probs[p_idx]
        mine = pp.gather(1, picked[p_idx][:, None])
        ahead = (pp * (pp > mine)).sum(dim=-1)
        accepted = (ahead < top_p[p_idx]).tolist()
        pending = [i for i, ok in zip(pending, accepted, strict=True) if not ok]
        if pending:
            p_idx = torch.tensor(pending, device=device)
            picked[p_idx] = _inverse_cdf(draw[p_idx], _uniforms([rows[i] for i in pending], device))
    if pending:
        p_idx = torch.tensor(pending, device=device)
        nucleus = _top_p_mask(probs[p_idx], top_p[p_idx])
        picked[p_idx] = _inverse_cdf(
            draw[p_idx].masked_fill(~nucleus, 0.0), _uniforms([rows[i] for i in pending], device)
        )
    return picked


def _filter_top_k(x_RV: torch.Tensor, ks: list[int]) -> torch.Tensor:
    V = x_RV.shape[1]
    ks = [k if 0 < k < V else V for k in ks]
    if all(k >= V for k in ks):
        return x_RV
    # Ties at the k-th value are all kept, as in vLLM and HF.
    topv = x_RV.topk(max(ks), dim=-1).values
    kth = topv.gather(1, torch.tensor(ks, device=x_RV.device)[:, None] - 1)
    return x_RV.masked_fill(x_RV < kth, float("-inf"))


def _top_p_mask(probs_RV: torch.Tensor, top_p_R: torch.Tensor) -> torch.Tensor:
    """True for tokens whose strictly-more-probable mass is below top_p (ties at the boundary all kept)."""
    sorted_p, _ = probs_RV.sort(dim=-1, descending=True)
    inside = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p_R[:, None]
    last = inside.sum(dim=-1, keepdim=True).clamp(min=1) - 1
    return probs_RV >= sorted_p.gather(1, last)


def prompt_logprob_entries(logits_TV: torch.Tensor, targets: list[int], k: int) -> list[dict]:
    """Entry t: raw logprob of targets[t] as predicted by logits_TV[t], plus the top k."""
    if not targets:
        return []
    lp_TV = torch.log_softmax(logits_TV[: len(targets)].float(), dim=-1)
    idx = torch.tensor(targets, device=lp_TV.device)
    chosen = lp_TV.gather(1, idx[:, None]).squeeze(1).tolist()
    tops: list[list] = [[] for _ in chosen]
    if k > 0:
        vals, ids = lp_TV.topk(k, dim=-1)
        vals, ids = vals.tolist(), ids.tolist()
        tops = [[[ids[t][j], vals[t][j]] for j in range(k)] for t in range(len(chosen))]
    return [{"logprob": c, "top": tops[t]} for t, c in enumerate(chosen)]
