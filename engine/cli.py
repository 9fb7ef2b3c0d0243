"""`python3 -m engine`'s command line and the process around the engine: arguments, stdout kept for frames, the
CPU threads and priority, the start-up measurement, the ready frame, the compute and training threads, and stdio or
TCP serving.

Refuses to know: what the ops do (server.py), how frames travel (transport.py) and how the machine is measured
(machine.py).
"""

from __future__ import annotations

import os
import sys
import threading

import torch

from .machine import LOW_GFLOPS, measure_matmul_gflops, slow_matmul_warning
from .server import DTYPES, Engine, Limits, supports
from .transport import log, serve_stream, serve_tcp


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
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op CPU threads (default 1: on a 2-core machine shared with other work, 2 "
        "OpenMP threads ran decode 5-15x slower, their spinning threads waiting on descheduled "
        "peers (bench/torch_stack.py --threads); give more on a dedicated machine)",
    )
    args = ap.parse_args(argv)
    for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "kv_cache_memory_bytes", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Frames own the real stdout; anything else printing (C or Python) lands on stderr.
    frame_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
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
    )
    if args.skip_adapter_value_check:
        log("WARNING: --skip-adapter-value-check: adapters load without checking their values (tests only)")
    ready = {
        "id": None,
        "event": "ready",
        "device": device.type,
        "dtype": str(engine.default_dtype).replace("torch.", ""),
        "torch": torch.__version__,
        "matmul_gflops": round(gflops, 1),
        "limits": limits.to_json(torch.get_num_threads()),
        "supports": supports(),
    }
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
    stop.set()
    return 0
