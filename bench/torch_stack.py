"""The engine on pinned current PyTorch vs Debian's torch 1.13 vs llama.cpp, side by side in one run; asserts nothing.

    .venv/bin/python bench/torch_stack.py                     # SmolLM2-135M's shape with random weights
    .venv/bin/python bench/torch_stack.py --model models/X    # any llama-family HF folder
    .venv/bin/python bench/torch_stack.py --quick             # shorter runs, a smoke check

Each column is a subprocess: the engine under `.venv/bin/python` (torch 2.13) in fp32 and in bf16, the engine under
`/usr/bin/python3` (Debian's torch 1.13) in fp32, and llama.cpp (PyPI `llama-cpp-python`, built from source into
`.venv-bench` from scripts/python/bench.txt on first use: about 7 CPU-minutes of C++) on the same weights written
as an f32 GGUF.
All use the same thread count (--threads, default 1 as the engine's `--threads`). Figures:
- decode tokens/s with 1 and 32 concurrent greedy streams (prompt 32 tokens, timed after prefill);
- prefill tokens/s of one 512-token prompt;
- train tokens/s of an SFT step (rank-8 LoRA on every projection) and its MFU against the matmul peak of the same
  dtype measured in the same process: 6 * params * tokens/s / peak.
The engine runs its real Scheduler and train_step (bench/torch_stack_worker.py); llama.cpp runs its C API through
llama-cpp-python's bindings (bench/llama_cpp_worker.py: 32 streams are 32 sequences of one context decoded as one
llama_batch per step, greedy argmax in numpy; llama.cpp keeps its default f16 KV cache). Figures are best-of-N,
printed twice: wall-clock, and per CPU-second of the worker process, which at 1 thread does not depend on what else
a shared machine runs. A same-weights check compares both engines' logits for one prompt.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time

from bench_common import SMOLLM2_135M  # the shape benchmarked when no --model is given

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "bench")
DEBIAN_PYTHON = "/usr/bin/python3"
BENCH_VENV = os.path.join(REPO, ".venv-bench")
GOALS = {"decode_1": 0.5, "prefill": 1.0, "decode_32": 1.0}


def random_model(folder: str) -> str:
    """SmolLM2-135M's shape with seeded random weights, built once (by the engine's own python)."""
    if not os.path.exists(os.path.join(folder, "config.json")):
        code = (
            "import sys; sys.path.insert(0, sys.argv[1]); import json; "
            "from engine.model import ModelArgs, init_hf_weights, write_hf_checkpoint as w; "
            "c = json.loads(sys.argv[3]); w(sys.argv[2], c, init_hf_weights(ModelArgs.from_hf_config(c)))"
        )
        subprocess.run([engine_python(), "-c", code, REPO, folder, json.dumps(SMOLLM2_135M)], check=True)
    return folder


def engine_python() -> str:
    return os.environ.get("ENGINE_PYTHON") or os.path.join(REPO, ".venv", "bin", "python")


def bench_python() -> str:
    """.venv-bench's python, installing scripts/python/bench.txt into it when missing or stale."""
    script = f"source scripts/common.sh; source scripts/python/venv.sh; make_venv {BENCH_VENV} scripts/python/bench.txt"
    subprocess.run(["bash", "-c", script], cwd=REPO, check=True)
    return os.path.join(BENCH_VENV, "bin", "python")


