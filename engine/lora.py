"""LoRA adapters: their parameters, the PEFT file layout, residency, and batched application.

Owns: LoraConfig (rank, alpha, targets, seed), the torchtune-style init (A
uniform from a seeded generator, B zero, so a fresh adapter is an exact no-op;
scale alpha/rank), PEFT names (`base_model.model.<module>.lora_A.weight`) and
`adapter_config.json`, optimizer state saved beside (`optimizer.pt`), the LRU
bound on resident adapters with pinning, the value bound every adapter keeps
(finite, |w| <= MAX_ABS_WEIGHT from engine/bounds.json: checked at save and
after every optimizer step here, at load by peft.py), and LoraBatch: the object a forward calls to
add every row's own adapter delta, computed from that adapter's weights alone.

Refuses to know: requests, sampling, losses, the wire protocol, what makes a
PEFT folder on disk loadable (peft.py checks and loads it). It knows only
the base model's adaptable modules: a table of LoraTarget (path, short name,
shape, expert count) that each model implementation lists (ours from ModelArgs,
engine/hf_model.py from the `transformers` module tree). Mixture-of-experts
projections are one target holding [experts, ...] tensors, written to PEFT files
per expert (`….mlp.experts.{e}.gate_proj.lora_A.weight`), the layout PEFT loads
into `transformers` and vLLM serves.
"""

from __future__ import annotations

import itertools
import math
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from . import weights as W
from .model import ATTN_MODULES, MLP_MODULES, ModelArgs
from .schema import ADAPTER_WEIGHT_MAX_ABS

SUPPORTED_TARGETS: tuple[str, ...] = ATTN_MODULES + MLP_MODULES  # what our own implementation can adapt
MAX_ABS_WEIGHT = ADAPTER_WEIGHT_MAX_ABS  # bounds.json's; the server checks imports against it too
CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
OPTIMIZER_NAME = "optimizer.pt"
_UIDS = itertools.count()


@dataclass(frozen=True)
class LoraTarget:
    """One adaptable projection of a base: its module path (PEFT's name without `base_model.model.`), short name,
    kind (`attention` or `mlp`) and shape; `experts` > 0 for a mixture's expert projections, adapted per expert
    (path `….mlp.experts.gate_proj`: A is [experts, rank, in], B [experts, out, rank])."""

    path: str
    name: str
    kind: str
    fan_in: int
    fan_out: int
    experts: int = 0


def dense_targets(args: ModelArgs) -> list[LoraTarget]:
    """Our implementation's table: every attention and MLP projection of every layer, layer by layer."""
    return [
        LoraTarget(
            module_path(layer, name), name, "attention" if name in ATTN_MODULES else "mlp", *module_shape(args, name)
        )
        for layer in range(args.num_layers)
        for name in SUPPORTED_TARGETS
    ]


def target_table(base) -> list[LoraTarget]:
    """The target table of `base`: a model's own list, or ours for bare ModelArgs."""
    return dense_targets(base) if isinstance(base, ModelArgs) else list(base)


def target_kinds(targets) -> dict[str, str]:
    """Short name -> kind of every target a base offers, in table order (what load_base announces)."""
    return {t.name: t.kind for t in target_table(targets)}


def module_shape(args: ModelArgs, name: str) -> tuple[int, int]:
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
    target_modules: tuple[str, ...]
    seed: int
    use_rslora: bool = False  # only PEFT files set it: adapters the server creates never use rsLoRA

    def __post_init__(self):
        if int(self.rank) < 1:
            raise ValueError("LoRA rank must be >= 1")
        self.target_modules = tuple(self.target_modules)
        if not self.target_modules:
            raise ValueError("LoRA target_modules is empty")

    @property
    def scale(self) -> float:
        return self.alpha / (math.sqrt(self.rank) if self.use_rslora else self.rank)

    def to_peft(self, base_name: str) -> dict:
        # The fields PEFT's LoraConfig and vLLM's LoRA loader read.
        return {
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": base_name,
            "r": self.rank,
            "lora_alpha": self.alpha,
            "target_modules": sorted(self.target_modules),
            "lora_dropout": 0.0,
            "bias": "none",
            "fan_in_fan_out": False,
            "inference_mode": True,
            "init_lora_weights": True,
            "use_rslora": self.use_rslora,
            "use_dora": False,
            "modules_to_save": None,
            "layers_to_transform": None,
            "layers_pattern": None,
            "rank_pattern": {},
            "alpha_pattern": {},
            "revision": None,
        }


