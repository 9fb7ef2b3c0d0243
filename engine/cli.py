"""`python3 -m engine`'s command line and the process around the engine: arguments, stdout kept for frames, the
CPU threads and priority, the start-up measurement, the ready frame (or the frame saying why start-up failed), the
compute and training threads, stdio or TCP serving, and for a trainer of several ranks the loop the ranks after the
first run (the ops rank 0 broadcasts) and the stop rank 0 sends them.

Refuses to know: what the ops do (server.py), how frames travel (transport.py), how the machine is measured
(machine.py) and how the process group forms (group.py).
"""

from __future__ import annotations

import os
import sys
import threading
import traceback

import torch

from . import group as G
from . import machine
from .limits import Limits
from .loading import supports
from .machine import LOW_GFLOPS, measure_matmul_gflops, slow_matmul_warning
from .server import DTYPES, STOP, Beside, Engine, error_code
from .transport import encode_frame, log, serve_stream, serve_tcp


def parse_args(argv: list[str] | None):
    import argparse

    ap = argparse.ArgumentParser(prog="python3 -m engine", description="LLM engine speaking framed JSON on stdio")
    ap.add_argument(
        "--tcp",
        metavar="HOST:PORT",
        help="serve on TCP instead of stdio (one connection at a time); the ENGINE_SECRET environment "
        "variable, when set, is the secret a connection's first frame must carry "
        "(required beyond loopback)",
    )
    ap.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    ap.add_argument(
        "--dtype",
        choices=list(DTYPES),
        default=None,
        help="default weights dtype (default: float32 on CPU, bfloat16 on CUDA)",
    )
    ap.add_argument("--max-adapters", type=int, default=32)
    ap.add_argument(
        "--max-num-seqs",
        "--max-batch",
        dest="max_num_seqs",
        type=int,
        default=32,
        help="concurrent generation sequences per base",
    )
    ap.add_argument(
        "--max-model-len",
        "--max-seq-len",
        dest="max_model_len",
        type=int,
        default=None,
        help="cap on tokens per sequence, prompt included (default: the model's)",
    )
    ap.add_argument(
        "--max-num-batched-tokens", type=int, default=2048, help="prompt tokens prefilled between two decode steps"
    )
    ap.add_argument(
        "--kv-cache-memory-bytes",
        type=int,
        default=None,
        help="KV cache per base; caps concurrent full-length sequences (default: unbounded)",
    )
    ap.add_argument(
        "--nice",
        type=int,
        default=0,
        help="lower this process's CPU priority (a trainer sharing cores with samplers yields to them)",
    )
    ap.add_argument(
        "--skip-adapter-value-check",
        action="store_true",
        help="TESTS ONLY: load adapters without checking that their values are finite and within "
        "engine/bounds.json, so a test can make a broken adapter resident and show that its rows "
        "cannot reach other rows of the batch. The server never passes it to its engines.",
    )
    _trainer_arguments(ap)
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op CPU threads (default 1: on a 2-core machine shared with other work, 2 "
        "OpenMP threads ran decode 5-15x slower, their spinning threads waiting on descheduled "
        "peers (bench/torch_stack.py --threads); give more on a dedicated machine)",
    )
    args = ap.parse_args(argv)
    names = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "kv_cache_memory_bytes", "threads")
    for name in names + ("activation_memory_bytes",):
        value = getattr(args, name)
        if value is not None and value < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def _trainer_arguments(ap) -> None:
    ap.add_argument(
        "--role",
        choices=["both", "trainer", "sampler"],
        default="both",
        help="trainer: a trainer-only engine (never samples): a torch.distributed process group of the ranks its "
        "launcher starts (torch.distributed.run; alone, one rank), the base sharded with FSDP2; sampler: an engine "
        "that never trains (refuses the trainer's ops, loads adapters without their Adam moments)",
    )
    ap.add_argument(
        "--dist-timeout",
        type=float,
        default=600.0,
        help="trainer: seconds the ranks wait for each other to connect, and for each collective",
    )
    ap.add_argument(
        "--activation-memory-bytes",
        type=int,
        default=None,
        help="training rows whose forward would keep more than this for backward recompute each block instead "
        "(default: a quarter of the device's memory, shared by the ranks on it)",
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Frames own the real stdout; anything else printing (C or Python) lands on stderr.
    frame_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    machine.limit_malloc_arenas()  # before any thread allocates
    try:
        device, group = _device_and_group(args)
    except G.StartupError as e:
        log(f"start-up failed: {e}")
        if G.launched_world()[0] == 0:
            frame_out.write(
                encode_frame({"id": None, "event": "failed", "error": {"code": "startup", "message": str(e)}})
            )
        return 3
    torch.set_num_threads(args.threads)
    if args.nice:
        os.nice(args.nice)
    gflops = measure_matmul_gflops(device)
    log(f"torch {torch.__version__} on {device}, fp32 matmul {gflops:.1f} GFLOP/s, {torch.get_num_threads()} threads")
    if gflops < LOW_GFLOPS:
        log(slow_matmul_warning(gflops, device))
    limits = Limits(args.max_model_len, args.max_num_seqs, args.max_num_batched_tokens, args.kv_cache_memory_bytes)
    engine = Engine(
        device,
        args.max_adapters,
        limits,
        round(gflops, 1),
        DTYPES[args.dtype] if args.dtype else None,
        check_adapter_values=not args.skip_adapter_value_check,
        group=group,
        activation_memory_bytes=args.activation_memory_bytes or _activation_budget(device, group),
        samples_only=args.role == "sampler",
    )
    if args.skip_adapter_value_check:
        log("WARNING: --skip-adapter-value-check: adapters load without checking their values (tests only)")
    ready = _ready_frame(engine, args, limits, gflops)
    if group is not None and not group.leader:
        return _follow(engine, group)
    _serve(engine, args, frame_out, ready)
    return 0


def _device_and_group(args) -> tuple[torch.device, G.Group | None]:
    """The device, and for a trainer its process group (StartupError when it cannot form here)."""
    if args.role != "trainer":
        return torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu")), None
    G.die_with_parent()
    _, world, local_rank, local_world = G.launched_world()
    device = G.trainer_device(args.device, local_rank, local_world)
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401  (FSDP2: torch >= 2.6)
    except ImportError as e:
        if world > 1:
            raise G.StartupError(
                f"a trainer of {world} ranks needs FSDP2 (torch >= 2.6); this is {torch.__version__}"
            ) from e
        log(f"torch {torch.__version__} has no FSDP2: the trainer runs as one unsharded rank")
        return device, G.Group()
    return device, G.open_group(device, args.dist_timeout)


def _activation_budget(device: torch.device, group: G.Group | None) -> int:
    """A quarter of the device's memory, shared by the ranks that use it."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory // 4
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return total // 4 // (group.local_world_size if group is not None else 1)


def _ready_frame(engine: Engine, args, limits: Limits, gflops: float) -> dict:
    ready = {
        "id": None,
        "event": "ready",
        "device": engine.device.type,
        "dtype": str(engine.default_dtype).replace("torch.", ""),
        "torch": torch.__version__,
        "matmul_gflops": round(gflops, 1),
        "limits": limits.to_json(torch.get_num_threads()),
        "supports": supports(),
        "role": args.role,
    }
    if engine.trains_only:  # every rank takes part in describing the group
        ready["ranks"] = G.describe(engine.group, engine.device)
        engine.share_memory()
    return ready


def _serve(engine: Engine, args, frame_out, ready: dict) -> None:
    stop = threading.Event()
    for target, name in ((engine.compute_loop, "compute"), (engine.train_loop, "train")):
        threading.Thread(target=target, args=(stop,), name=name, daemon=True).start()
    try:
        if args.tcp:
            serve_tcp(engine, args.tcp, os.environ.get("ENGINE_SECRET") or None, ready)
        else:
            serve_stream(engine, sys.stdin.buffer, frame_out, ready)
    except KeyboardInterrupt:
        pass
    engine.cancel_all()
    if engine.group.world_size > 1:
        stopped = threading.Event()  # the other ranks stop after the ops already queued
        engine.jobs.put((STOP, None, stopped))
        stopped.wait(timeout=60)
    stop.set()
    engine.group.close()


def _follow(engine: Engine, group: G.Group) -> int:
    """A rank after the first: runs every op rank 0 broadcasts, in its order, until rank 0 stops it. An error rank 0
    meets too (a bad request, a diverged step) is its to answer; an unexpected one ends this rank, and so the group."""
    log(f"rank {group.rank} of {group.world_size} following rank 0")
    while True:
        msg = group.broadcast()
        if msg is None:
            group.close()
            return 0
        try:
            result = engine.together(msg["op"], msg["id"], msg)
            if isinstance(result, Beside):
                result.work()
        except Exception as e:  # noqa: BLE001 (rank 0 answers it)
            if error_code(e) == "internal":
                log(f"rank {group.rank}: {msg['op']} failed:\n" + "".join(traceback.format_exception(e)))
                return 70
