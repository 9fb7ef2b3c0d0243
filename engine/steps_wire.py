"""The wire of the token-level training ops (forward_backward, optim_step, save_state, load_state).

Owns: parsing those requests into dataclasses, in one place: every field is
required (the server sends Tinker's documented defaults; the engine has none),
per-token arrays must have the length of the row's tokens, token ids must lie
in the vocabulary, and every error names the row and field at fault.

Refuses to know: the numerics (steps.py), adapters and bases (server.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch

# Each loss and the loss_config keys it uses; all are required, any other key is rejected.
LOSS_CONFIG_KEYS: Dict[str, Tuple[str, ...]] = {
    "cross_entropy": (),
    "importance_sampling": (),
    "ppo": ("clip_low_threshold", "clip_high_threshold"),
    "cispo": ("clip_low_threshold", "clip_high_threshold"),
    "dro": ("beta",),
}
# The per-token inputs a loss reads beside target_tokens and weights.
RL_LOSSES = ("importance_sampling", "ppo", "cispo", "dro")
ADAM_KEYS = ("learning_rate", "beta1", "beta2", "eps", "weight_decay", "grad_clip_norm")


@dataclass
class StepRow:
    """One datum: tokens_T[t] is the model input whose next-token distribution scores target_tokens_T[t]."""
    tokens_T: torch.Tensor  # int64
    target_tokens_T: torch.Tensor  # int64
    weights_T: torch.Tensor  # float32
    sampler_logprobs_T: Optional[torch.Tensor]  # float32; required by the RL losses
    advantages_T: Optional[torch.Tensor]  # float32; required by the RL losses


@dataclass
class ForwardBackward:
    loss: str
    loss_config: Dict[str, float]
    backward: bool
    rows: List[StepRow]


@dataclass
class AdamParams:
    learning_rate: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    grad_clip_norm: float  # 0: no clipping


def _present(msg: dict, key: str, where: str):
    if key not in msg or msg[key] is None:
        raise ValueError(f"{where}{key} is required")
    return msg[key]


def _number(v, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number")
    return float(v)


def _ints(v, name: str, vocab: int) -> List[int]:
    if not isinstance(v, list) or not v or any(isinstance(t, bool) or not isinstance(t, int) for t in v):
        raise ValueError(f"{name} must be a non-empty list of integers")
    if any(not 0 <= t < vocab for t in v):
        raise ValueError(f"{name} has an id outside the vocabulary (size {vocab})")
    return v


def _floats(v, name: str, T: int) -> torch.Tensor:
    if not isinstance(v, list):
        raise ValueError(f"{name} must be a list of numbers")
    if len(v) != T:
        raise ValueError(f"{name} has {len(v)} entries but tokens has {T}")
    return torch.tensor([_number(x, name) for x in v], dtype=torch.float32)


def parse_row(r, i: int, loss: str, vocab: int, max_len: int) -> StepRow:
    where = f"rows[{i}]."
    if not isinstance(r, dict):
        raise ValueError(f"rows[{i}] must be an object")
    tokens = _ints(_present(r, "tokens", where), where + "tokens", vocab)
    T = len(tokens)
    if T > max_len:
        raise ValueError(f"rows[{i}] has {T} tokens, more than the context length {max_len}")
    targets = _ints(_present(r, "target_tokens", where), where + "target_tokens", vocab)
    if len(targets) != T:
        raise ValueError(f"{where}target_tokens has {len(targets)} entries but tokens has {T}")
    row = StepRow(tokens_T=torch.tensor(tokens), target_tokens_T=torch.tensor(targets),
                  weights_T=_floats(_present(r, "weights", where), where + "weights", T),
                  sampler_logprobs_T=None, advantages_T=None)
    rl = loss in RL_LOSSES
    for key, attr in (("logprobs", "sampler_logprobs_T"), ("advantages", "advantages_T")):
        v = _present(r, key, where) if rl else r.get(key)
        if v is not None:
            setattr(row, attr, _floats(v, where + key, T))
    return row


def parse_forward_backward(msg: dict, vocab: int, max_len: int) -> ForwardBackward:
    loss = _present(msg, "loss", "")
    if loss not in LOSS_CONFIG_KEYS:
        raise ValueError(f"unknown loss {loss!r}; known: {', '.join(LOSS_CONFIG_KEYS)}")
    cfg = _present(msg, "loss_config", "")
    if not isinstance(cfg, dict):
        raise ValueError("loss_config must be an object")
    wanted = LOSS_CONFIG_KEYS[loss]
    extra = sorted(set(cfg) - set(wanted))
    if extra:
        raise ValueError(f"loss_config keys not used by {loss}: {', '.join(extra)}")
    config = {k: _number(_present(cfg, k, "loss_config."), f"loss_config.{k}") for k in wanted}
    backward = _present(msg, "backward", "")
    if not isinstance(backward, bool):
        raise ValueError("backward must be true or false")
    rows = _present(msg, "rows", "")
    if not isinstance(rows, list) or not rows:
        raise ValueError("rows must be a non-empty list")
    return ForwardBackward(loss=loss, loss_config=config, backward=backward,
                           rows=[parse_row(r, i, loss, vocab, max_len) for i, r in enumerate(rows)])


def parse_adam(msg: dict) -> AdamParams:
    adam = _present(msg, "adam", "")
    if not isinstance(adam, dict):
        raise ValueError("adam must be an object")
    p = AdamParams(**{k: _number(_present(adam, k, "adam."), f"adam.{k}") for k in ADAM_KEYS})
    if p.learning_rate < 0 or p.weight_decay < 0 or p.eps < 0 or p.grad_clip_norm < 0:
        raise ValueError("adam learning_rate, eps, weight_decay and grad_clip_norm must be >= 0")
    if not (0 <= p.beta1 < 1 and 0 <= p.beta2 < 1):
        raise ValueError("adam beta1 and beta2 must lie in [0, 1)")
    return p


def parse_path(msg: dict) -> str:
    path = _present(msg, "path", "")
    if not isinstance(path, str) or not path:
        raise ValueError("path must be a non-empty string (a folder)")
    return path
