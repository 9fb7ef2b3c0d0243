"""The trainer's process group: which rank this process is, its torch.distributed group and device mesh, and the few
collectives training needs to make N ranks' results those of one.

Owns: reading the launcher's environment (torch.distributed.run's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT; a process started alone is rank 0 of 1), the start-up checks that fail clearly instead of
hanging (more ranks on a node than CUDA devices, peers that do not connect in time), the backends (gloo on CPU; NCCL
for CUDA tensors, gloo beside it for objects), the op broadcast from rank 0 on a group of its own that may wait idle
for days, which contiguous share of some work is each rank's (`spans`), and the sums and gathers over ranks. With one
rank every collective is the identity; `SOLO` is the group of an engine that also samples (no process group at all).

Refuses to know: models, adapters, rows and losses (shard.py, train.py and steps.py call it), the wire.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import os
import signal
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

IDLE_WAIT = datetime.timedelta(days=365)  # followers wait for rank 0's next op as long as the trainer lives
CLOSE_WAIT = datetime.timedelta(seconds=30)  # for the other ranks to reach the group's end, as rank 0 stops it


class StartupError(Exception):
    """A process group that cannot start here (the message says why); the engine exits with it before `ready`."""


@dataclass
class Group:
    rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    mesh: Any = None  # the DeviceMesh FSDP shards over; None: no process group (an engine that also samples)
    ops: Any = None  # the gloo group rank 0 broadcasts ops on (no timeout); None with one rank

    @property
    def leader(self) -> bool:
        return self.rank == 0

    @property
    def sharded(self) -> bool:
        """True when the base is sharded with FSDP (every trainer-only engine, one rank or many)."""
        return self.mesh is not None

    def spans(self, sizes: Sequence[int]) -> list[tuple[int, int]]:
        """Every rank's [begin, end) of `sizes`: contiguous spans of about equal sum, rank 0's first."""
        total, cuts, running = sum(sizes), [0], 0
        for i, size in enumerate(sizes):
            running += size
            while len(cuts) < self.world_size and running * self.world_size >= total * len(cuts):
                cuts.append(i + 1)
        cuts += [len(sizes)] * (self.world_size + 1 - len(cuts))
        return list(zip(cuts[:-1], cuts[1:]))

    def share(self, sizes: Sequence[int]) -> tuple[int, int]:
        """This rank's span of `spans`."""
        return self.spans(sizes)[self.rank]

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """The elementwise sum over ranks, in place."""
        if self.world_size > 1:
            dist.all_reduce(tensor)
        return tensor

    def sum_floats(self, values: Sequence[float]) -> list[float]:
        if self.world_size == 1:
            return list(values)
        return self.sum_(torch.tensor(list(values), dtype=torch.float64)).tolist()

    def norm(self, local: torch.Tensor) -> torch.Tensor:
        """The 2-norm of a vector whose parts on each rank have norm `local` (`local` itself with one rank)."""
        if self.world_size == 1:
            return local
        return self.sum_(local.double().pow(2)).sqrt().to(local.dtype)

    def gather(self, obj) -> list:
        """Every rank's `obj`, in rank order, on every rank."""
        if self.world_size == 1:
            return [obj]
        out: list = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.ops)
        return out

    def broadcast(self, obj=None):
        """Rank 0's `obj` on every rank; followers block here (for as long as it takes) until rank 0 sends one."""
        if self.world_size == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.ops)
        return box[0]

    def all_gather_flat(self, local: torch.Tensor) -> torch.Tensor:
        """[world_size, n]: every rank's flat `local` (of the same length n)."""
        if self.world_size == 1:
            return local[None]
        out = local.new_empty(self.world_size, local.numel())
        (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out.view(-1), local)
        return out

    def reduce_scatter_flat(self, full_WN: torch.Tensor) -> torch.Tensor:
        """Row `rank` of the sum over ranks of each rank's [world_size, n]."""
        if self.world_size == 1:
            return full_WN[0]
        out = full_WN.new_empty(full_WN.shape[1])
        (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, full_WN.reshape(-1))
        return out

    def close(self) -> None:
        """Leaves the group once every rank is here to leave it. A rank that exits with gloo's connections open
        aborts about one time in three (its peer's close races the interpreter's teardown: SIGABRT, "terminate called
        without an active exception"), and its launcher then fails instead of ending with the group."""
        if not dist.is_initialized():
            return
        if self.ops is not None:
            with contextlib.suppress(RuntimeError, dist.DistError):  # a peer already gone: leave anyway
                dist.monitored_barrier(group=self.ops, timeout=CLOSE_WAIT)
        dist.destroy_process_group()