def run_worker(python: str, args: list, threads: int) -> dict:
    env = dict(
        os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads)
    )
    out = subprocess.run([python] + args, cwd=REPO, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["exit " + str(out.returncode)])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def fmt(value, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(columns: dict, suffix: str, title: str) -> None:
    rows = [
        ("decode 1 stream, tok/s", "decode_1", 1),
        ("decode 32 streams, tok/s", "decode_32", 0),
        ("prefill 512, tok/s", "prefill", 0),
        ("train SFT, tok/s", "train", 1),
        ("matmul peak, GFLOP/s", "peak_gflops", 0),
        ("train MFU (6N)", "mfu", 3),
    ]
    names = list(columns)
    width = max(14, *(len(n) + 2 for n in names))
    print(f"\n{title}\n" + " " * 26 + "".join(n.rjust(width) for n in names))
    for label, key, digits in rows:
        print(label.ljust(26) + "".join(fmt(columns[n].get(key + suffix), digits).rjust(width) for n in names))


def print_ratios(ours: dict, ours_name: str, llama: dict, suffix: str) -> None:
    print(f"\nours ({ours_name}) / llama.cpp (f32 GGUF, same threads), {'per CPU-second' if suffix else 'wall-clock'}:")
    for key, label in (("decode_1", "single-stream decode"), ("prefill", "prefill"), ("decode_32", "32-stream decode")):
        if ours.get(key + suffix) and llama.get(key + suffix):
            ratio = ours[key + suffix] / llama[key + suffix]
            verdict = "met" if ratio >= GOALS[key] else "MISSED"
            print(f"  {label:22s} {ratio:5.2f}x  (goal >= {GOALS[key]}x: {verdict})")


def compare_probes(ours: str, llama: str) -> str:
    """Both engines' logits for the same prompt: equal up to float error only if the GGUF holds our weights."""
    import numpy as np

    a, b = np.fromfile(ours, dtype=np.float32), np.fromfile(llama, dtype=np.float32)
    return (
        f"same weights check: max |logit difference| ours vs llama.cpp = {np.abs(a - b).max():.2e} "
        f"(logits span {a.min():.2f}..{a.max():.2f}; argmax {int(a.argmax())} vs {int(b.argmax())})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="HF folder of a llama-family model (default: SmolLM2-135M's shape, random weights)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads for every column (default 1, the engine's)")
    ap.add_argument("--quick", action="store_true", help="shorter runs (noisier figures)")
    ap.add_argument("--skip", default="", help="comma-separated columns to leave out: bf16, debian, llama")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    t0 = time.perf_counter()
    model = (
        os.path.abspath(a.model) if a.model else random_model(os.path.join(REPO, "data", "bench", "smollm2-135m-shape"))
    )
    common = ["--model", model, "--threads", str(a.threads)] + (["--quick"] if a.quick else [])
    worker = os.path.join(BENCH, "torch_stack_worker.py")
    probes = {name: os.path.join(REPO, "data", "bench", f"probe-{name}.f32") for name in ("ours", "llama")}
    jobs = {"torch 2.13 fp32": (engine_python(), [worker, "--dtype", "float32", "--probe", probes["ours"]] + common)}
    if "bf16" not in skip:
        jobs["torch 2.13 bf16"] = (engine_python(), [worker, "--dtype", "bfloat16"] + common)
    if "debian" not in skip and os.path.exists(DEBIAN_PYTHON):
        jobs["torch 1.13 fp32"] = (DEBIAN_PYTHON, [worker, "--dtype", "float32"] + common)
    if "llama" not in skip:
        py = bench_python()
        gguf = os.path.join(REPO, "data", "bench", os.path.basename(model.rstrip("/")) + ".f32.gguf")
        lw = os.path.join(BENCH, "llama_cpp_worker.py")
        subprocess.run([py, lw, "write-gguf", "--model", model, "--out", gguf], cwd=REPO, check=True)
        jobs["llama.cpp f32"] = (py, [lw, "bench", "--gguf", gguf, "--probe", probes["llama"]] + common[2:])
    print(
        f"model {os.path.relpath(model, REPO)}, {a.threads} threads, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    columns = {}
    for name, (python, args) in jobs.items():
        columns[name] = run_worker(python, args, a.threads)
        print(f"  {name}: done ({time.perf_counter() - t0:.0f}s)", flush=True)
    if all(os.path.exists(p) for p in probes.values()):
        print("  " + compare_probes(probes["ours"], probes["llama"]))
    for n, c in columns.items():
        if "error" in c:
            print(f"  {n}: failed: {c['error']}")
    print_table(columns, "", "wall-clock (best of runs)")
    # At 1 thread, work per CPU-second does not depend on what else the machine runs; with more threads it also
    # counts threads that spin while waiting, so read the wall-clock table then.
    print_table(columns, "_cpu", "per CPU-second of the process (best of runs)")
    for suffix in ("", "_cpu"):
        for name in ("torch 2.13 fp32", "torch 2.13 bf16"):
            if "llama.cpp f32" in columns and name in columns and "error" not in columns[name]:
                print_ratios(columns[name], name, columns["llama.cpp f32"], suffix)
    print(f"\nload average now {os.getloadavg()[0]:.1f}; bench time {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
