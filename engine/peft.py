"""PEFT adapter folders read against a base model: the one check of an adapter on disk, and its loading.

Owns: what a LoRA adapter folder (`adapter_config.json`, `adapter_model.safetensors`)
must be for this engine to run it on a base: a LORA config with a positive
integer rank, a numeric alpha and target modules the base has, none of the
features it does not implement (DoRA, per-module patterns, modules to save,
layer subsets, fused expert parameters); every tensor a lora_A/lora_B of a
projection of the base's target table (lora.py's LoraTarget, which each model
implementation lists) among those targets, with the shapes the base and rank
imply, in F32, F16 or BF16, each with its twin, a mixture's experts one pair per
expert (`….mlp.experts.{e}.gate_proj`, every expert present, stacked when loaded);
and values finite and within bounds.json's bound. `problems`
lists every problem found, each with where it is (the file, then the field or
tensor) and what is wrong, as the server's 422 shows them (the `check_adapter`
op: an upload or a fork is checked here, before the model exists); `load_peft`
loads a folder that has none (and refuses one that has, with the first).

Refuses to know: requests and replies (server.py), LoRA math and residency
(lora.py), how the server stages an upload.
"""

from __future__ import annotations

import json
import math
import os
import re

import torch

from . import weights as W
from .lora import (
    CONFIG_NAME,
    MAX_ABS_WEIGHT,
    OPTIMIZER_NAME,
    WEIGHTS_NAME,
    Adapter,
    LoraConfig,
    LoraTarget,
    NonFinite,
    first_bad_value,
    load_optimizer_state,
    target_kinds,
    target_table,
)

TENSOR_NAME = re.compile(r"^base_model\.model\.(.+)\.lora_([AB])(?:\.default)?\.weight$")
EXPERT_PATH = re.compile(r"^(.+\.experts)\.(\d+)\.(\w+)$")
LAYER = re.compile(r"\.layers\.(\d+)\.")
FILE_DTYPES = ("F32", "F16", "BF16")
UNSUPPORTED = (
    "use_dora",
    "rank_pattern",
    "alpha_pattern",
    "modules_to_save",
    "layers_to_transform",
    "target_parameters",  # transformers 5's fused expert tensors: this engine reads experts one by one
)


class Problem:
    """One thing wrong with an adapter folder: where (the file, then a field or tensor), what, and whether it is
    a value out of bounds (NonFinite at load) rather than a folder the engine cannot run."""

    def __init__(self, loc: list[str], msg: str, value: bool = False):
        self.loc, self.msg, self.value = loc, msg, value

    def to_json(self) -> dict:
        return {"loc": self.loc, "msg": self.msg}

    def __str__(self) -> str:
        return f"{' '.join(self.loc)}: {self.msg}"


def problems(folder: str, targets, check_values: bool = True) -> list[Problem]:
    """Every problem of the adapter in `folder` for a base with this target table (or our ModelArgs; none: it loads)."""
    return _read(folder, _paths(targets), check_values)[1]


def load_peft(
    key: str, base: str, folder: str, targets, device, check_values: bool = True, moments: bool = True
) -> Adapter:
    """The PEFT adapter in `folder` for a base with this target table (or our ModelArgs); a folder with a problem is
    refused (NonFinite for values out of bounds, which only check_values off skips; ValueError otherwise), naming the
    first. No folder: FileNotFoundError. `moments`: with the AdamW moments saved beside it (an engine that never
    trains leaves them on disk)."""
    if not os.path.isfile(os.path.join(folder, CONFIG_NAME)):
        raise FileNotFoundError(f"{folder}: there is no adapter folder here (no {CONFIG_NAME})")
    table = _paths(targets)
    (config, tensors), found = _read(folder, table, check_values)
    if found:
        raise (NonFinite if all(p.value for p in found) else ValueError)(f"{folder}: {found[0]}")
    stacked = _stacked(tensors, table)
    A = {path: t.float().to(device).requires_grad_(True) for (path, ab), t in stacked.items() if ab == "A"}
    B = {path: t.float().to(device).requires_grad_(True) for (path, ab), t in stacked.items() if ab == "B"}
    lora = LoraConfig(
        rank=int(config["r"]),
        alpha=float(config["lora_alpha"]),
        target_modules=tuple(sorted({table[p].name for p in A})),
        seed=0,  # unused: the weights come from the file, no init runs
        use_rslora=bool(config.get("use_rslora", False)),
    )
    adapter = Adapter(key=key, base=base, config=lora, A=A, B=B)
    opt_path = os.path.join(folder, OPTIMIZER_NAME)
    if moments and os.path.exists(opt_path):
        load_optimizer_state(adapter, opt_path, device)
    return adapter