SOLO = Group()


def launched_world() -> tuple[int, int, int, int]:
    """(rank, world_size, local_rank, local_world_size) as torch.distributed.run sets them; 0, 1, 0, 1 alone."""
    env = os.environ
    world = int(env.get("WORLD_SIZE", "1"))
    return (
        int(env.get("RANK", "0")),
        world,
        int(env.get("LOCAL_RANK", "0")),
        int(env.get("LOCAL_WORLD_SIZE", str(world))),
    )


def trainer_device(spec: str | None, local_rank: int, local_world_size: int) -> torch.device:
    """The device of this rank: `cuda:LOCAL_RANK` for a group on GPUs (one per rank), else what `spec` names."""
    kind = torch.device(spec or ("cuda" if torch.cuda.is_available() else "cpu"))
    if kind.type != "cuda":
        cores = os.cpu_count() or 1
        if local_world_size > cores:  # each would import torch and hold a base share, to share cores with the others
            raise StartupError(
                f"{local_world_size} trainer ranks on this node's {cores} CPU cores: each rank needs a core of its "
                "own; lower TRAINER_WORLD_SIZE"
            )
        return kind
    count = torch.cuda.device_count()
    if local_world_size > count:
        raise StartupError(
            f"{local_world_size} trainer ranks on this node need {local_world_size} CUDA devices (one each); torch "
            f"sees {count}: lower TRAINER_WORLD_SIZE (or spread it over nodes)"
        )
    if local_world_size == 1:
        return kind if kind.index is not None else torch.device("cuda", 0)
    if kind.index is not None:
        raise StartupError(f"--device {spec} names one GPU, but {local_world_size} ranks share this node: use cuda")
    return torch.device("cuda", local_rank)


def open_group(device: torch.device, timeout_s: float) -> Group:
    """Joins the process group the launcher describes (or makes one of a single rank) and its device mesh.

    Peers that do not connect within `timeout_s` are a StartupError, so a group that cannot form ends the start-up
    instead of hanging it; collectives later time out after the same bound."""
    from torch.distributed.device_mesh import init_device_mesh

    rank, world, _, local_world = launched_world()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        if world == 1 and "MASTER_ADDR" not in os.environ:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
        else:
            dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout)
        mesh = init_device_mesh(device.type, (world,))
        ops = dist.new_group(backend="gloo", timeout=IDLE_WAIT) if world > 1 else None
    except (RuntimeError, ValueError, dist.DistError) as e:
        raise StartupError(
            f"the trainer's process group (rank {rank} of {world}) did not form within {timeout_s:g} s: {e}"
        ) from e
    return Group(rank=rank, world_size=world, local_world_size=local_world, mesh=mesh, ops=ops)


def describe(group: Group, device: torch.device) -> list[dict]:
    """Every rank's rank, pid, host and device, in rank order (for the ready frame)."""
    me = {"rank": group.rank, "pid": os.getpid(), "host": socket.gethostname(), "device": str(device)}
    return group.gather(me)


def die_with_parent() -> None:
    """Linux: this process gets SIGKILL when its parent (the launcher) dies, so no rank outlives its group."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
