"""One column of bench/torch_stack.py: the engine's decode, prefill and train speed under the python running it.

    <python> bench/torch_stack_worker.py --model FOLDER --dtype float32 --threads 2 [--quick]

Prints one JSON line. Runs on every torch the engine supports (1.13 and current): it imports only the engine.
Decode and prefill go through the real Scheduler (greedy, no logprobs, so the comparison with llama.cpp's argmax is
like for like); train is the real train_step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_common import Clock, best  # noqa: E402

from engine import lora as L  # noqa: E402
from engine.generate import GenRequest, Scheduler, SchedulerConfig  # noqa: E402
from engine.model import ForwardContext, KVCache, Transformer  # noqa: E402
from engine.tests.helpers import lora, optimizer, parse_rows, sampling  # noqa: E402
from engine.train import train_step  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def matmul_peak(dtype: torch.dtype, n: int = 1024, seconds: float = 0.4, times: int = 4) -> tuple:
    """Best GFLOP/s of an n x n matmul in `dtype` over several timed windows (wall, CPU)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b
    runs = []
    for _ in range(times):
        reps, clock = 0, Clock()
        while time.perf_counter() - clock.wall < seconds:
            a @ b
            reps += 1
        runs.append(clock.rates(2 * n**3 * reps / 1e9))
    return best(runs)


def prompt(i: int, length: int, vocab: int) -> list:
    return [(i * 131 + j * 17) % (vocab - 3) + 3 for j in range(length)]


def decode(model: Transformer, streams: int, new_tokens: int) -> tuple:
    """Tokens/s of `streams` greedy requests started together, timed after their prefill."""
    V = model.args.vocab_size
    sched = Scheduler(model, [], SchedulerConfig(max_batch=streams, max_len=1024))
    count = [0]

    def emit(m):
        count[0] += len(m.get("tokens", ()))

    for i in range(streams):
        params = sampling(V, max_tokens=new_tokens, temperature=0)
        sched.submit(GenRequest(id=str(i), prompt=prompt(i, 32, V), params=params, emit=emit, finish=lambda r: None))
    sched.step()  # prefill of every request, and the first decode step
    before, clock = count[0], Clock()
    while sched.has_work():
        sched.step()
    return clock.rates(count[0] - before)


def prefill(model: Transformer, length: int) -> tuple:
    """Tokens/s of admitting one prompt (chunked prefill plus its first token)."""
    V = model.args.vocab_size
    sched = Scheduler(model, [], SchedulerConfig(max_batch=1, max_len=length + 8, prefill_chunk=length))
    params = sampling(V, max_tokens=1, temperature=0)
    sched.submit(
        GenRequest(id="p", prompt=prompt(0, length, V), params=params, emit=lambda m: None, finish=lambda r: None)
    )
    clock = Clock()
    sched.step()
    return clock.rates(length)


def train(model: Transformer, rows_n: int, T: int, reps: int) -> tuple:
    """Best tokens/s of an SFT step on a fresh rank-8 adapter over every projection."""
    adapter = L.new_adapter("bench", "b", model.args, lora(), "cpu")
    V = model.args.vocab_size
    rows = parse_rows(
        [{"tokens": prompt(r, T, V), "mask": [0] + [1] * (T - 1)} for r in range(rows_n)],
        V,
        model.args.max_position_embeddings,
        "sft",
    )
    opt = optimizer("sft", learning_rate=1e-4)
    train_step(model, adapter, "sft", rows, None, opt)  # warm-up: optimizer state, allocator
    runs = []
    for _ in range(reps):
        clock = Clock()
        train_step(model, adapter, "sft", rows, None, opt)
        runs.append(clock.rates(rows_n * T))
    return best(runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--probe", default="", help="write the last-position logits of a fixed prompt here (f32)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dtype = DTYPES[a.dtype]
    model = Transformer.from_pretrained(a.model, dtype, "cpu")
    if a.probe:  # last-position logits of a fixed prompt, to check llama.cpp runs the same weights
        with torch.no_grad():
            ids = torch.tensor([prompt(0, 32, model.args.vocab_size)])
            ctx = ForwardContext.cached(KVCache(model.args, dtype, model.device, 1, 64), 0, [0], 32)
            model.logits(model(ids, ctx)[:, -1])[0].float().numpy().tofile(a.probe)
    reps, new_tokens = (1, 16) if a.quick else (3, 48)
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "params": model.num_parameters()}
    figures = {
        "decode_1": best(decode(model, 1, new_tokens) for _ in range(reps)),
        "decode_32": best(decode(model, 32, new_tokens) for _ in range(reps)),
        "prefill": best(prefill(model, 512) for _ in range(reps)),
        "train": train(model, 2, 256, max(1, reps - 1)),
        "peak_gflops": matmul_peak(dtype),
    }
    for key, (wall, cpu) in figures.items():
        out[key], out[key + "_cpu"] = wall, cpu
    for suffix in ("", "_cpu"):
        out["mfu" + suffix] = 6 * out["params"] * out["train" + suffix] / (out["peak_gflops" + suffix] * 1e9)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