@dataclass
class Adapter:
    key: str
    base: str
    config: LoraConfig
    A: dict[str, torch.Tensor]  # module path -> [rank, in]
    B: dict[str, torch.Tensor]  # module path -> [out, rank]
    optimizer: torch.optim.Optimizer | None = None
    version: int = 0  # bumped by every optimizer step; StackCache keys on (uid, version)
    # In a trainer of several ranks (shard.py): this rank's rows of each parameter (in `names()` order), which the
    # optimizer steps; A and B then hold a gathered copy only while an op computes with it. None: A and B are the
    # parameters themselves.
    shards: list[torch.Tensor] | None = field(default=None, repr=False)
    whole_shapes: list[tuple[int, ...]] = field(default_factory=list, repr=False)  # of each parameter, with shards
    pins: int = field(default=0, repr=False)
    uid: int = field(default_factory=lambda: next(_UIDS), repr=False)

    def names(self) -> list[str]:
        """Parameter names in a fixed order: the order of optimizer state too."""
        return [f"{m}.lora_{ab}" for m in sorted(self.A) for ab in "AB"]

    def parameters(self) -> list[torch.Tensor]:
        return [t for m in sorted(self.A) for t in (self.A[m], self.B[m])]

    def trainable(self) -> list[torch.Tensor]:
        """What the optimizer steps: this rank's shards in a trainer of several ranks, else the parameters."""
        return self.parameters() if self.shards is None else self.shards

    def nbytes(self) -> int:
        held = self.parameters() + (self.shards or [])
        return sum(t.numel() * t.element_size() for t in held)

    def optimizer_nbytes(self) -> int:
        if self.optimizer is None:
            return 0
        states = list(self.optimizer.state.values())
        return sum(v.numel() * v.element_size() for st in states for v in st.values() if torch.is_tensor(v))


class NonFinite(Exception):
    """Values no computation may use: adapter weights that are not finite or beyond MAX_ABS_WEIGHT, or a row's
    logits that are not finite. Answered with the error code `non_finite`."""


def first_bad_value(t: torch.Tensor) -> tuple[float, list[int]] | None:
    """The first value of `t` that is not finite or beyond MAX_ABS_WEIGHT, with its index; None when all are in bounds."""
    t = t.detach()
    bad = ~torch.isfinite(t) | (t.abs() > MAX_ABS_WEIGHT)
    if not bool(bad.any()):
        return None
    flat = int(bad.flatten().nonzero()[0])
    index, rest = [], flat
    for size in reversed(t.shape):  # torch 1.13 (the fallback) has no unravel_index
        rest, i = divmod(rest, size)
        index.insert(0, i)
    return float(t.flatten()[flat]), index


def weights_problem(tensors: dict[str, torch.Tensor], first_rows: dict[str, int] | None = None) -> str | None:
    """The first value out of bounds, as 'TENSOR holds VALUE at index [i, j]', or None when all are in bounds.

    `first_rows`: where a tensor is a shard, the row of the whole tensor its row 0 is (the index names that row)."""
    found = first_problem(tensors, first_rows)
    return None if found is None else found[1]


def first_problem(tensors: dict[str, torch.Tensor], first_rows: dict[str, int] | None = None) -> tuple | None:
    """(name, message) of weights_problem's first value out of bounds, or None."""
    for name in sorted(tensors):
        bad = first_bad_value(tensors[name])
        if bad is not None:
            index = [bad[1][0] + (first_rows or {}).get(name, 0), *bad[1][1:]]
            return name, (
                f"{name} holds {bad[0]:g} at index {index} (adapter values must be finite "
                f"and within ±{MAX_ABS_WEIGHT:g})"
            )
    return None


