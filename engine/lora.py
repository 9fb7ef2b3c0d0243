"""LoRA adapters: their parameters, the PEFT file layout, residency, and batched application.

Owns: LoraConfig (rank, alpha, targets, seed), the torchtune-style init (A
uniform from a seeded generator, B zero, so a fresh adapter is an exact no-op;
scale alpha/rank), PEFT names (`base_model.model.<module>.lora_A.weight`) and
`adapter_config.json`, optimizer state saved beside (`optimizer.pt`), the LRU
bound on resident adapters with pinning, and LoraBatch: the object a forward
calls to add every row's own adapter delta in one batched computation.

Refuses to know: requests, sampling, losses, the wire protocol. It knows only
the base model's module shapes (from ModelArgs).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from . import weights as W
from .model import ATTN_MODULES, MLP_MODULES, ModelArgs

SUPPORTED_TARGETS: Tuple[str, ...] = ATTN_MODULES + MLP_MODULES
CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
OPTIMIZER_NAME = "optimizer.pt"
_UIDS = itertools.count()
_PEFT_KEY = re.compile(r"^base_model\.model\.(model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+))\.lora_([AB])(?:\.default)?\.weight$")


def module_shape(args: ModelArgs, name: str) -> Tuple[int, int]:
    """(in_features, out_features) of a base projection by its short name."""
    shapes = {
        "q_proj": (args.hidden_size, args.q_size),
        "k_proj": (args.hidden_size, args.kv_size),
        "v_proj": (args.hidden_size, args.kv_size),
        "o_proj": (args.q_size, args.hidden_size),
        "gate_proj": (args.hidden_size, args.intermediate_size),
        "up_proj": (args.hidden_size, args.intermediate_size),
        "down_proj": (args.intermediate_size, args.hidden_size),
    }
    if name not in shapes:
        raise ValueError(f"unsupported LoRA target module {name!r}; supported: {', '.join(SUPPORTED_TARGETS)}")
    return shapes[name]


def module_path(layer: int, name: str) -> str:
    parent = "self_attn" if name in ATTN_MODULES else "mlp"
    return f"model.layers.{layer}.{parent}.{name}"


@dataclass
class LoraConfig:
    """An adapter's shape and init: the server's choice for a new one (wire.py), the file's for a loaded one."""
    rank: int
    alpha: float
    target_modules: Tuple[str, ...]
    seed: int
    use_rslora: bool = False  # only PEFT files set it: adapters the server creates never use rsLoRA

    def __post_init__(self):
        if int(self.rank) < 1:
            raise ValueError("LoRA rank must be >= 1")
        self.target_modules = tuple(self.target_modules)
        if not self.target_modules:
            raise ValueError("LoRA target_modules is empty")
        for name in self.target_modules:
            if name not in SUPPORTED_TARGETS:
                raise ValueError(f"unsupported LoRA target module {name!r}; supported: {', '.join(SUPPORTED_TARGETS)}")

    @property
    def scale(self) -> float:
        return self.alpha / (math.sqrt(self.rank) if self.use_rslora else self.rank)

    def to_peft(self, base_name: str) -> dict:
        # The fields PEFT's LoraConfig and vLLM's LoRA loader read.
        return {
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_name,
            "r": self.rank, "lora_alpha": self.alpha, "target_modules": sorted(self.target_modules),
            "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "inference_mode": True,
            "init_lora_weights": True, "use_rslora": self.use_rslora, "use_dora": False,
            "modules_to_save": None, "layers_to_transform": None, "layers_pattern": None,
            "rank_pattern": {}, "alpha_pattern": {}, "revision": None,
        }


@dataclass
class Adapter:
    key: str
    base: str
    config: LoraConfig
    A: Dict[str, torch.Tensor]  # module path -> [rank, in]
    B: Dict[str, torch.Tensor]  # module path -> [out, rank]
    optimizer: Optional[torch.optim.Optimizer] = None
    version: int = 0  # bumped by every optimizer step; StackCache keys on (uid, version)
    pins: int = field(default=0, repr=False)
    uid: int = field(default_factory=lambda: next(_UIDS), repr=False)

    def names(self) -> List[str]:
        """Parameter names in a fixed order: the order of optimizer state too."""
        return [f"{m}.lora_{ab}" for m in sorted(self.A) for ab in "AB"]

    def parameters(self) -> List[torch.Tensor]:
        return [t for m in sorted(self.A) for t in (self.A[m], self.B[m])]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.parameters())


