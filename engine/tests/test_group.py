"""The trainer as a process group: a trainer of two ranks (started by torch's launcher, gloo on CPU, the base sharded
with FSDP2) answers every training op as a trainer of one rank does, and a group that cannot start says why instead
of hanging.

Both trainers run side by side on the same requests, in fp32, and must agree within 1e-5 relative: every figure a step
reports, and the new adapter's weights and Adam moments as a whole. Per tensor they agree within 1e-4: Adam divides
each gradient element by its own magnitude, so an element within rounding of zero (summed in another order across two
ranks) can move its weight by up to twice the learning rate either way, and the next step's gradient with it.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import tempfile
import time
import unittest

import torch

from engine import weights as W
from engine.model import Transformer, load_args
from engine.tests.families import write_family
from engine.tests.helpers import INIT, EngineProcess, make_checkpoint, train_request

REL = 1e-5
ADAM = {"learning_rate": 0.01, "beta1": 0.9, "beta2": 0.95, "eps": 1e-3, "weight_decay": 0.1, "grad_clip_norm": 0.5}
OPTIMIZER = {"learning_rate": 0.01, "betas": [0.9, 0.95], "weight_decay": 0.1, "max_grad_norm": 0.5}


def packed_row(segments: list[int], seed: int, vocab: int = 101) -> dict:
    """A row of several sequences (one segment each): a prompt of 3 tokens, then trained tokens with an advantage."""
    g = torch.Generator().manual_seed(seed)
    row = {"tokens": [], "segment_ids": [], "mask": [], "advantages": [], "logprobs": []}
    for s, n in enumerate(segments):
        adv = 0.5 + s % 3  # positive: the loss sums without cancelling, so its relative error means something
        row["tokens"] += torch.randint(3, vocab, (n,), generator=g).tolist()
        row["segment_ids"] += [s] * n
        row["mask"] += [0] * 3 + [1] * (n - 3)
        row["advantages"] += [0.0] * 3 + [adv] * (n - 3)
        row["logprobs"] += [None] * 3 + (-(torch.rand(n - 3, generator=g) * 4 + 0.5)).tolist()
    return row


class TwoRanksAsOne(unittest.TestCase):
    family: str | None = None  # None: our implementation (a tiny qwen2); else a family transformers' code runs

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        if cls.family is None:
            cls.folder = make_checkpoint(os.path.join(cls.tmp.name, "base"), num_hidden_layers=3)
        else:
            cls.folder = write_family(cls.family, os.path.join(cls.tmp.name, "base"), seed=0)
        cls.one = EngineProcess("--role", "trainer")
        # The group's batches of 15 tokens or more recompute their blocks in backward, its smaller ones do not (one
        # rank recomputing while the other does not), which must change no result.
        budget = []
        if cls.family is None:
            per_token = Transformer.on_meta(load_args(cls.folder), torch.float32, "cpu").activation_bytes_per_token()
            budget = ["--activation-memory-bytes", str(15 * per_token)]
        cls.two = EngineProcess("--role", "trainer", *budget, ranks=2)
        cls.both({"op": "load_base", "base": "b", "path": cls.folder})

    @classmethod
    def tearDownClass(cls):
        cls.one.close()
        cls.two.close()
        cls.tmp.cleanup()

    @classmethod
    def both(cls, msg: dict, timeout: float = 60) -> tuple[dict, dict]:
        """The same request to each trainer at once; (one's reply, two's reply)."""
        rid = f"r{time.monotonic_ns()}"
        for engine in (cls.one, cls.two):
            engine.send({**msg, "id": rid})
        return cls.one.until_done(rid, timeout)[-1], cls.two.until_done(rid, timeout)[-1]

    def fresh(self, key: str) -> None:
        for reply in self.both({"op": "ensure_adapter", "adapter": key, "base": "b", "init": {**INIT, "seed": 3}}):
            self.assertTrue(reply.get("loaded"), reply)

    def assert_close(self, a, b, what: str) -> None:
        self.assertLessEqual(abs(a - b), REL * max(abs(a), abs(b), 1e-30), f"{what}: {a} vs {b}")

    def assert_same_adapter(self, key: str) -> None:
        """The adapters' weights and Adam moments, saved by each trainer (rank 0 writing the group's)."""
        folders = [os.path.join(self.tmp.name, f"{key}-{n}") for n in ("one", "two")]
        for engine, folder in zip((self.one, self.two), folders):
            reply = engine.call({"id": "save", "op": "save_adapter", "adapter": key, "path": folder})
            self.assertIn("adapter_model.safetensors", reply.get("files", []), reply)
        mine, theirs = (dict(W.iter_file(os.path.join(f, "adapter_model.safetensors"))) for f in folders)
        self.assertEqual(sorted(mine), sorted(theirs))
        names = sorted(mine)
        flat = [torch.cat([t[name].flatten() for name in names]) for t in (mine, theirs)]
        self.assert_tensor_close(flat[0], flat[1], "the adapter's weights")
        for name in names:  # see the docstring: per tensor, Adam's normalisation of near-zero gradients shows
            self.assert_tensor_close(mine[name], theirs[name], name, rel=10 * REL)
        moments = [torch.load(os.path.join(f, "optimizer.pt"), weights_only=True)["state"] for f in folders]
        self.assertEqual(sorted(moments[0]), sorted(moments[1]))
        for name in moments[0]:
            self.assertEqual(int(moments[0][name]["step"]), int(moments[1][name]["step"]))
        for k in ("exp_avg", "exp_avg_sq"):
            flat = [torch.cat([m[name][k].flatten() for name in sorted(m)]) for m in moments]
            self.assert_tensor_close(flat[0], flat[1], f"the adapter's {k}")
            for name in moments[0]:
                self.assert_tensor_close(moments[0][name][k], moments[1][name][k], f"{name} {k}", rel=10 * REL)

    def assert_tensor_close(self, a: torch.Tensor, b: torch.Tensor, what: str, rel: float = REL) -> None:
        self.assertEqual(a.shape, b.shape, what)
        scale = max(float(a.norm()), float(b.norm()))
        self.assertLessEqual(float((a - b).norm()), rel * scale + 1e-30, f"{what}: relative {(a - b).norm() / scale}")

    def test_the_ready_frame_and_stats_list_every_rank(self):
        self.assertEqual([r["rank"] for r in self.two.ready["ranks"]], [0, 1])
        self.assertEqual(len({r["pid"] for r in self.two.ready["ranks"]}), 2)
        self.assertEqual([r["rank"] for r in self.one.ready["ranks"]], [0])
        one, two = self.both({"op": "stats"})
        self.assertEqual([r["rank"] for r in two["ranks"]], [0, 1])
        whole = one["ranks"][0]["memory"]["weights_bytes"]
        for rank in two["ranks"]:  # each holds about half of the base (FSDP2 pads its rows to a multiple of 2)
            self.assertLess(abs(rank["memory"]["weights_bytes"] - whole / 2), 0.05 * whole, rank)
            self.assertGreater(rank["rss_bytes"], 0)
        self.assertEqual(two["memory"]["kv_cache_bytes"], 0)  # a trainer never samples

    def test_an_rl_step_with_a_kl_penalty_is_the_one_rank_step(self):
        self.fresh("rl")
        rows = [packed_row([7, 9, 5, 11, 6], seed=1), packed_row([13, 6], seed=2)]  # rank 1 gets the end of row 0
        loss = {"kl_penalty_coef": 0.3, "ppo": True}
        # Two steps chain Adam's sign-like first update: a gradient element within rounding of zero moves its weight by
        # up to 2 x lr either way, and the next gradient follows. At lr 0.01 that alone put the chains 2e-5 apart on an
        # AVX2 CPU (the first step's gradients 1e-7, the whole-row case exactly equal); at 1e-3 the rounding stays
        # below 2e-6 while a wrong gradient still moves weights by ~1e-3 each.
        optimizer = {**OPTIMIZER, "learning_rate": 1e-3}
        for _ in range(2):  # the second step starts from moments and a B that is no longer zero
            msg = {**train_request(rows, "rl", optimizer=optimizer, loss_config=loss), "adapter": "rl"}
            one, two = self.both({"op": "train_step", **msg})
            for name in ("loss", "grad_norm", "entropy", "kl_policy_ref", "probs_corr", "importance_ratio_mean"):
                self.assert_close(one["metrics"][name], two["metrics"][name], name)
            self.assertEqual(one["metrics"]["num_trainable_tokens"], two["metrics"]["num_trainable_tokens"])
        self.assert_same_adapter("rl")

    def test_an_sft_step_is_the_one_rank_step(self):
        self.fresh("sft")
        rows = [
            {k: v for k, v in packed_row([n], seed=10 + n).items() if k in ("tokens", "segment_ids", "mask")}
            for n in (9, 14, 6)
        ]
        rows.append({k: v for k, v in packed_row([5, 8, 7], seed=4).items() if k in ("tokens", "segment_ids", "mask")})
        msg = {**train_request(rows, "sft", optimizer=OPTIMIZER), "adapter": "sft"}
        one, two = self.both({"op": "train_step", **msg})
        for name in ("loss", "grad_norm", "entropy"):
            self.assert_close(one["metrics"][name], two["metrics"][name], name)
        self.assert_same_adapter("sft")

    def test_tinker_forward_backward_and_optim_step_are_the_one_rank_steps(self):
        self.fresh("tinker")
        data = []
        for n in (8, 12, 5):
            row = packed_row([n + 1], seed=20 + n)
            data.append({"tokens": row["tokens"][:-1], "target_tokens": row["tokens"][1:], "weights": [1.0] * n})
        call = {"op": "forward_backward", "base": "b", "adapter": "tinker", "loss": "cross_entropy"}
        for _ in range(2):  # gradients add up across calls until the optimizer step
            one, two = self.both({**call, "loss_config": {}, "rows": data, "backward": True})
            self.assert_close(one["loss"], two["loss"], "loss")
            for mine, theirs in zip(one["outputs"], two["outputs"], strict=True):
                for a, b in zip(mine["logprobs"], theirs["logprobs"], strict=True):
                    self.assert_close(a, b, "logprob")
        one, two = self.both({"op": "optim_step", "base": "b", "adapter": "tinker", "adam": ADAM})
        self.assert_close(one["metrics"]["grad_norm"], two["metrics"]["grad_norm"], "grad_norm")
        self.assertEqual(one["step"], two["step"])
        self.assert_same_adapter("tinker")
        # The full state round-trips: saved (the group's gathered by rank 0), loaded as another adapter (each rank
        # keeping its shards), the next step is again the one-rank step.
        for engine, name in ((self.one, "one"), (self.two, "two")):
            folder = os.path.join(self.tmp.name, f"state-{name}")
            saved = engine.call({"id": "ss", "op": "save_state", "adapter": "tinker", "path": folder})
            self.assertIn("training_state.json", saved.get("files", []), saved)
            loaded = engine.call({"id": "ls", "op": "load_state", "base": "b", "adapter": "resumed", "path": folder})
            self.assertEqual(loaded.get("step"), 1, loaded)
        self.both({**call, "adapter": "resumed", "loss_config": {}, "rows": data, "backward": True})
        one, two = self.both({"op": "optim_step", "base": "b", "adapter": "resumed", "adam": ADAM})
        self.assert_close(one["metrics"]["grad_norm"], two["metrics"]["grad_norm"], "grad_norm after resuming")
        self.assertEqual((one["step"], two["step"]), (2, 2))
        self.assert_same_adapter("resumed")

    def test_forward_gives_the_one_rank_logprobs(self):
        rows = [{"tokens": r["tokens"], "segment_ids": r["segment_ids"]} for r in (packed_row([6, 9, 4], seed=5),)]
        one, two = self.both({"op": "forward", "base": "b", "adapter": None, "rows": rows})
        for a, b in zip(one["logprobs"][0], two["logprobs"][0], strict=True):
            self.assertEqual(a is None, b is None)
            if a is not None:
                self.assert_close(a, b, "logprob")

    def test_a_refused_request_leaves_the_group_working(self):
        one, two = self.both({"op": "optim_step", "base": "b", "adapter": "nobody", "adam": ADAM})
        self.assertEqual(one["error"]["code"], "not_found")
        self.assertEqual(two["error"], one["error"])
        rid = "gen"
        self.two.send({"id": rid, "op": "generate", "base": "b", "adapter": None, "prompt": [1, 2]})
        self.assertIn("trainer", self.two.until_done(rid)[-1]["error"]["message"])
        one, two = self.both({"op": "stats"})
        self.assertEqual(len(two["ranks"]), 2)


@unittest.skipIf(importlib.util.find_spec("transformers") is None, "transformers is not installed")
class TwoRanksAsOneOnTransformers(TwoRanksAsOne):
    """The same on a base our implementation does not run (Qwen3-MoE: transformers' modeling code, its experts
    adapted), which FSDP2 shards by the blocks it lists, as ours."""

    family = "qwen3_moe"


class TheGroupEnds(unittest.TestCase):
    """A trainer group stops as one process does: when rank 0's input closes every rank leaves the group and the
    launcher exits 0, so an operator's other nodes end with it instead of reporting a failed rank."""

    def test_every_rank_leaves_and_the_launcher_succeeds(self):
        # A rank that exits with gloo's connections open aborts about one time in three: four ends in a row show it.
        with tempfile.TemporaryDirectory() as tmp:
            folder = make_checkpoint(os.path.join(tmp, "base"), num_hidden_layers=2)
            for end in range(1, 5):
                self.start_use_and_end(folder, end)

    def start_use_and_end(self, folder: str, end: int) -> None:
        engine = EngineProcess("--role", "trainer", ranks=2)
        self.assertEqual(engine.ready.get("event"), "ready", engine.ready)
        self.assertTrue(engine.call({"id": "b", "op": "load_base", "base": "b", "path": folder}).get("done"))
        rows = [packed_row([6, 5], seed=end)]
        reply = engine.call({"id": "f", "op": "forward", "base": "b", "adapter": None, "rows": rows})
        self.assertEqual(len(reply["logprobs"]), 1, reply)
        code = engine.close()
        self.assertEqual(code, 0, f"end {end}: exit {code}\n" + "".join(engine.stderr_lines[-12:]))
        self.assertFalse([line for line in engine.stderr_lines if "terminate called" in line], f"end {end}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StartUpFailures(unittest.TestCase):
    """A group that cannot start here ends its start-up with a frame saying why, in bounded time."""

    def failed(self, engine: EngineProcess, within: float) -> str:
        t0 = time.monotonic()
        try:
            frame = engine.ready
            self.assertEqual(frame.get("event"), "failed", frame)
            self.assertNotEqual(engine.proc.wait(timeout=within), 0)  # then the process ends, failed
            self.assertLess(time.monotonic() - t0, within)
            return frame["error"]["message"]
        finally:
            engine.close()

    def test_more_ranks_than_gpus(self):
        message = self.failed(EngineProcess("--role", "trainer", "--device", "cuda", ranks=2), within=60)
        self.assertIn("need 2 CUDA devices", message)

    def test_more_cpu_ranks_than_cores(self):
        env = {"RANK": "0", "WORLD_SIZE": "64", "LOCAL_WORLD_SIZE": "64", "MASTER_ADDR": "127.0.0.1"}
        engine = EngineProcess("--role", "trainer", "--device", "cpu", env={**env, "MASTER_PORT": str(free_port())})
        message = self.failed(engine, within=30)
        self.assertRegex(message, r"64 trainer ranks on this node's \d+ CPU cores")

    def test_a_rendezvous_that_never_forms(self):
        env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
        t0 = time.monotonic()
        engine = EngineProcess("--role", "trainer", "--dist-timeout", "3", env={**env, "MASTER_PORT": str(free_port())})
        message = self.failed(engine, within=30)
        self.assertIn("did not form within 3 s", message)
        self.assertLess(time.monotonic() - t0, 60)


if __name__ == "__main__":
    unittest.main()