def _paths(targets) -> dict[str, LoraTarget]:
    return {t.path: t for t in target_table(targets)}


def _where(path: str, table: dict[str, LoraTarget]) -> tuple[LoraTarget | None, int | None]:
    """The target a tensor's module path adapts, and the expert's index for a mixture's (None otherwise)."""
    e = EXPERT_PATH.match(path)
    if e and f"{e.group(1)}.{e.group(3)}" in table and table[f"{e.group(1)}.{e.group(3)}"].experts:
        return table[f"{e.group(1)}.{e.group(3)}"], int(e.group(2))
    target = table.get(path)
    return (target, None) if target is not None and not target.experts else (None, None)


def _stacked(tensors: dict, table: dict) -> dict:
    """{(module path, ab): tensor} with each mixture's experts stacked under their target's path ([experts, ...])."""
    out, experts = {}, {}
    for (path, ab), t in tensors.items():
        target, expert = _where(path, table)
        if expert is None:
            out[(path, ab)] = t
        else:
            experts.setdefault((target.path, ab), {})[expert] = t
    for key, per in experts.items():
        out[key] = torch.stack([per[i] for i in range(len(per))])
    return out


def _read(folder: str, table: dict, check_values: bool) -> tuple[tuple[dict, dict], list[Problem]]:
    """((config, {(module path, "A"|"B"): tensor}), problems): what loads, and what is wrong; each stage runs only
    when the one before found nothing (tensors are not read against a config that is wrong)."""
    config, found = _config(os.path.join(folder, CONFIG_NAME), table)
    if found:
        return (config, {}), found
    weights = os.path.join(folder, WEIGHTS_NAME)
    try:
        header, _, data_start = W.read_header(weights)
        size = os.path.getsize(weights)
    except (OSError, ValueError) as e:
        return (config, {}), [Problem([WEIGHTS_NAME], str(e).removeprefix(f"{weights}: "))]
    found = _tensors(header, config, table, size - data_start)
    if found:
        return (config, {}), found
    tensors = {}
    for name, t in W.iter_file(weights):
        m = TENSOR_NAME.match(name)
        tensors[(m.group(1), m.group(2))] = t
        bad = first_bad_value(t) if check_values else None
        if bad is not None:
            value, index = bad
            msg = f"value {_js(value)} at index {_list(index)}: adapter values must be finite and within ±{MAX_ABS_WEIGHT:g}"
            found.append(Problem([WEIGHTS_NAME, name], msg, value=True))
    return (config, tensors), found


def _config(path: str, table: dict) -> tuple[dict, list[Problem]]:
    at = lambda key: [CONFIG_NAME, key]  # noqa: E731
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        return {}, [Problem([CONFIG_NAME], f"cannot be read as JSON: {e}")]
    if not isinstance(config, dict):
        return {}, [Problem([CONFIG_NAME], "not a JSON object")]
    found = []
    if config.get("peft_type", "LORA") != "LORA":
        found.append(Problem(at("peft_type"), f"{json.dumps(config.get('peft_type'))} is not LORA"))
    rank = config.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        found.append(Problem(at("r"), "the rank must be a positive integer"))
    alpha = config.get("lora_alpha")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha):
        found.append(Problem(at("lora_alpha"), "must be a number"))
    targets = config.get("target_modules")
    if not isinstance(targets, list) or not targets:
        found.append(Problem(at("target_modules"), "must be a non-empty list of module names"))
    else:
        offered = target_kinds(list(table.values()))
        for name in targets:
            if name not in offered:
                supported = ", ".join(offered)
                found.append(
                    Problem(at("target_modules"), f"{json.dumps(name)} is not supported; supported: {supported}")
                )
    for key in UNSUPPORTED:
        if config.get(key):
            found.append(Problem(at(key), "is not supported by this engine"))
    return config, found


