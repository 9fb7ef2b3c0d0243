"""CPU time of one decode-shaped forward (32 rows, one token each) with every row on one adapter, or spread over
8 or 32 distinct adapters, as a ratio to the base model alone: the price of computing each row's LoRA delta from its
own adapter's weights only (engine/lora.py LoraBatch). Process time, so other load on a shared machine counts less.

Usage: .venv/bin/python bench/lora_batch.py [--rounds 5]
"""

import argparse
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.engine_bench import CONFIG_25M, build  # noqa: E402
from engine import lora as L  # noqa: E402
from engine.model import ForwardContext  # noqa: E402
from engine.tests.helpers import lora  # noqa: E402


def step_seconds(model, rows, cache, rounds: int, steps: int = 20) -> float:
    """Best of `rounds` mean process seconds per forward over `steps`."""
    tokens = torch.randint(0, model.args.vocab_size, (len(rows), 1), generator=torch.Generator().manual_seed(0))
    ctx = ForwardContext.packed(torch.zeros(len(rows), 1, dtype=torch.long))
    best = float("inf")
    with torch.no_grad():
        for _ in range(rounds):
            t0 = time.process_time()
            for _ in range(steps):
                batch = (
                    L.LoraBatch(rows, model.dtype, model.device, cache) if any(r is not None for r in rows) else None
                )
                model.logits(model(tokens, ctx, batch)[:, 0])
            best = min(best, (time.process_time() - t0) / steps)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model = build(CONFIG_25M, os.path.join(tmp, "m"))
        adapters = [L.new_adapter(f"a{i}", "b", model.args, lora(seed=i), "cpu") for i in range(32)]
        cache = L.StackCache()
        base = step_seconds(model, [None] * 32, cache, args.rounds)
        print(
            f"{model.num_parameters() / 1e6:.1f}M model, 32 rows, rank-8 adapters on every projection; base alone "
            f"{base * 1e3:.1f} ms CPU per forward"
        )
        for k in (1, 8, 32):
            t = step_seconds(model, [adapters[i % k] for i in range(32)], cache, args.rounds)
            print(f"  {k:2d} distinct adapter(s): {t * 1e3:.1f} ms, {t / base:.2f}x the base")


if __name__ == "__main__":
    main()
