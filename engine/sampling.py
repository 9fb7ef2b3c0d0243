"""Per-request sampling: parameters, per-sequence state, and one batched sampling step.

Owns: SamplingParams (validated from a request dict), the per-sequence state
(seeded generator, generated ids, penalty counts), and `sample_step`, which
turns a batch of next-token logits into tokens + raw logprobs. Processing
order follows vLLM: bans (allowed ids, bad words, min_tokens) and logit_bias,
then repetition/frequency/presence penalties, then a constraint's mask, then
temperature, top-k, top-p, min-p. Reported logprobs are always the raw
log-softmax of the model's logits, before any of that, so they equal what the
trainer computes.

Refuses to know: the model, the KV cache, scheduling, when a sequence stops
(generate.py decides that from the returned token).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch

GREEDY_BELOW = 1e-5  # temperatures this small sample the argmax, as vLLM does


def _int(d: dict, key: str, default, lo: Optional[int] = None, hi: Optional[int] = None):
    v = d.get(key)
    if v is None:  # null means the default, everywhere in the protocol
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{key} must be an integer")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{key}={v} is out of range [{lo}, {hi}]")
    return v


def _num(d: dict, key: str, default: float, lo: float, hi: float, lo_open=False) -> float:
    v = d.get(key, default)
    if v is None:
        v = default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{key} must be a number")
    v = float(v)
    if not (v > lo if lo_open else v >= lo) or v > hi:
        raise ValueError(f"{key}={v} is out of range")
    return v


def _ids(v, key: str, vocab: int) -> List[int]:
    if not isinstance(v, list) or any(isinstance(t, bool) or not isinstance(t, int) for t in v):
        raise ValueError(f"{key} must be a list of integers")
    for t in v:
        if not 0 <= t < vocab:
            raise ValueError(f"{key}: token id {t} is outside the vocabulary (size {vocab})")
    return list(v)


@dataclass
class SamplingParams:
    max_tokens: Optional[int] = None  # None: until the context is full
    min_tokens: int = 0
    ignore_eos: bool = False
    stop_token_ids: Tuple[int, ...] = ()
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: Dict[int, float] = field(default_factory=dict)
    allowed_token_ids: Optional[List[int]] = None
    bad_words_ids: List[List[int]] = field(default_factory=list)
    seed: Optional[int] = None
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    n: int = 1

    @classmethod
    def from_request(cls, d: dict, vocab_size: int) -> "SamplingParams":
        logit_bias = d.get("logit_bias") or {}
        if not isinstance(logit_bias, dict):
            raise ValueError("logit_bias must be an object of token id -> number")
        bias: Dict[int, float] = {}
        for k, v in logit_bias.items():
            try:
                tid = int(k)
            except (TypeError, ValueError):
                raise ValueError(f"logit_bias key {k!r} is not a token id") from None
            if not 0 <= tid < vocab_size:
                raise ValueError(f"logit_bias: token id {tid} is outside the vocabulary")
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError("logit_bias values must be numbers")
            bias[tid] = float(v)
        allowed = d.get("allowed_token_ids")
        if allowed is not None:
            allowed = _ids(allowed, "allowed_token_ids", vocab_size)
            if not allowed:
                raise ValueError("allowed_token_ids is empty")
        bad = d.get("bad_words_ids") or []
        if not isinstance(bad, list):
            raise ValueError("bad_words_ids must be a list of token id lists")
        bad = [_ids(w, "bad_words_ids", vocab_size) for w in bad]
        if any(not w for w in bad):
            raise ValueError("bad_words_ids contains an empty sequence")
        top_k = _int(d, "top_k", -1, lo=-1)
        p = cls(
            max_tokens=_int(d, "max_tokens", None, lo=1),
            min_tokens=_int(d, "min_tokens", 0, lo=0),
            ignore_eos=bool(d.get("ignore_eos") or False),
            stop_token_ids=tuple(_ids(d.get("stop_token_ids") or [], "stop_token_ids", vocab_size)),
            temperature=_num(d, "temperature", 1.0, 0.0, 1e6),
            top_p=_num(d, "top_p", 1.0, 0.0, 1.0, lo_open=True),
            top_k=-1 if top_k in (0, -1) else top_k,
            min_p=_num(d, "min_p", 0.0, 0.0, 1.0),
            presence_penalty=_num(d, "presence_penalty", 0.0, -2.0, 2.0),
            frequency_penalty=_num(d, "frequency_penalty", 0.0, -2.0, 2.0),
            repetition_penalty=_num(d, "repetition_penalty", 1.0, 0.0, 1e6, lo_open=True),
            logit_bias=bias,
            allowed_token_ids=allowed,
            bad_words_ids=bad,
            seed=_int(d, "seed", None),
            logprobs=_int(d, "logprobs", None, lo=0, hi=vocab_size),
            prompt_logprobs=_int(d, "prompt_logprobs", None, lo=0, hi=vocab_size),
            n=_int(d, "n", 1, lo=1, hi=1024),
        )
        if p.max_tokens is not None and p.min_tokens > p.max_tokens:
            raise ValueError("min_tokens exceeds max_tokens")
        return p

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @property
    def penalized(self) -> bool:
        return self.presence_penalty != 0 or self.frequency_penalty != 0 or self.repetition_penalty != 1


def static_bias(params: SamplingParams, vocab: int, device) -> Optional[torch.Tensor]:
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

    def __init__(self, params: SamplingParams, prompt: Sequence[int], index: int, vocab: int,
                 bias_V: Optional[torch.Tensor], prompt_mask_V: Optional[torch.Tensor], device):
        self.params = params
        seed = new_seed() if params.seed is None else (params.seed * 1_000_003 + index) % (1 << 63)
        # CPU generators: the same seed gives the same tokens on any device and in any batch.
        self.generator = torch.Generator().manual_seed(seed)
        self.output: List[int] = []
        self.bias_V = bias_V
        self.prompt_mask_V = prompt_mask_V
        self.counts_V = torch.zeros(vocab, device=device) if params.penalized else None

    def append(self, token: int) -> None:
        self.output.append(token)
        if self.counts_V is not None:
            self.counts_V[token] += 1


def prompt_mask(params: SamplingParams, prompt: Sequence[int], vocab: int, device) -> Optional[torch.Tensor]:
    if params.repetition_penalty == 1:
        return None
    mask_V = torch.zeros(vocab, dtype=torch.bool)
    if len(prompt):
        mask_V[torch.tensor(list(prompt), dtype=torch.long)] = True
    return mask_V.to(device)


@dataclass
class SampleResult:
    tokens: List[int]
    logprobs: List[float]
    top: List[Optional[List[List]]]  # per row: [[id, logprob], ...] or None


def sample_step(logits_BV: torch.Tensor, rows: Sequence[SeqSampler], eos_ids: Sequence[int],
                allowed: Optional[Sequence[Optional[torch.Tensor]]] = None) -> SampleResult:
    """Sample one token per row; row b's state is rows[b]. allowed[b], when given, is a bool [V]
    mask (a constraint's): the row samples only among those tokens, whatever its other settings."""
    B, V = logits_BV.shape
    device = logits_BV.device
    logits_BV = logits_BV.float()
    raw_BV = torch.log_softmax(logits_BV, dim=-1)
    x = logits_BV.clone()

    bias_rows = [b for b, r in enumerate(rows) if r.bias_V is not None]
    banned_any = bool(bias_rows)
    if bias_rows:
        idx = torch.tensor(bias_rows, device=device)
        x[idx] += torch.stack([rows[b].bias_V for b in bias_rows])
    for b, r in enumerate(rows):
        p = r.params
        if len(r.output) < p.min_tokens:
            banned = list(p.stop_token_ids) + ([] if p.ignore_eos else list(eos_ids))
            if banned:
                x[b, banned] = float("-inf")
                banned_any = True
        for word in p.bad_words_ids:
            if len(word) > 1 and len(r.output) >= len(word) - 1 and r.output[len(r.output) - len(word) + 1:] == word[:-1]:
                x[b, word[-1]] = float("-inf")
                banned_any = True

    pen_rows = [b for b, r in enumerate(rows) if r.counts_V is not None]
    if pen_rows:
        idx = torch.tensor(pen_rows, device=device)
        counts = torch.stack([rows[b].counts_V for b in pen_rows])
        xs = x[idx]
        rep = torch.tensor([rows[b].params.repetition_penalty for b in pen_rows], device=device)[:, None]
        seen = counts > 0
        prompt_rows = [rows[b].prompt_mask_V for b in pen_rows]
        if any(m is not None for m in prompt_rows):
            seen = seen | torch.stack([m if m is not None else torch.zeros(V, dtype=torch.bool, device=device)
                                       for m in prompt_rows])
        # Repetition penalty (CTRL / HF / vLLM): shrink positive logits, push negative ones further down.
        xs = torch.where(seen, torch.where(xs > 0, xs / rep, xs * rep), xs)
        freq = torch.tensor([rows[b].params.frequency_penalty for b in pen_rows], device=device)[:, None]
        pres = torch.tensor([rows[b].params.presence_penalty for b in pen_rows], device=device)[:, None]
        xs = xs - freq * counts - pres * (counts > 0).float()
        x[idx] = xs
    if banned_any:
        # A row whose every token got banned samples from its raw logits rather than from NaNs.
        dead = torch.isneginf(x).all(dim=-1)
        if bool(dead.any()):
            x[dead] = logits_BV[dead]
    constrained = [] if allowed is None else [b for b, m in enumerate(allowed) if m is not None]
    if constrained:
        idx = torch.tensor(constrained, device=device)
        keep = torch.stack([allowed[b] for b in constrained])
        xs = x[idx].masked_fill(~keep, float("-inf"))
        # Bans that leave nothing the constraint allows yield to it: the output must stay inside.
        dead = torch.isneginf(xs).all(dim=-1)
        if bool(dead.any()):
            xs[dead] = logits_BV[idx][dead].masked_fill(~keep[dead], float("-inf"))
        x[idx] = xs

    tokens = torch.empty(B, dtype=torch.long, device=device)
    greedy = [b for b, r in enumerate(rows) if r.params.greedy]
    rand = [b for b, r in enumerate(rows) if not r.params.greedy]
    if greedy:
        g_idx = torch.tensor(greedy, device=device)
        tokens[g_idx] = x[g_idx].argmax(dim=-1)
    if len(rand) == B:
        tokens = _sample_rows(x, rows)
    elif rand:
        r_idx = torch.tensor(rand, device=device)
        tokens[r_idx] = _sample_rows(x[r_idx], [rows[b] for b in rand])
    chosen_lp = raw_BV.gather(1, tokens[:, None]).squeeze(1)
    tops: List[Optional[List[List]]] = [None] * B
    ks = [r.params.logprobs or 0 for r in rows]
    kmax = max(ks)
    if kmax > 0:
        vals, ids = raw_BV.topk(kmax, dim=-1)
        vals, ids = vals.tolist(), ids.tolist()
        for b, k in enumerate(ks):
            if k:
                tops[b] = [[ids[b][j], vals[b][j]] for j in range(k)]
    return SampleResult(tokens=tokens.tolist(), logprobs=chosen_lp.tolist(), top=tops)


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
        pending = [i for i, ok in zip(pending, accepted) if not ok]
        if pending:
            p_idx = torch.tensor(pending, device=device)
            picked[p_idx] = _inverse_cdf(draw[p_idx], _uniforms([rows[i] for i in pending], device))
    if pending:
        p_idx = torch.tensor(pending, device=device)
        nucleus = _top_p_mask(probs[p_idx], top_p[p_idx])
        picked[p_idx] = _inverse_cdf(draw[p_idx].masked_fill(~nucleus, 0.0),
                                     _uniforms([rows[i] for i in pending], device))
    return picked


def _filter_top_k(x_RV: torch.Tensor, ks: List[int]) -> torch.Tensor:
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


def prompt_logprob_entries(logits_TV: torch.Tensor, targets: List[int], k: int) -> List[dict]:
    """Entry t: raw logprob of targets[t] as predicted by logits_TV[t], plus the top k."""
    if not targets:
        return []
    lp_TV = torch.log_softmax(logits_TV[:len(targets)].float(), dim=-1)
    idx = torch.tensor(targets, device=lp_TV.device)
    chosen = lp_TV.gather(1, idx[:, None]).squeeze(1).tolist()
    tops: List[list] = [[] for _ in chosen]
    if k > 0:
        vals, ids = lp_TV.topk(k, dim=-1)
        vals, ids = vals.tolist(), ids.tolist()
        tops = [[[ids[t][j], vals[t][j]] for j in range(k)] for t in range(len(chosen))]
    return [{"logprob": c, "top": tops[t]} for t, c in enumerate(chosen)]