def new_adapter(key: str, base: str, args: ModelArgs, config: LoraConfig, device) -> Adapter:
    """A fresh adapter: A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming-uniform, a=sqrt(5), as nn.Linear), B = 0."""
    g = torch.Generator().manual_seed(int(config.seed))
    A, B = {}, {}
    for layer in range(args.num_layers):
        for name in SUPPORTED_TARGETS:  # fixed order keeps the seed -> weights map stable
            if name not in config.target_modules:
                continue
            fan_in, fan_out = module_shape(args, name)
            bound = 1.0 / math.sqrt(fan_in)
            a = (torch.rand(config.rank, fan_in, generator=g) * 2 - 1) * bound
            path = module_path(layer, name)
            A[path] = a.to(device).requires_grad_(True)
            B[path] = torch.zeros(fan_out, config.rank, device=device).requires_grad_(True)
    return Adapter(key=key, base=base, config=config, A=A, B=B)


def save_peft(adapter: Adapter, folder: str, base_name: str) -> List[str]:
    os.makedirs(folder, exist_ok=True)
    tensors = {}
    for m in sorted(adapter.A):
        tensors[f"base_model.model.{m}.lora_A.weight"] = adapter.A[m].detach().float().cpu()
        tensors[f"base_model.model.{m}.lora_B.weight"] = adapter.B[m].detach().float().cpu()
    W.save_file(tensors, os.path.join(folder, WEIGHTS_NAME), {"format": "pt"})
    W.atomic_write_json(os.path.join(folder, CONFIG_NAME), adapter.config.to_peft(base_name))
    files = [CONFIG_NAME, WEIGHTS_NAME]
    if adapter.optimizer is not None:
        W.atomic_torch_save(os.path.join(folder, OPTIMIZER_NAME), optimizer_state(adapter))
        files.append(OPTIMIZER_NAME)
    return files


OPTIMIZER_FORMAT = "engine.adamw.v1"


def optimizer_state(adapter: Adapter) -> dict:
    """AdamW moments and step per parameter name, tensors only.

    Tensors, strings and dicts only, so `torch.load(weights_only=True)` reads
    it on every torch (1.13's safe unpickler has no floats); learning rate and
    betas are not state: every train_step sets them.
    """
    state = {}
    for name, p in zip(adapter.names(), adapter.parameters()):
        st = adapter.optimizer.state.get(p)
        if st:
            state[name] = {k: (v if torch.is_tensor(v) else torch.tensor(float(v))).detach().cpu() for k, v in st.items()}
    return {"format": OPTIMIZER_FORMAT, "state": state}


def load_optimizer_state(adapter: Adapter, path: str, device) -> None:
    try:  # a checkpoint folder must not be able to run code
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:  # torch without weights_only
        saved = torch.load(path, map_location="cpu")
    if not isinstance(saved, dict) or saved.get("format") != OPTIMIZER_FORMAT:
        raise ValueError(f"{path}: not an optimizer state this engine wrote")
    names = dict(zip(adapter.names(), adapter.parameters()))
    unknown = sorted(set(saved["state"]) - set(names))
    if unknown:
        raise ValueError(f"{path}: state for parameters the adapter lacks: {unknown[:4]}")
    adapter.optimizer = make_optimizer(adapter)
    for name, st in saved["state"].items():
        # AdamW keeps `step` on the CPU unless capturable; the moments live with the parameter.
        adapter.optimizer.state[names[name]] = {k: v if k == "step" else v.to(device) for k, v in st.items()}


def load_peft(key: str, base: str, folder: str, args: ModelArgs, device) -> Adapter:
    with open(os.path.join(folder, CONFIG_NAME), "r", encoding="utf-8") as f:
        peft = json.load(f)
    if peft.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"{folder}: peft_type {peft.get('peft_type')!r} is not LORA")
    if peft.get("use_dora") or peft.get("rank_pattern") or peft.get("alpha_pattern"):
        raise ValueError(f"{folder}: DoRA and per-module rank/alpha patterns are not supported")
    A, B = {}, {}
    for name, t in W.iter_file(os.path.join(folder, WEIGHTS_NAME)):
        m = _PEFT_KEY.match(name)
        if not m or int(m.group(2)) >= args.num_layers or module_path(int(m.group(2)), m.group(4)) != m.group(1):
            raise ValueError(f"{folder}: unsupported adapter tensor {name}")
        (A if m.group(5) == "A" else B)[m.group(1)] = t
    for field_name in ("r", "lora_alpha"):
        if not isinstance(peft.get(field_name), (int, float)) or isinstance(peft.get(field_name), bool):
            raise ValueError(f"{folder}: {CONFIG_NAME} lacks a numeric {field_name}")
    rank = int(peft["r"])
    for path in set(A) | set(B):
        if path not in A or path not in B:
            raise ValueError(f"{folder}: {path} lacks lora_A or lora_B")
        fan_in, fan_out = module_shape(args, path.rsplit(".", 1)[1])
        if tuple(A[path].shape) != (rank, fan_in) or tuple(B[path].shape) != (fan_out, rank):
            raise ValueError(f"{folder}: {path} has shapes {tuple(A[path].shape)}, {tuple(B[path].shape)}; "
                             f"expected ({rank}, {fan_in}), ({fan_out}, {rank})")
    if not A:
        raise ValueError(f"{folder}: adapter has no LoRA tensors")
    targets = tuple(sorted({p.rsplit(".", 1)[1] for p in A}))
    config = LoraConfig(rank=rank, alpha=float(peft["lora_alpha"]), target_modules=targets,
                        seed=0,  # unused: the weights come from the file, no init runs
                        use_rslora=bool(peft.get("use_rslora", False)))
    adapter = Adapter(key=key, base=base, config=config,
                      A={p: t.float().to(device).requires_grad_(True) for p, t in A.items()},
                      B={p: t.float().to(device).requires_grad_(True) for p, t in B.items()})
    opt_path = os.path.join(folder, OPTIMIZER_NAME)
    if os.path.exists(opt_path):
        load_optimizer_state(adapter, opt_path, device)
    return adapter