def peft_tensors(adapter: Adapter) -> dict[str, torch.Tensor]:
    """The adapter's weights under their PEFT names (as save_peft writes them); expert targets one pair per expert."""
    out = {}
    for m in sorted(adapter.A):
        if adapter.A[m].dim() == 3:
            prefix, name = m.rsplit(".", 1)
            for e in range(adapter.A[m].shape[0]):
                out[f"base_model.model.{prefix}.{e}.{name}.lora_A.weight"] = adapter.A[m][e]
                out[f"base_model.model.{prefix}.{e}.{name}.lora_B.weight"] = adapter.B[m][e]
        else:
            out[f"base_model.model.{m}.lora_A.weight"] = adapter.A[m]
            out[f"base_model.model.{m}.lora_B.weight"] = adapter.B[m]
    return out


def check_targets(names, targets) -> None:
    """Every name must be a projection this base has (a 'bad_request' naming the first that is not)."""
    offered = target_kinds(targets)
    for name in names:
        if name not in offered:
            raise ValueError(f"unsupported LoRA target module {name!r} for this base; it has: {', '.join(offered)}")


def new_adapter(key: str, base: str, targets, config: LoraConfig, device) -> Adapter:
    """A fresh adapter: A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming-uniform, a=sqrt(5), as nn.Linear), B = 0.

    `targets` is the base's table (or our ModelArgs); its fixed order keeps the seed -> weights map stable."""
    table = target_table(targets)
    check_targets(config.target_modules, table)
    g = torch.Generator().manual_seed(int(config.seed))
    A, B = {}, {}
    for t in table:
        if t.name not in config.target_modules:
            continue
        lead = (t.experts,) if t.experts else ()
        bound = 1.0 / math.sqrt(t.fan_in)
        a = (torch.rand(*lead, config.rank, t.fan_in, generator=g) * 2 - 1) * bound
        A[t.path] = a.to(device).requires_grad_(True)
        B[t.path] = torch.zeros(*lead, t.fan_out, config.rank, device=device).requires_grad_(True)
    return Adapter(key=key, base=base, config=config, A=A, B=B)


def save_peft(adapter: Adapter, folder: str, base_name: str) -> list[str]:
    """Writes the adapter; one holding a value out of bounds is refused (NonFinite) before anything is written."""
    tensors = {name: t.detach().float().cpu() for name, t in peft_tensors(adapter).items()}
    problem = weights_problem(tensors)
    if problem is not None:
        raise NonFinite(f"adapter {adapter.key!r} is not saved: {problem}")
    os.makedirs(folder, exist_ok=True)
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
    for name, p in zip(adapter.names(), adapter.trainable()):
        st = adapter.optimizer.state.get(p)
        if st:
            state[name] = {
                k: (v if torch.is_tensor(v) else torch.tensor(float(v))).detach().cpu() for k, v in st.items()
            }
    return {"format": OPTIMIZER_FORMAT, "state": state}


def load_optimizer_state(adapter: Adapter, path: str, device) -> None:
    try:  # a checkpoint folder must not be able to run code
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:  # torch without weights_only
        saved = torch.load(path, map_location="cpu")
    if not isinstance(saved, dict) or saved.get("format") != OPTIMIZER_FORMAT:
        raise ValueError(f"{path}: not an optimizer state this engine wrote")
    names = dict(zip(adapter.names(), adapter.trainable()))
    unknown = sorted(set(saved["state"]) - set(names))
    if unknown:
        raise ValueError(f"{path}: state for parameters the adapter lacks: {unknown[:4]}")
    adapter.optimizer = make_optimizer(adapter)
    for name, st in saved["state"].items():
        # AdamW keeps `step` on the CPU unless capturable; the moments live with the parameter.
        adapter.optimizer.state[names[name]] = {k: v if k == "step" else v.to(device) for k, v in st.items()}


def make_optimizer(adapter: Adapter) -> torch.optim.Optimizer:
    # Hyperparameters are set on every step from the request; these are placeholders.
    return torch.optim.AdamW(adapter.trainable(), lr=0.0, betas=(0.9, 0.99), weight_decay=0.0)


