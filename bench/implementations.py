"""Our implementation against transformers' modeling code on our engine, on SmolLM2-135M-Instruct (a Llama, which
both can run): the price of the fallback every family without our own implementation pays. Prints figures and the
ratios ours / transformers measured side by side in one run; asserts nothing.

    .venv/bin/python bench/implementations.py            # a few minutes on 2 cores
    .venv/bin/python bench/implementations.py --quick    # smaller runs, noisier

Decode: tokens/s of 1 and 32 concurrent requests through the real Scheduler (engine_bench.bench_decode), no adapter
and 32 requests over one adapter. Train: tokens/s of an SFT step on a fresh rank-8 adapter over every projection
(engine_bench.bench_training). Both implementations load the same folder in fp32 on the CPU.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "bench"))

from engine_bench import bench_decode, bench_training  # noqa: E402

from engine import lora as L  # noqa: E402
from engine.hf_model import HFModel  # noqa: E402
from engine.model import Transformer  # noqa: E402
from engine.tests.helpers import lora  # noqa: E402
from engine.tests.test_lora import randomize  # noqa: E402

SMOLLM2 = os.path.join(REPO, "models", "smollm2-135m-instruct")


def measure(model, quick: bool) -> dict:
    tokens = 8 if quick else 24
    adapter = randomize(L.new_adapter("a", "b", model.lora_targets(), lora(seed=1), "cpu"), 1, 0.05)
    return {
        "decode tokens/s, 1 stream": bench_decode(model, 1, [], tokens),
        "decode tokens/s, 32 streams": bench_decode(model, 32, [], tokens),
        "decode tokens/s, 32 streams on one adapter": bench_decode(model, 32, [adapter], tokens),
        "train tokens/s (SFT step)": bench_training(model, 2 if quick else 4, 64 if quick else 128, 1 if quick else 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs (a smoke check, noisier figures)")
    ap.add_argument("--folder", default=SMOLLM2, help="the model folder (default: the built-in SmolLM2)")
    args = ap.parse_args()
    torch.manual_seed(0)
    results = {}
    for name, cls in (("ours", Transformer), ("transformers", HFModel)):
        model = cls.from_pretrained(args.folder, torch.float32, "cpu")
        model.prepare(model.args.max_position_embeddings)
        results[name] = measure(model, args.quick)
        del model
    print(f"{'figure':45s} {'ours':>10s} {'transformers':>13s} {'ours / transformers':>20s}")
    for key, ours in results["ours"].items():
        theirs = results["transformers"][key]
        print(f"{key:45s} {ours:10.1f} {theirs:13.1f} {ours / theirs:20.2f}")


if __name__ == "__main__":
    main()