def make_optimizer(adapter: Adapter) -> torch.optim.Optimizer:
    # Hyperparameters are set on every step from the request; these are placeholders.
    return torch.optim.AdamW(adapter.parameters(), lr=0.0, betas=(0.9, 0.99), weight_decay=0.0)


class AdapterStore:
    """Resident adapters, least recently used first; pinned ones are never evicted."""

    def __init__(self, max_adapters: int = 32):
        self.max_adapters = max_adapters
        self._items: "OrderedDict[str, Adapter]" = OrderedDict()

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def keys(self) -> List[str]:
        return list(self._items)

    def get(self, key: str) -> Adapter:
        adapter = self._items[key]
        self._items.move_to_end(key)
        return adapter

    def put(self, adapter: Adapter) -> List[Adapter]:
        """Insert and evict down to the bound; returns the evicted. Over the bound only while all are pinned."""
        self._items[adapter.key] = adapter
        self._items.move_to_end(adapter.key)
        evicted = []
        for key in list(self._items):
            if len(self._items) <= self.max_adapters:
                break
            if key != adapter.key and self._items[key].pins == 0:
                evicted.append(self._items.pop(key))
        return evicted

    def drop(self, key: str) -> bool:
        return self._items.pop(key, None) is not None

    def nbytes(self) -> int:
        """Bytes of the resident adapters' weights and optimizer moments (a snapshot: safe from any thread)."""
        total = 0
        for adapter in list(self._items.values()):
            total += adapter.nbytes()
            if adapter.optimizer is not None:
                total += sum(v.numel() * v.element_size() for st in list(adapter.optimizer.state.values())
                             for v in st.values() if torch.is_tensor(v))
        return total


class LoraBatch:
    """Per-row adapters (None = base model) applied in one batched computation per projection group.

    The model asks for the delta of a group of projections that share an input
    (q/k/v, o, gate/up, down) and are fused in the base weights. Every
    (adapter, projection) pair present contributes r columns: the A's are
    stacked into one [R, in] matrix, so the whole group's down-projection is
    one matmul whatever the number of adapters. With mixed rows a 0/1 column
    mask keeps each row to its own adapter's columns (rows without an adapter
    cost nothing extra), then one matmul per projection applies the stacked,
    scale-multiplied B's. With one adapter on every row there is no mask and
    the B's form one block matrix (see build_stack). When autograd is on the
    stacks are built from the parameters so gradients reach them.
    """

    def __init__(self, row_adapters: Sequence[Optional[Adapter]], dtype: torch.dtype, device,
                 stack_cache: Optional["StackCache"] = None):
        self.dtype, self.device = dtype, device
        # A canonical order, so every batch over the same adapters shares one cached stack.
        self.uniques: List[Adapter] = sorted({a.uid: a for a in row_adapters if a is not None}.values(),
                                             key=lambda a: a.uid)
        position = {a.uid: u for u, a in enumerate(self.uniques)}
        self.row_index: List[int] = [-1 if a is None else position[a.uid] for a in row_adapters]
        self.single = len(self.uniques) == 1 and all(i == 0 for i in self.row_index)
        self.stacks = stack_cache if stack_cache is not None else StackCache()
        self._masks: Dict[Tuple, torch.Tensor] = {}

    def delta(self, modules: Tuple[str, ...], sizes: Tuple[int, ...], x: torch.Tensor) -> Optional[torch.Tensor]:
        """The summed LoRA output for the concatenated outputs of `modules` (widths `sizes`), or None."""
        # Projection-major column order: each projection's columns are one contiguous range.
        parts = tuple((u, j) for j, m in enumerate(modules) for u, a in enumerate(self.uniques) if m in a.A)
        if not parts:
            return None
        adapters = [self.uniques[u] for u, _ in parts]
        if torch.is_grad_enabled():  # training: stacks built from the parameters, in the graph
            A_cat, B = build_stack(adapters, modules, parts, sizes, x.dtype, self.single)
        else:
            A_cat, B = self.stacks.get(adapters, modules, parts, sizes, x.dtype, self.single)
        h = torch.matmul(x, A_cat.t())
        if self.single:
            return torch.matmul(h, B.t())
        mask_BR = self._mask(parts)
        h = h * mask_BR.view(mask_BR.shape[0], *([1] * (h.dim() - 2)), mask_BR.shape[1])
        return torch.cat([torch.matmul(h[..., lo:hi], B_j.t()) if B_j is not None else h.new_zeros(*h.shape[:-1], width)
                          for (lo, hi, B_j), width in zip(B, sizes)], dim=-1)

    def _mask(self, parts: Tuple[Tuple[int, int], ...]) -> torch.Tensor:
        key = tuple((u, self.uniques[u].config.rank) for u, _ in parts)
        mask = self._masks.get(key)
        if mask is None:
            cols = torch.tensor([u for u, r in key for _ in range(r)])
            rows = torch.tensor(self.row_index)
            mask = (rows[:, None] == cols[None, :]).to(device=self.device, dtype=self.dtype)
            self._masks[key] = mask
        return mask