class AdapterStore:
    """Resident adapters, least recently used first; pinned ones are never evicted."""

    def __init__(self, max_adapters: int = 32):
        self.max_adapters = max_adapters
        self._items: OrderedDict[str, Adapter] = OrderedDict()

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def keys(self) -> list[str]:
        return list(self._items)

    def get(self, key: str) -> Adapter:
        adapter = self._items[key]
        self._items.move_to_end(key)
        return adapter

    def put(self, adapter: Adapter) -> list[Adapter]:
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
        """Bytes of the resident adapters' weights (a snapshot: safe from any thread)."""
        return sum(adapter.nbytes() for adapter in list(self._items.values()))

    def optimizer_nbytes(self) -> int:
        """Bytes of the resident adapters' optimizer moments."""
        return sum(adapter.optimizer_nbytes() for adapter in list(self._items.values()))


class LoraBatch:
    """Per-row adapters (None = base model); each row's delta is computed from its own adapter's weights alone.

    The model asks for the delta of a group of projections that share an input
    (q/k/v, o, gate/up, down) and are fused in the base weights. Per adapter,
    its A's over the group form one [R, in] matrix and its scaled B's one block
    matrix (build_stack), so a group costs two matmuls per adapter in the batch.
    With one adapter on every row that is the whole computation. With mixed rows
    each adapter's rows are selected, multiplied by that adapter's stack only, and
    written into a zero delta (rows without an adapter keep the zeros): no row
    ever enters a product with another adapter's weights, so one adapter's NaN
    or overflow cannot reach other rows (a 0/1 mask multiplied in would carry it:
    0 x NaN is NaN). When autograd is on the stacks are built from the
    parameters so gradients reach them.
    """

    def __init__(
        self, row_adapters: Sequence[Adapter | None], dtype: torch.dtype, device, stack_cache: StackCache | None = None
    ):
        self.dtype, self.device = dtype, device
        rows_of: dict[int, list[int]] = {}
        self.uniques: list[Adapter] = []
        for b, a in enumerate(row_adapters):
            if a is not None:
                if a.uid not in rows_of:
                    self.uniques.append(a)
                rows_of.setdefault(a.uid, []).append(b)
        self.single = len(self.uniques) == 1 and len(rows_of[self.uniques[0].uid]) == len(row_adapters)
        self.rows = [torch.tensor(rows_of[a.uid], device=device) for a in self.uniques]
        owner = [-1] * len(row_adapters)  # per row: its adapter's index in uniques, -1 for none
        for u, a in enumerate(self.uniques):
            for b in rows_of[a.uid]:
                owner[b] = u
        self.owner_B = torch.tensor(owner, device=device)
        self.stacks = stack_cache if stack_cache is not None else StackCache()

    def delta(self, modules: tuple[str, ...], sizes: tuple[int, ...], x: torch.Tensor) -> torch.Tensor | None:
        """The summed LoRA output for the concatenated outputs of `modules` (widths `sizes`), or None."""
        mine = [u for u, a in enumerate(self.uniques) if any(m in a.A for m in modules)]
        if not mine:
            return None
        if self.single:
            A, B = self._stack(self.uniques[0], modules, sizes, x.dtype)
            return torch.matmul(torch.matmul(x, A.t()), B.t())
        deltas = []
        for u in mine:
            A, B = self._stack(self.uniques[u], modules, sizes, x.dtype)
            deltas.append(torch.matmul(torch.matmul(x.index_select(0, self.rows[u]), A.t()), B.t()))
        out = x.new_zeros(*x.shape[:-1], sum(sizes))
        rows = self.rows[mine[0]] if len(mine) == 1 else torch.cat([self.rows[u] for u in mine])
        return out.index_copy_(0, rows, deltas[0] if len(deltas) == 1 else torch.cat(deltas))

    def expert_stacks(self, modules: tuple[str, ...], sizes: tuple[int, ...], dtype: torch.dtype) -> list | None:
        """Per unique adapter, its stacks over a group of expert projections ([experts, R, in], [experts, out, R]),
        or None where it lacks them; None when no adapter has them. Built once per layer call: under autograd a
        stack is part of that forward's graph."""
        stacks = [
            self._stack(a, modules, sizes, dtype) if any(m in a.A for m in modules) else None for a in self.uniques
        ]
        return stacks if any(st is not None for st in stacks) else None

    def token_delta(self, stacks: list, expert: int, x_NI: torch.Tensor, rows_N: torch.Tensor) -> torch.Tensor:
        """The delta of one expert's projection group for tokens x_NI, token n coming from batch row rows_N[n]:
        each token through its own row's adapter only (selected, never masked)."""
        if self.single:
            A, B = stacks[0]
            return torch.matmul(torch.matmul(x_NI, A[expert].t()), B[expert].t())
        owner_N = self.owner_B.index_select(0, rows_N)
        out = None
        for u, st in enumerate(stacks):
            if st is None:
                continue
            sel = (owner_N == u).nonzero().squeeze(1)
            if sel.numel() == 0:
                continue
            A, B = st
            part = torch.matmul(torch.matmul(x_NI.index_select(0, sel), A[expert].t()), B[expert].t())
            out = x_NI.new_zeros(x_NI.shape[0], part.shape[-1]) if out is None else out
            out = out.index_copy(0, sel, part)
        return out if out is not None else x_NI.new_zeros(x_NI.shape[0], stacks_width(stacks))

    def _stack(self, adapter: Adapter, modules: tuple[str, ...], sizes: tuple[int, ...], dtype: torch.dtype):
        if torch.is_grad_enabled():  # training: stacks built from the parameters, in the graph
            return build_stack(adapter, modules, sizes, dtype)
        return self.stacks.get(adapter, modules, sizes, dtype)