def _tensors(header: dict, config: dict, table: dict, data_bytes: int) -> list[Problem]:
    """The safetensors header against the base's target table and the config's rank and targets."""
    found, seen = [], set()
    rank, targets = config["r"], config["target_modules"]
    experts: dict[tuple[str, str], set[int]] = {}
    for name, entry in header.items():
        at = [WEIGHTS_NAME, name]
        m = TENSOR_NAME.match(name)
        if not m:
            found.append(Problem(at, "not a LoRA tensor of a decoder layer projection"))
            continue
        path, ab = m.group(1), m.group(2)
        module = path.rsplit(".", 1)[-1]
        target, expert = _where(path, table)
        if module not in targets:
            found.append(Problem(at, f"module {module} is not among target_modules"))
        elif target is None:
            found.append(Problem(at, f"{path} is not a projection this base model has"))
        else:
            if expert is not None and expert >= target.experts:
                found.append(Problem(at, f"expert {expert}: the base model has {target.experts} experts there"))
            expected = [rank, target.fan_in] if ab == "A" else [target.fan_out, rank]
            if entry.get("shape") != expected:
                msg = f"shape {_list(entry.get('shape'))}; the base model and rank {rank} need {_list(expected)}"
                found.append(Problem(at, msg))
            if expert is not None:
                experts.setdefault((target.path, ab), set()).add(expert)
        found.extend(_layout(at, entry, data_bytes))
        seen.add((path, ab))
    found += _unpaired(seen) + _missing_experts(experts, table)
    if not seen:
        found.append(Problem([WEIGHTS_NAME], "holds no LoRA tensors"))
    return found


def _unpaired(seen: set) -> list[Problem]:
    found = []
    for path, ab in sorted(seen):
        twin = "B" if ab == "A" else "A"
        if (path, twin) not in seen:
            layer = LAYER.search(f".{path}.")
            where = f"layer {layer.group(1)} {path.rsplit('.', 1)[-1]}" if layer and "experts" not in path else path
            found.append(Problem([WEIGHTS_NAME], f"{where} has lora_{ab} without its lora_{twin}"))
    return found


def _missing_experts(experts: dict, table: dict) -> list[Problem]:
    found = []
    for (path, ab), present in sorted(experts.items()):
        missing = [e for e in range(table[path].experts) if e not in present]
        if missing:
            found.append(Problem([WEIGHTS_NAME], f"{path} lacks lora_{ab} of experts {missing[:8]}"))
    return found


def _layout(at: list[str], entry: dict, data_bytes: int) -> list[Problem]:
    """A tensor's dtype and where its bytes are: inside the file, as many as its shape needs."""
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in FILE_DTYPES:
        return [Problem(at, f"dtype {dtype} (expected F32, F16 or BF16)")]
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
        return [Problem(at, "data offsets outside the file")]
    start, end = offsets
    if not 0 <= start <= end <= data_bytes:
        return [Problem(at, "data offsets outside the file")]
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        return [Problem(at, f"shape {_list(shape)} is not a list of sizes")]
    needed = math.prod(shape) * W.ITEMSIZE[dtype]
    if end - start != needed:
        return [Problem(at, f"data of {end - start} bytes, but shape {_list(shape)} of {dtype} needs {needed}")]
    return []


def _list(values) -> str:
    return json.dumps(values, separators=(",", ":"))


def _js(value: float) -> str:
    """A number as the server's JSON world writes it (NaN, Infinity, 65505, 9.999999680285692e+37)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    return re.sub(r"e([+-])0*(\d)", r"e\1\2", repr(value))
