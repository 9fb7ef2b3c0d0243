"""What the Python benchmarks share, on the standard library alone (they run under the engine's venv, Debian's
python3 and .venv-bench, which has no torch): SmolLM2-135M's config.json, the shape benchmarked with random weights,
and the clock that times a run in wall-clock and process CPU seconds. A benchmark run as a script imports it as a
sibling (its folder is first on sys.path).
"""

from __future__ import annotations

import time

# SmolLM2-135M(-Instruct)'s config.json.
SMOLLM2_135M = {
    "model_type": "llama",
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
    "eos_token_id": 2,
    "bos_token_id": 1,
}


class Clock:
    """Wall-clock and process CPU seconds since start: on a shared machine CPU time is what a 1-thread run costs."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def rates(self, items: float) -> tuple:
        return items / (time.perf_counter() - self.wall), items / max(time.process_time() - self.cpu, 1e-9)


def best(runs) -> tuple:
    """(best wall-clock rate, best CPU-time rate) over (wall, cpu) rate pairs."""
    runs = list(runs)
    return max(r[0] for r in runs), max(r[1] for r in runs)
