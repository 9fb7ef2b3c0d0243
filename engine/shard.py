"""FSDP2 over the trainer's ranks: the base sharded per block, and each adapter's LoRA weights and AdamW moments held
as this rank's rows.

Owns: `fully_shard` of a model's blocks and of the model itself (any model that lists its blocks: `model.blocks()`),
loading a base straight into this rank's shards (each rank reads only its rows of the checkpoint; the whole base is
never in one rank's memory), freeing the root's gathered weights after a forward without backward, and the adapter's
sharded state: its parameters cut into this rank's rows (FSDP2's dim-0 chunks), gathered into a computing copy
while an op runs with it (one all-gather over a flat buffer) and released after, the copy's gradients reduce-scattered
into the shards' (one collective), its optimizer state kept as shards, and a whole copy gathered for saving (rank 0
writes it). With one rank every one of these is the identity: the adapter's tensors are its parameters.

Refuses to know: losses and rows (train.py, steps.py), the wire and the ops (server.py), how ranks start (group.py).
"""

from __future__ import annotations

import contextlib
import math

import torch

from . import lora as L
from . import weights as W
from .group import Group
from .model import Transformer, load_args


def shard_model(model: torch.nn.Module, group: Group) -> torch.nn.Module:
    """fully_shard each of `model.blocks()`, then the model (its embeddings, final norm and head): a block's weights
    are whole only while that block computes."""
    from torch.distributed.fsdp import fully_shard  # FSDP2 (torch >= 2.6): the engine imports on older ones too

    for block in model.blocks():
        fully_shard(block, mesh=group.mesh)
    fully_shard(model, mesh=group.mesh)
    return model


def load_sharded(path: str, dtype: torch.dtype, device: torch.device, group: Group) -> Transformer:
    """Our Transformer from an HF folder, sharded, each rank filling only its rows of every weight."""
    model = shard_model(Transformer.on_meta(load_args(path), dtype, device), group)
    model.to_empty(device=device)
    model.load_hf_tensors(W.iter_checkpoint(path), lambda param, lo, tensor: _fill_rows(param, lo, tensor, group))
    return model


def _fill_rows(param, lo: int, tensor: torch.Tensor, group: Group) -> None:
    """Copies rows [lo, lo + len(tensor)) of the whole parameter that fall in this rank's shard."""
    local = param.to_local() if hasattr(param, "to_local") else param
    first = _first_row(param.shape[0], group)
    begin, end = max(lo, first), min(lo + tensor.shape[0], first + local.shape[0])
    if begin < end:
        with torch.no_grad():
            local[begin - first : end - first].copy_(tensor[begin - lo : end - lo])


def _first_row(rows: int, group: Group) -> int:
    """The first row of this rank's shard of a tensor of `rows` rows (FSDP2 and torch.chunk: ceil(rows / N) each)."""
    return min(rows, group.rank * math.ceil(rows / group.world_size))


def after_forward(model: torch.nn.Module) -> None:
    """Frees what the root keeps gathered after a forward (FSDP2 keeps it for the backward that may follow)."""
    if hasattr(model, "reshard"):  # an FSDPModule (only a trainer's model is one)
        model.reshard()


def local_nbytes(model: torch.nn.Module) -> int:
    """Bytes of this rank's share of the model's weights."""
    total = 0
    for p in model.parameters():
        t = p.to_local() if hasattr(p, "to_local") else p
        total += t.numel() * t.element_size()
    return total


# --- an adapter's sharded state ----------------------------------------------------------------------------------


def _chunk(rows: int, group: Group) -> int:
    return math.ceil(rows / group.world_size)


def _rows(t: torch.Tensor, group: Group) -> torch.Tensor:
    first = _first_row(t.shape[0], group)
    return t[first : first + _chunk(t.shape[0], group)]


def shard_adapter(adapter: L.Adapter, group: Group) -> L.Adapter:
    """Keeps this rank's rows of a whole adapter (every rank made or read the same one) and of its optimizer moments."""
    if group.world_size == 1:
        return adapter
    whole = adapter.parameters()
    moments = adapter.optimizer.state if adapter.optimizer is not None else {}
    adapter.whole_shapes = [tuple(t.shape) for t in whole]
    adapter.shards = [_rows(t.detach(), group).clone().requires_grad_(True) for t in whole]
    if adapter.optimizer is not None:
        adapter.optimizer = L.make_optimizer(adapter)
        for p, shard in zip(whole, adapter.shards):
            if p in moments:
                adapter.optimizer.state[shard] = {
                    k: _rows(v, group).clone() if v.dim() else v for k, v in moments[p].items()
                }
    release(adapter)
    return adapter


