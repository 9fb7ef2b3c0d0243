"""What this machine can do, measured at start: fp32 matmul speed, the BLAS torch was built with, the process's memory.

Owns: the start-up matmul measurement and the warning that explains a low one (a busy machine first, a reference BLAS
only when torch has no optimized one), the resident-memory reading the stats report, the peak an op reaches above its
start, and what keeps freed memory from staying resident: glibc's arenas capped and its free pages handed back after
each training op (torch frees a step's activations, but glibc keeps the pages for reuse: gigabytes of RSS after a
step that needed them for seconds).

Refuses to know: the engine's ops and state (server.py) and the command line (cli.py).
"""

from __future__ import annotations

import ctypes
import os
import re
import time

import torch

LOW_GFLOPS = 20.0
MATMUL_SIZE, MATMUL_SECONDS = 512, 0.25
OPTIMIZED_BLAS = ("mkl", "open", "openblas", "accelerate", "blis", "flexi", "vecLib")


def measure_matmul_gflops(device: torch.device, n: int = MATMUL_SIZE, seconds: float = MATMUL_SECONDS) -> float:
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    for _ in range(2):
        a @ b
    _sync(device)
    reps, t0 = 0, time.perf_counter()
    while True:
        a @ b
        reps += 1
        if reps % 4 == 0:
            _sync(device)
            if time.perf_counter() - t0 > seconds:
                break
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e9


def torch_blas() -> str:
    """The BLAS this torch was built with (BLAS_INFO in torch.__config__.show(): mkl, open, ...), or "unknown"."""
    match = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return match.group(1) if match else "unknown"


def slow_matmul_warning(gflops: float, device: torch.device) -> str:
    """What was measured, then the likely causes in order: a busy machine first (the measurement is a quarter of a
    second of 512x512 products, easily shared with other processes), a reference BLAS only when torch has no
    optimized one of its own."""
    busy = (
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        if hasattr(os, "getloadavg")
        else "load unknown"
    )
    blas = torch_blas()
    reason = (
        f"torch uses its own optimized BLAS ({blas}), so the likely cause is a busy machine ({busy}): other "
        "processes on these cores; it measures again at every start"
        if blas in OPTIMIZED_BLAS
        else f"a busy machine ({busy}) can explain it; so can torch's BLAS ({blas}) if it is the reference one: "
        "install an optimized one (Debian: libopenblas0-pthread)"
    )
    return (
        f"WARNING: fp32 matmul measured {gflops:.1f} GFLOP/s ({MATMUL_SIZE}x{MATMUL_SIZE} products for "
        f"{MATMUL_SECONDS} s on {device}, {torch.get_num_threads()} threads; below {LOW_GFLOPS:.0f}): {reason}."
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to tune
        return None


LIBC = _libc()
M_ARENA_MAX = -8


def limit_malloc_arenas(arenas: int = 2) -> None:
    """At most `arenas` glibc malloc arenas (its default is 8 per core): every thread that allocates (reader, compute,
    training, torch's own) otherwise grows an arena of its own that keeps what it freed. Call before threads start."""
    if LIBC is not None and hasattr(LIBC, "mallopt"):
        LIBC.mallopt(M_ARENA_MAX, arenas)


def trim_free_memory() -> None:
    """Hands the free pages of every glibc arena back to the system (malloc_trim), so RSS falls back after an op."""
    if LIBC is not None and hasattr(LIBC, "malloc_trim"):
        LIBC.malloc_trim(0)


def _peak_rss() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def start_peak(device: torch.device) -> int:
    """Starts measuring an op's peak: resets the high-water mark (the process's RSS on CPU, the allocator's on CUDA)
    and returns what is held now."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # Linux: resets VmHWM to the current RSS
    except OSError:
        pass
    return rss_bytes()


def peak_since(device: torch.device, start: int) -> int:
    """How far above `start` (start_peak's) memory went since."""
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else _peak_rss()
    return max(0, peak - start)
