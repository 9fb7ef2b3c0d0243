"""The trainer's memory and its process group, measured on real engine processes; prints figures and ratios, asserts
nothing (timings on a shared machine are noisy: compare the ratios, measured side by side in one run).

    .venv/bin/python bench/trainer_group.py memory   # example 1's six steps: trainer RSS, an older engine vs this one
    .venv/bin/python bench/trainer_group.py ranks    # one RL step on 1 rank vs 2 ranks (gloo on CPU)

`memory` replays what example 1 (examples/rl_capitals_art.py, six steps) asks of the trainer engine, op for op as the
server sends it: per step the model's adapter opened from the last checkpoint, 48 scored rollouts of ~47 tokens packed
into rows of 2048 (one train_step each), the trained-token `forward`, the checkpoint saved (and, by this checkout's
trainer, the adapter dropped). It runs the engine of `--before` (a git revision: by default 41ca259, the last before
the trainer's memory was trimmed and accounted for) and this checkout's trainer (`--role trainer`) on SmolLM2-135M in
fp32 and prints each one's RSS after every step against what it must hold: the base's weights, the adapter and its
Adam moments.

`ranks` runs the same RL step (rows of 2048 tokens) on a trainer of one rank (all threads) and on a group of two
(torch's launcher, a share of the threads each): step seconds, RSS per rank, the base's bytes per rank, and the
step's peak above its start per rank.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import torch  # noqa: E402

from engine.tests.helpers import INIT, launcher, train_request  # noqa: E402
from engine.transport import encode_frame  # noqa: E402

SMOLLM2 = os.path.join(REPO, "models", "smollm2-135m-instruct")
BEFORE = "41ca259"  # the last revision before the trainer's memory was trimmed and accounted for


class Engine:
    """An engine process (from `root`) driven over stdio, one request at a time."""

    def __init__(self, root: str, args: list[str], ranks: int = 1):
        cmd = (launcher(ranks) if ranks > 1 else [sys.executable]) + ["-m", "engine", *args]
        self.proc = subprocess.Popen(cmd, cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sys.stderr)
        self.ready = self._read()
        self.n = 0

    def _read(self) -> dict:
        head = self.proc.stdout.read(4)
        if len(head) < 4:
            raise RuntimeError("the engine exited")
        return json.loads(self.proc.stdout.read(struct.unpack(">I", head)[0]))

    def call(self, op: str, **fields) -> dict:
        self.n += 1
        self.proc.stdin.write(encode_frame({"id": str(self.n), "op": op, **fields}))
        self.proc.stdin.flush()
        while True:
            reply = self._read()
            if reply.get("id") == str(self.n) and reply.get("done"):
                if "error" in reply:
                    raise RuntimeError(f"{op}: {reply['error']}")
                return reply

    def pids(self) -> list[int]:
        return [r["pid"] for r in self.ready.get("ranks", [])] or [self.proc.pid]

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def rollout_rows(step: int, rollouts: int = 48, tokens: int = 47, prompt: int = 35, length: int = 2048) -> list:
    """Example 1's rollouts as the server packs them: sequences of `tokens` (the first `prompt` untrained), first-fit
    into rows of `length`, each with its sampler logprobs and advantage."""
    g = torch.Generator().manual_seed(step)
    rows, row = [], None
    for s in range(rollouts):
        if row is None or len(row["tokens"]) + tokens > length:
            row = {"tokens": [], "segment_ids": [], "mask": [], "advantages": [], "logprobs": []}
            rows.append(row)
        adv = 1.0 if s % 3 else -1.0
        row["tokens"] += torch.randint(3, 49152, (tokens,), generator=g).tolist()
        row["segment_ids"] += [s] * tokens
        row["mask"] += [0] * prompt + [1] * (tokens - prompt)
        row["advantages"] += [0.0] * prompt + [adv] * (tokens - prompt)
        row["logprobs"] += [None] * prompt + (-torch.rand(tokens - prompt, generator=g) * 3).tolist()
    return rows


def example_one(engine: Engine, scratch: str, steps: int, drops: bool) -> list[dict]:
    """Example 1's trainer ops, step by step; per step the RSS of every rank and the engine's memory report."""
    engine.call("load_base", base="smollm2", path=SMOLLM2)
    figures, last = [], None
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        engine.call("drop_adapter", adapter="job")
        source = {"path": last} if last else {"init": {**INIT, "seed": 7}}
        engine.call("ensure_adapter", adapter="job", base="smollm2", **source)
        rows = rollout_rows(step)
        for row in rows:
            msg = train_request([row], "rl", optimizer={"learning_rate": 5e-6})
            engine.call("train_step", **{**msg, "base": "smollm2", "adapter": "job"})
        forward = [{"tokens": r["tokens"], "segment_ids": r["segment_ids"]} for r in rows]
        engine.call("forward", base="smollm2", adapter="job", rows=forward)
        last = os.path.join(scratch, f"step{step}")
        engine.call("save_adapter", adapter="job", path=last)
        memory = engine.call("stats")["memory"]
        if drops:
            engine.call("drop_adapter", adapter="job")
        figures.append({"step": step, "seconds": time.perf_counter() - t0, "rss": rss(engine.pids()[0]), **memory})
        print(f"  step {step}: RSS {figures[-1]['rss'] / 2**30:.2f} GiB ({figures[-1]['seconds']:.0f} s)", flush=True)
    return figures


def revision_tree(revision: str, scratch: str) -> str:
    """The repository at `revision` (its engine and models link), for running that engine."""
    root = os.path.join(scratch, f"at-{revision}")
    os.makedirs(root)
    archive = subprocess.run(["git", "archive", revision, "engine"], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", root], input=archive.stdout, check=True)
    return root


def memory(args) -> None:
    base_args = ["--threads", str(args.threads)]
    with tempfile.TemporaryDirectory() as scratch:
        runs = {}
        for name, root, extra in (
            (f"before ({args.before})", revision_tree(args.before, scratch), []),
            ("after", REPO, ["--role", "trainer"]),
        ):
            print(f"{name}: example 1's {args.steps} steps on SmolLM2-135M", flush=True)
            engine = Engine(root, base_args + extra)
            try:
                start = rss(engine.pids()[0])
                runs[name] = (start, example_one(engine, os.path.join(scratch, name), args.steps, name == "after"))
            finally:
                engine.close()
    print("\nstep  " + "  ".join(f"{name:>22}" for name in runs))
    for i in range(args.steps):
        print(f"{i + 1:>4}  " + "  ".join(f"{figs[i]['rss'] / 2**30:>18.2f} GiB" for _, figs in runs.values()))
    for name, (start, figs) in runs.items():
        # The older engine counts the Adam moments in adapters_bytes and has no optimizer_bytes; newer ones split them.
        held = figs[-1]["weights_bytes"] + figs[-1]["adapters_bytes"] + figs[-1].get("optimizer_bytes", 0)
        print(
            f"{name}: RSS before the first job {start / 2**30:.2f} GiB, after the first step "
            f"{figs[0]['rss'] / 2**30:.2f} GiB, after the last {figs[-1]['rss'] / 2**30:.2f} GiB = "
            f"{figs[-1]['rss'] / held:.2f} x (weights + adapter + Adam moments = {held / 2**30:.2f} GiB)"
        )
    (_, before), (_, after) = runs.values()
    print(f"RATIO after / before, RSS after {args.steps} steps: {after[-1]['rss'] / before[-1]['rss']:.2f}")
    print(f"RATIO after / before, step seconds (mean): {mean_seconds(after) / mean_seconds(before):.2f}")


def mean_seconds(figs: list[dict]) -> float:
    return sum(f["seconds"] for f in figs) / len(figs)


def ranks(args) -> None:
    rows = rollout_rows(1, rollouts=args.rollouts)
    msg = {**train_request(rows, "rl", optimizer={"learning_rate": 5e-6}), "base": "smollm2", "adapter": "a"}
    results = {}
    for n in (1, 2):
        engine = Engine(REPO, ["--role", "trainer", "--threads", str(max(1, args.threads // n))], ranks=n)
        try:
            engine.call("load_base", base="smollm2", path=SMOLLM2)
            engine.call("ensure_adapter", adapter="a", base="smollm2", init={**INIT, "seed": 1})
            engine.call("train_step", **msg)  # warm-up
            seconds = []
            for _ in range(args.repeats):
                seconds.append(engine.call("train_step", **msg)["metrics"]["step_seconds"])
            stats = engine.call("stats")
            results[n] = {"seconds": min(seconds), "ranks": stats["ranks"]}
            rank0 = stats["ranks"][0]
            print(
                f"{n} rank(s): step {min(seconds):.1f} s (best of {args.repeats}), rank 0 RSS "
                f"{rank0['rss_bytes'] / 2**30:.2f} GiB, base {rank0['memory']['weights_bytes'] / 2**20:.0f} MiB, "
                f"step peak {rank0['memory']['activations_peak_bytes'] / 2**20:.0f} MiB",
                flush=True,
            )
        finally:
            engine.close()
    one, two = results[1]["ranks"][0], results[2]["ranks"]
    print(f"RATIO 2 ranks / 1 rank, step seconds: {results[2]['seconds'] / results[1]['seconds']:.2f}")
    for kind, get in (
        ("RSS", lambda r: r["rss_bytes"]),
        ("base weights", lambda r: r["memory"]["weights_bytes"]),
        ("adapter + moments", lambda r: r["memory"]["adapters_bytes"] + r["memory"]["optimizer_bytes"]),
        ("step peak", lambda r: r["memory"]["activations_peak_bytes"]),
    ):
        print(f"RATIO 2 ranks / 1 rank, {kind} per rank: " + ", ".join(f"{get(r) / get(one):.2f}" for r in two))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("memory", help="example 1's six steps: trainer RSS, an older engine vs this one")
    m.add_argument("--before", default=BEFORE, help="the git revision whose engine is 'before'")
    m.add_argument("--steps", type=int, default=6)
    r = sub.add_parser("ranks", help="one RL step on 1 rank vs 2 ranks")
    r.add_argument("--rollouts", type=int, default=96, help="example 1's rollouts of ~47 tokens (96: two full rows)")
    r.add_argument("--repeats", type=int, default=2)
    for p in (m, r):
        p.add_argument("--threads", type=int, default=2, help="CPU threads of the trainer (shared by its ranks)")
    args = ap.parse_args()
    memory(args) if args.what == "memory" else ranks(args)


if __name__ == "__main__":
    main()