def build_stack(adapters: List[Adapter], modules: Tuple[str, ...], parts, sizes: Tuple[int, ...],
                dtype: torch.dtype, block: bool):
    """A_cat [R, in] over (adapter, projection) parts, and the scaled B side.

    block: one [sum(sizes), R] matrix with each B on its projection's output
    rows (zeros elsewhere): a single matmul, the cheapest form for one adapter.
    Otherwise, per projection, (first column, end column, B_cat [out, cols]) or
    None: no padding, whose cost would grow with the number of adapters.
    """
    A_cat = torch.cat([a.A[modules[j]] for a, (_, j) in zip(adapters, parts)], dim=0).to(dtype)
    scaled = [a.B[modules[j]] * a.config.scale for a, (_, j) in zip(adapters, parts)]
    if block:
        offsets = [sum(sizes[:j]) for j in range(len(sizes))]
        total = sum(sizes)
        blocks = [b if len(sizes) == 1 else torch.nn.functional.pad(b, (0, 0, offsets[j], total - offsets[j] - sizes[j]))
                  for b, (_, j) in zip(scaled, parts)]
        return A_cat, torch.cat(blocks, dim=1).to(dtype)
    per_module, col = [], 0
    for j in range(len(sizes)):
        mine = [b for b, (_, jj) in zip(scaled, parts) if jj == j]
        width = sum(b.shape[1] for b in mine)
        per_module.append((col, col + width, torch.cat(mine, dim=1).to(dtype) if mine else None))
        col += width
    return A_cat, per_module


class StackCache:
    """No-grad stacks per (group, adapters, versions), least recently used first, bounded in bytes.

    Rebuilt only when the adapter set of a batch or an adapter's version
    changes. The budget should hold one batch's stacks for every layer (about
    a copy of the adapters in use); below that they are rebuilt every step.
    """

    def __init__(self, max_bytes: int = 1 << 30):
        self.max_bytes, self.bytes = max_bytes, 0
        self._items: "OrderedDict[Tuple, Tuple[torch.Tensor, torch.Tensor]]" = OrderedDict()

    def get(self, adapters: List[Adapter], modules: Tuple[str, ...], parts, sizes, dtype, block: bool):
        key = (modules, dtype, parts, block) + tuple((a.uid, a.version) for a in adapters)
        hit = self._items.get(key)
        if hit is not None:
            self._items.move_to_end(key)
            return hit
        with torch.no_grad():
            hit = build_stack(adapters, modules, parts, sizes, dtype, block)
        self._items[key] = hit
        self.bytes += _nbytes(hit)
        while self.bytes > self.max_bytes and len(self._items) > 1:
            self.bytes -= _nbytes(self._items.popitem(last=False)[1])
        return hit

    def forget(self, adapter: Adapter) -> None:
        """Free stacks that hold a dropped or retrained adapter."""
        for key in [k for k in self._items if any(part[0] == adapter.uid for part in k[4:])]:
            self.bytes -= _nbytes(self._items.pop(key))


def _nbytes(stack) -> int:
    A_cat, B = stack
    tensors = [A_cat] + ([B] if isinstance(B, torch.Tensor) else [b for _, _, b in B if b is not None])
    return sum(t.numel() * t.element_size() for t in tensors)