def _gather(shards: list[torch.Tensor], shapes: list[tuple[int, ...]], group: Group) -> list[torch.Tensor]:
    """The whole tensors of every rank's rows, in one all-gather over a flat buffer (FSDP2's layout: each rank's
    rows of each tensor padded to ceil(rows / N))."""
    flat = torch.cat([_padded(s.detach(), shape, group).reshape(-1) for s, shape in zip(shards, shapes)])
    gathered_WN = group.all_gather_flat(flat)
    whole, offset = [], 0
    for shape in shapes:
        size = _chunk(shape[0], group) * math.prod(shape[1:])
        whole.append(gathered_WN[:, offset : offset + size].reshape(-1, *shape[1:])[: shape[0]].clone())
        offset += size
    return whole


def _padded(shard: torch.Tensor, shape: tuple[int, ...], group: Group) -> torch.Tensor:
    rows = _chunk(shape[0], group)
    if shard.shape[0] == rows:
        return shard
    return torch.cat([shard, shard.new_zeros(rows - shard.shape[0], *shape[1:])])


def _assign(adapter: L.Adapter, tensors: list[torch.Tensor]) -> None:
    it = iter(tensors)
    for m in sorted(adapter.A):
        adapter.A[m], adapter.B[m] = next(it), next(it)


def materialize(adapter: L.Adapter, group: Group) -> None:
    """A and B become whole copies of the shards: leaves that collect this rank's gradients."""
    if adapter.shards is not None:
        _assign(adapter, [t.requires_grad_(True) for t in _gather(adapter.shards, adapter.whole_shapes, group)])


def release(adapter: L.Adapter) -> None:
    """Drops the whole copy; the shards stay."""
    if adapter.shards is not None:
        _assign(adapter, [torch.empty(0) for _ in adapter.shards])


@contextlib.contextmanager
def computing(group: Group, *adapters: L.Adapter | None):
    """The adapters whole for the duration of an op, released after it (however it ends)."""
    held = [a for a in adapters if a is not None and a.shards is not None]
    for adapter in held:
        materialize(adapter, group)
    try:
        yield
    finally:
        for adapter in held:
            release(adapter)


def reduce_gradients(adapter: L.Adapter, group: Group) -> None:
    """Adds the sum over ranks of the whole copy's gradients to the shards' (every rank calls it, with or without
    gradients of its own): one reduce-scatter."""
    if adapter.shards is None:
        return
    parts = []
    for t, shape in zip(adapter.parameters(), adapter.whole_shapes):
        grad = t.grad if t.grad is not None else torch.zeros(shape)
        pad = _chunk(shape[0], group) * group.world_size - shape[0]
        parts.append(torch.cat([grad, grad.new_zeros(pad, *shape[1:])]).reshape(group.world_size, -1))
    mine = group.reduce_scatter_flat(torch.cat(parts, dim=1))
    offset = 0
    for shard, shape in zip(adapter.shards, adapter.whole_shapes):
        size = _chunk(shape[0], group) * math.prod(shape[1:])
        piece = mine[offset : offset + size].reshape(-1, *shape[1:])[: shard.shape[0]]
        shard.grad = piece.clone() if shard.grad is None else shard.grad + piece
        offset += size


def weights_problem(adapter: L.Adapter, group: Group) -> str | None:
    """lora.weights_problem of the whole adapter, from every rank's shards: the same answer on every rank."""
    if adapter.shards is None:
        return L.weights_problem(L.peft_tensors(adapter))
    names = list(L.peft_tensors(adapter))  # the order of names() and of the shards, one tensor each
    names = names if len(names) == len(adapter.shards) else adapter.names()
    first = {name: _first_row(shape[0], group) for name, shape in zip(names, adapter.whole_shapes)}
    found = L.first_problem(dict(zip(names, adapter.shards)), first)
    every = [f for f in group.gather(found) if f is not None]
    return min(every, key=lambda f: f[0])[1] if every else None


def whole_copy(adapter: L.Adapter, group: Group) -> L.Adapter:
    """An unsharded copy with whole weights and optimizer moments (every rank calls it; rank 0 writes it)."""
    if adapter.shards is None:
        return adapter
    tensors = _gather(adapter.shards, adapter.whole_shapes, group)
    it = iter(tensors)
    A, B = {}, {}
    for m in sorted(adapter.A):
        A[m], B[m] = next(it), next(it)
    copy = L.Adapter(key=adapter.key, base=adapter.base, config=adapter.config, A=A, B=B, version=adapter.version)
    if adapter.optimizer is not None:
        copy.optimizer = L.make_optimizer(copy)
        stated = [i for i, shard in enumerate(adapter.shards) if adapter.optimizer.state.get(shard)]
        wholes = copy.parameters()
        for i in stated:
            copy.optimizer.state[wholes[i]] = {"step": adapter.optimizer.state[adapter.shards[i]]["step"]}
        for key in ("exp_avg", "exp_avg_sq") if stated else ():
            shapes = [adapter.whole_shapes[i] for i in stated]
            moments = _gather([adapter.optimizer.state[adapter.shards[i]][key] for i in stated], shapes, group)
            for i, moment in zip(stated, moments):
                copy.optimizer.state[wholes[i]][key] = moment
    return copy