def build_stack(adapter: Adapter, modules: tuple[str, ...], sizes: tuple[int, ...], dtype: torch.dtype):
    """(A_cat [R, in], B [sum(sizes), R]) of one adapter over a projection group ([experts, …] for expert targets).

    A_cat stacks the A's of the group's projections the adapter has; B puts each
    scaled B on its projection's output rows (zeros elsewhere), so the group's
    delta is two matmuls.
    """
    parts = [j for j, m in enumerate(modules) if m in adapter.A]
    A_cat = torch.cat([adapter.A[modules[j]] for j in parts], dim=-2).to(dtype)
    offsets = [sum(sizes[:j]) for j in range(len(sizes))]
    total = sum(sizes)
    blocks = [
        torch.nn.functional.pad(
            adapter.B[modules[j]] * adapter.config.scale, (0, 0, offsets[j], total - offsets[j] - sizes[j])
        )
        for j in parts
    ]
    return A_cat, torch.cat(blocks, dim=-1).to(dtype)


def stacks_width(stacks: list) -> int:
    """The output width of a group's stacks (every adapter's B spans the whole group)."""
    return next(st[1].shape[-2] for st in stacks if st is not None)


class StackCache:
    """No-grad stacks per (group, adapter, version), least recently used first, bounded in bytes.

    Rebuilt only when an adapter's version changes (or the stack was evicted),
    whatever other adapters share the batch. The budget should hold every layer's
    stacks of the adapters in use (about a copy of them); below that they are
    rebuilt every step.
    """

    def __init__(self, max_bytes: int = 1 << 30):
        self.max_bytes, self.bytes = max_bytes, 0
        self._items: OrderedDict[tuple, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()

    def get(self, adapter: Adapter, modules: tuple[str, ...], sizes, dtype):
        key = (adapter.uid, adapter.version, modules, dtype)
        hit = self._items.get(key)
        if hit is not None:
            self._items.move_to_end(key)
            return hit
        with torch.no_grad():
            hit = build_stack(adapter, modules, sizes, dtype)
        self._items[key] = hit
        self.bytes += _nbytes(hit)
        while self.bytes > self.max_bytes and len(self._items) > 1:
            self.bytes -= _nbytes(self._items.popitem(last=False)[1])
        return hit

    def forget(self, adapter: Adapter) -> None:
        """Free stacks that hold a dropped or retrained adapter."""
        for key in [k for k in self._items if k[0] == adapter.uid]:
            self.bytes -= _nbytes(self._items.pop(key))


def _nbytes(stack) -> int:
    return sum(t.numel() * t.element_size() for t in stack)
