"""The wire of the token-level training ops (forward_backward, optim_step, save_state, load_state).

Owns: parsing those requests into dataclasses, in one place (`parse_<op>`, as
wire.py names its parsers, so they can move there): every field is required
(the server sends Tinker's documented defaults; the engine has none), per-token
arrays must have the length of the row's tokens, and every error names the row
and field at fault. `check_step_rows` does what needs the loaded base (ids
within its vocabulary, rows within its context).

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
    "gspo": ("clip_low_threshold", "clip_high_threshold"),
}
# Losses that read the sampler's logprobs and advantages beside target_tokens and weights.
RL_LOSSES = ("importance_sampling", "ppo", "cispo", "dro", "gspo")
ADAM_KEYS = ("learning_rate", "beta1", "beta2", "eps", "weight_decay", "grad_clip_norm")


@dataclass
class StepRow:
    """One datum: tokens_T[t] is the model input whose next-token distribution scores target_tokens_T[t]."""
    tokens_T: torch.Tensor  # int64
    target_tokens_T: torch.Tensor  # int64
    weights_T: torch.Tensor  # float32
    sampler_logprobs_T: Optional[torch.Tensor]  # float32; required by the RL losses
    advantages_T: Optional[torch.Tensor]  # float32; required by the RL losses
    sequence_ratio_mask_T: Optional[torch.Tensor] = None  # float32; required by gspo: the tokens of its ratio


@dataclass
class ForwardBackward:
    base: str
    adapter: Optional[str]  # None only for a forward without backward: the base model
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


@dataclass
class OptimStep:
    base: str
    adapter: str
    adam: AdamParams


@dataclass
class SaveState:
    adapter: str
    path: str


@dataclass
class LoadState:
    base: str
    adapter: str
    path: str


def _present(msg: dict, key: str, where: str):
    if key not in msg or msg[key] is None:
        raise ValueError(f"{where}{key} is required")
    return msg[key]


def _string(msg: dict, key: str) -> str:
    v = _present(msg, key, "")
    if not isinstance(v, str) or not v:
        raise ValueError(f"{key} must be a non-empty string")
    return v


def _number(v, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number")
    return float(v)


def _ints(v, name: str) -> List[int]:
    if not isinstance(v, list) or not v or any(isinstance(t, bool) or not isinstance(t, int) for t in v):
        raise ValueError(f"{name} must be a non-empty list of integers")
    return v


def _floats(v, name: str, T: int) -> torch.Tensor:
    if not isinstance(v, list):
        raise ValueError(f"{name} must be a list of numbers")
    if len(v) != T:
        raise ValueError(f"{name} has {len(v)} entries but tokens has {T}")
    return torch.tensor([_number(x, name) for x in v], dtype=torch.float32)


def parse_row(r, i: int, loss: str) -> StepRow:
    where = f"rows[{i}]."
    if not isinstance(r, dict):
        raise ValueError(f"rows[{i}] must be an object")
    tokens = _ints(_present(r, "tokens", where), where + "tokens")
    T = len(tokens)
    targets = _ints(_present(r, "target_tokens", where), where + "target_tokens")
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
    if loss == "gspo":
        row.sequence_ratio_mask_T = _floats(_present(r, "sequence_ratio_mask", where), where + "sequence_ratio_mask", T)
        if not bool((row.sequence_ratio_mask_T != 0).any()):
            raise ValueError(f"{where}sequence_ratio_mask marks no token (the sequence ratio would be a mean of nothing)")
    return row


def _loss_config(msg: dict, loss: str) -> Dict[str, float]:
    cfg = _present(msg, "loss_config", "")
    if not isinstance(cfg, dict):
        raise ValueError("loss_config must be an object")
    wanted = LOSS_CONFIG_KEYS[loss]
    extra = sorted(set(cfg) - set(wanted))
    if extra:
        raise ValueError(f"loss_config keys not used by {loss}: {', '.join(extra)}")
    return {k: _number(_present(cfg, k, "loss_config."), f"loss_config.{k}") for k in wanted}


def parse_forward_backward(msg: dict) -> ForwardBackward:
    loss = _present(msg, "loss", "")
    if loss not in LOSS_CONFIG_KEYS:
        raise ValueError(f"unknown loss {loss!r}; known: {', '.join(LOSS_CONFIG_KEYS)}")
    config = _loss_config(msg, loss)
    backward = _present(msg, "backward", "")
    if not isinstance(backward, bool):
        raise ValueError("backward must be true or false")
    if "adapter" not in msg:
        raise ValueError("adapter is required (null: the base model, forward only)")
    adapter = msg["adapter"]
    if adapter is None and backward:
        raise ValueError("adapter is required when backward is true")
    if adapter is not None and (not isinstance(adapter, str) or not adapter):
        raise ValueError("adapter must be a non-empty string or null")
    rows = _present(msg, "rows", "")
    if not isinstance(rows, list) or not rows:
        raise ValueError("rows must be a non-empty list")
    return ForwardBackward(base=_string(msg, "base"), adapter=adapter, loss=loss, loss_config=config,
                           backward=backward, rows=[parse_row(r, i, loss) for i, r in enumerate(rows)])


def check_step_rows(rows: List[StepRow], vocab: int, max_len: int) -> None:
    """What needs the loaded base: ids within its vocabulary, rows within its context."""
    for i, row in enumerate(rows):
        T = int(row.tokens_T.shape[0])
        if T > max_len:
            raise ValueError(f"rows[{i}] has {T} tokens, more than the context length {max_len}")
        for name, ids_T in (("tokens", row.tokens_T), ("target_tokens", row.target_tokens_T)):
            if bool(((ids_T < 0) | (ids_T >= vocab)).any()):
                raise ValueError(f"rows[{i}].{name} has an id outside the vocabulary (size {vocab})")


def parse_optim_step(msg: dict) -> OptimStep:
    adam = _present(msg, "adam", "")
    if not isinstance(adam, dict):
        raise ValueError("adam must be an object")
    p = AdamParams(**{k: _number(_present(adam, k, "adam."), f"adam.{k}") for k in ADAM_KEYS})
    if p.learning_rate < 0 or p.weight_decay < 0 or p.eps < 0 or p.grad_clip_norm < 0:
        raise ValueError("adam learning_rate, eps, weight_decay and grad_clip_norm must be >= 0")
    if not (0 <= p.beta1 < 1 and 0 <= p.beta2 < 1):
        raise ValueError("adam beta1 and beta2 must lie in [0, 1)")
    return OptimStep(base=_string(msg, "base"), adapter=_string(msg, "adapter"), adam=p)


def parse_save_state(msg: dict) -> SaveState:
    return SaveState(adapter=_string(msg, "adapter"), path=_string(msg, "path"))


def parse_load_state(msg: dict) -> LoadState:
    return LoadState(base=_string(msg, "base"), adapter=_string(msg, "adapter"), path=_string(msg, "path"))
