"""Which implementation runs a base: ours (model.py) for the families we implement, else transformers' own modeling
code (hf_model.py), sharded with FSDP2 in a trainer; and what this engine announces it can run.

Refuses to know: the engine's registry of loaded bases (server.py) and the numerics of either implementation.
"""

from __future__ import annotations

import json
import os

import torch

from . import hf_model, shard, wire
from . import lora as L
from .group import SOLO, Group
from .model import ARCHITECTURES, ROPE_TYPES, ModelArgs, Transformer, load_args, rope_type


def ours_problem(cfg: dict) -> str | None:
    """Why our own implementation (model.py) cannot run a config.json, or None when it can."""
    if cfg.get("model_type") not in ARCHITECTURES:
        return f"model_type {cfg.get('model_type')!r} is not one of ours"
    try:
        ModelArgs.from_hf_config(cfg)
    except ValueError as e:
        return str(e)
    return None if rope_type(cfg) in ROPE_TYPES else f"rope type {rope_type(cfg)!r} is not one of ours"


def _config(path: str) -> dict:
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        return json.load(f)


def lora_targets(path: str) -> list[L.LoraTarget]:
    """The LoRA target table of the base in `path` as the implementation load_model picks would list it, unloaded."""
    return L.dense_targets(load_args(path)) if ours_problem(_config(path)) is None else hf_model.folder_targets(path)


def load_model(path: str, dtype: torch.dtype, device, group: Group = SOLO) -> Transformer | hf_model.HFModel:
    """Ours where we have the family (fast, and the numeric reference), otherwise transformers' own modeling code;
    neither: a ValueError naming why each refused. A trainer's is sharded with FSDP2 (ours straight from the files,
    each rank reading its rows; transformers' loaded whole, then sharded by its blocks)."""
    cfg = _config(path)
    ours = ours_problem(cfg)
    if ours is None:
        return (
            shard.load_sharded(path, dtype, device, group)
            if group.sharded
            else Transformer.from_pretrained(path, dtype, device)
        )
    theirs = hf_model.load_problem(cfg)
    if theirs is None:
        model = hf_model.HFModel.from_pretrained(path, dtype, device)
        return shard.shard_model(model, group) if group.sharded else model
    raise ValueError(f"{path}: no implementation can load it: ours: {ours}; transformers: {theirs}")


def supports() -> dict:
    """What this engine can run, announced in its ready frame so the server validates against it (no copies): our
    implementation's tables at the top level, and `transformers` (what the pinned transformers loads; absent without
    it), which serves every base ours cannot."""
    announced = {
        "model_types": list(ARCHITECTURES),
        "architectures": list(ARCHITECTURES.values()),
        "rope_types": list(ROPE_TYPES),
        "lora_targets": list(L.SUPPORTED_TARGETS),
        "losses": {"train_step": list(wire.LOSSES), "forward_backward": list(wire.STEP_LOSSES)},
        "dtypes": list(wire.DTYPES),
    }
    theirs = hf_model.available()
    if theirs is not None:
        announced["transformers"] = theirs
    return announced
