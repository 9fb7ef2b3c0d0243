"""The protocol through a real `python3 -m engine` subprocess: framing, errors, streaming, cancel, TCP."""

import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

import torch

from engine.limits import Limits
from engine.lora import SUPPORTED_TARGETS
from engine.model import ModelArgs
from engine.tests.helpers import INIT, REPO, EngineProcess, make_checkpoint, train_request
from engine.tests.helpers import generate_request as gen


def train(rid: str, rows: list, loss: str, **over) -> dict:
    return {"id": rid, "op": "train_step", **train_request(rows, loss, **over)}


class TestSamplerRole(unittest.TestCase):
    def test_a_sampler_loads_a_checkpoint_without_its_adam_moments_and_refuses_the_trainers_ops(self):
        with tempfile.TemporaryDirectory() as d:
            path = make_checkpoint(os.path.join(d, "base"), "llama", std=0.1)
            trainer, sampler = EngineProcess(), EngineProcess("--role", "sampler")
            try:
                self.assertEqual(sampler.ready["role"], "sampler")
                for e in (trainer, sampler):
                    self.assertNotIn("error", e.call({"id": "l", "op": "load_base", "base": "b", "path": path}))
                trainer.call({"id": "a", "op": "ensure_adapter", "adapter": "a", "base": "b", "init": INIT})
                rows = [{"tokens": [1, 5, 6, 7], "mask": [0, 1, 1, 1], "advantages": [0, 1, 1, 1]}]
                trainer.call({"id": "t", "op": "train_step", **train_request(rows, "rl")})
                saved = trainer.call({"id": "s", "op": "save_adapter", "adapter": "a", "path": os.path.join(d, "ck")})
                self.assertIn("optimizer.pt", saved["files"])
                loaded = sampler.call(
                    {"id": "e", "op": "ensure_adapter", "adapter": "a", "base": "b", "path": os.path.join(d, "ck")}
                )
                self.assertTrue(loaded["loaded"])
                memory = sampler.call({"id": "m", "op": "stats"})["memory"]
                self.assertGreater(memory["adapters_bytes"], 0)
                self.assertEqual(memory["optimizer_bytes"], 0)
                refused = sampler.call({"id": "t2", "op": "train_step", **train_request(rows, "rl")})
                self.assertEqual(refused["error"]["code"], "bad_request")
                self.assertIn("sampler", refused["error"]["message"])
            finally:
                trainer.close()
                sampler.close()


class TestServer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.model_path = make_checkpoint(os.path.join(cls.dir.name, "base"), "qwen2", std=0.1)
        cls.e = EngineProcess("--max-adapters", "4")
        reply = cls.e.call({"id": "load", "op": "load_base", "base": "b", "path": cls.model_path})
        assert "error" not in reply, reply

    @classmethod
    def tearDownClass(cls):
        cls.e.close()
        cls.dir.cleanup()

    def call(self, msg):
        return self.e.call(msg)

    def assertError(self, reply, code, pattern="."):
        self.assertTrue(reply["done"])
        self.assertIn("error", reply, reply)
        self.assertEqual(reply["error"]["code"], code, reply)
        self.assertRegex(reply["error"]["message"], pattern)

    def test_ready_and_load_base(self):
        r = self.e.ready
        self.assertEqual((r["id"], r["event"], r["device"], r["dtype"]), (None, "ready", "cpu", "float32"))
        self.assertGreater(r["matmul_gflops"], 0)
        # What it runs, announced from its own tables (the server validates against this, never a copy).
        self.assertIn("LlamaForCausalLM", r["supports"]["architectures"])
        self.assertEqual(r["supports"]["lora_targets"], list(SUPPORTED_TARGETS))
        self.assertEqual(r["supports"]["losses"]["train_step"], ["rl", "sft"])
        self.assertIn("gspo", r["supports"]["losses"]["forward_backward"])
        self.assertEqual(r["supports"]["dtypes"], ["float32", "bfloat16", "float16"])
        again = self.call({"id": "l2", "op": "load_base", "base": "b", "path": self.model_path})
        self.assertEqual((again["vocab_size"], again["context_length"], again["eos_token_ids"]), (101, 256, [2]))
        self.assertGreater(again["num_parameters"], 0)
        memory = self.call({"id": "m", "op": "stats"})["memory"]
        self.assertEqual(memory["weights_bytes"], 4 * again["num_parameters"])  # fp32
        self.assertGreater(memory["kv_cache_bytes"], 0)
        self.assertFalse(any(key.startswith("device_") for key in memory))  # the CUDA allocator's figures only there

    def test_garbage_gets_error_replies_and_the_engine_survives(self):
        self.e.send_raw(struct.pack(">I", 5) + b"{nope")
        self.assertError(self.e.next(), "bad_request", "JSON")
        self.e.send_raw(struct.pack(">I", 4) + b"\xff\xfe\xfd\xfc")
        self.assertError(self.e.next(), "bad_request")
        self.e.send({"op": "stats"})
        self.assertError(self.e.next(), "bad_request", "id")
        self.e.send({"id": 7, "op": "stats"})
        self.assertError(self.e.next(), "bad_request", "id")
        self.e.send_raw(struct.pack(">I", 2) + b"[]")
        self.assertError(self.e.next(), "bad_request")
        self.assertError(self.call({"id": "u", "op": "fly"}), "bad_request", "fly")
        no_base = gen("m", prompt=[1])
        del no_base["base"]
        self.assertError(self.call(no_base), "bad_request", "^generate: missing field base$")
        self.assertError(self.call(gen("nf", base="zz", prompt=[1])), "not_found")
        self.assertError(self.call(gen("na", adapter="zz", prompt=[1])), "not_found")
        self.assertError(self.call(gen("v", prompt=[1, 999])), "bad_request", "vocab")
        self.assertError(self.call(gen("t", prompt=[1], top_p="x")), "bad_request", "top_p")
        self.assertError(self.call({"id": "p", "op": "load_base", "base": "c", "path": "/nonexistent"}), "not_found")
        self.assertError(
            self.call(
                {
                    "id": "ap",
                    "op": "forward",
                    "base": "b",
                    "adapter": "new",
                    "adapter_path": "/nonexistent",
                    "rows": [{"tokens": [1, 2], "segment_ids": [0, 0]}],
                }
            ),
            "not_found",
        )
        self.assertError(
            self.call(
                {"id": "f", "op": "forward", "base": "b", "adapter": None, "rows": [{"tokens": [], "segment_ids": []}]}
            ),
            "bad_request",
            "rows\\[0\\].tokens",
        )
        self.assertError(
            self.call(train("ts", [{"tokens": [1, 2], "mask": [0, 1], "advantages": [0, 1]}], "rl", adapter="zz")),
            "not_found",
        )
        # Two frames in one write, and one frame split over two writes.
        a = json.dumps({"id": "s1", "op": "stats"}).encode()
        b = json.dumps({"id": "s2", "op": "stats"}).encode()
        self.e.send_raw(struct.pack(">I", len(a)) + a + struct.pack(">I", len(b)) + b[:3])
        time.sleep(0.05)
        self.e.send_raw(b[3:])
        self.assertEqual(self.e.until_done("s1")[-1]["running"], 0)
        self.assertIn("rss_bytes", self.e.until_done("s2")[-1])

    def test_generate_stream_and_cancel(self):
        self.e.send(gen("g1", prompt=[5, 6, 7], max_tokens=5, n=2, seed=1, logprobs=1, prompt_logprobs=0))
        got = self.e.until_done("g1")
        self.assertEqual(got[0]["type"], "prompt")
        self.assertIsNone(got[0]["prompt_logprobs"][0])
        toks = [f for f in got if f.get("type") == "tokens"]
        self.assertEqual(sum(len(f["tokens"]) for f in toks), 10)
        self.assertTrue(all(len(f["top_logprobs"][0]) == 1 for f in toks))
        fins = [f for f in got if f.get("type") == "finish"]
        self.assertEqual(sorted(f["seq"] for f in fins), [0, 1])
        self.assertEqual(got[-1], {"id": "g1", "done": True, "prompt_tokens": 3, "cached_tokens": 0})
        self.assertTrue(all(not f["done"] for f in got[:-1]))

        self.e.send(gen("long", prompt=[5], ignore_eos=True))
        first = self.e.next()
        self.assertEqual((first["id"], first["type"]), ("long", "tokens"))
        self.e.send({"id": "c", "op": "cancel", "target": "long"})
        rest = []
        cancel_reply = None
        while True:
            f = self.e.next()
            if f["id"] == "c":
                cancel_reply = f
            else:
                rest.append(f)
                if f["done"]:
                    break
        if cancel_reply is None:
            cancel_reply = self.e.until_done("c")[-1]
        self.assertEqual(cancel_reply["cancelled"], True)
        self.assertError(rest[-1], "cancelled")
        self.assertLess(len(rest), 200)  # it stopped long before the 255-token context was used
        self.assertEqual(self.call({"id": "c2", "op": "cancel", "target": "long"})["cancelled"], False)
        stats = self.call({"id": "st", "op": "stats"})
        self.assertEqual((stats["running"], stats["waiting"]), (0, 0))

    def test_adapters_over_the_protocol(self):
        init = {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"], "seed": 3}
        self.assertEqual(
            self.call({"id": "e1", "op": "ensure_adapter", "base": "b", "adapter": "x", "init": init})["loaded"], True
        )
        self.assertEqual(
            self.call({"id": "e2", "op": "ensure_adapter", "base": "b", "adapter": "x", "init": init})["loaded"], False
        )
        for bad, field in (
            ({"rank": 0}, "init.rank"),
            ({"rank": "8"}, "init.rank"),
            ({"target_modules": ["lm_head"]}, "lm_head"),
            ({"alpha": None}, "init.alpha"),
            ({"seed": 1.5}, "init.seed"),
        ):
            self.assertError(
                self.call({"id": "e3", "op": "ensure_adapter", "base": "b", "adapter": "y", "init": {**init, **bad}}),
                "bad_request",
                field,
            )
        row = {
            "tokens": [3, 4, 5, 6, 7],
            "segment_ids": [0] * 5,
            "mask": [0, 1, 1, 1, 1],
            "weights": [1] * 5,
            "advantages": [0, 1, 1, 1, 1],
            "logprobs": [None] * 5,
        }
        m = self.call(train("tr", [row], "rl", adapter="x", optimizer={"learning_rate": 1e-2}))["metrics"]
        self.assertTrue(all(isinstance(v, (int, float)) for v in m.values()))
        bad = self.call(train("tr2", [row], "rl", adapter="x", loss_config={"advantage_balance": 0.3}))
        self.assertError(bad, "bad_request", "advantage_balance")
        folder = os.path.join(self.dir.name, "ckpt")
        saved = self.call({"id": "sv", "op": "save_adapter", "adapter": "x", "path": folder})
        self.assertEqual(sorted(saved["files"]), ["adapter_config.json", "adapter_model.safetensors", "optimizer.pt"])
        check = {"id": "ck", "op": "check_adapter", "path": folder, "base_path": self.model_path}
        self.assertEqual(self.call(check)["problems"], [])  # what it saved is what an import accepts
        other = make_checkpoint(os.path.join(self.dir.name, "narrow"), "qwen2", hidden_size=32, intermediate_size=48)
        problems = self.call({**check, "base_path": other})["problems"]
        self.assertTrue(problems and all(p["loc"][0] == "adapter_model.safetensors" for p in problems), problems)
        self.assertRegex(problems[0]["msg"], r"the base model and rank 4 need \[4,32\]")
        self.assertError(self.call({**check, "base_path": self.dir.name}), "not_found", "config.json")
        fwd_rows = [{"tokens": row["tokens"], "segment_ids": row["segment_ids"]}]
        before = self.call({"id": "f1", "op": "forward", "base": "b", "adapter": "x", "rows": fwd_rows})
        self.assertEqual(self.call({"id": "d", "op": "drop_adapter", "adapter": "x"})["dropped"], True)
        after = self.call(
            {"id": "f2", "op": "forward", "base": "b", "adapter": "x", "adapter_path": folder, "rows": fwd_rows}
        )
        self.assertEqual(before["logprobs"], after["logprobs"])
        self.assertIsNone(after["logprobs"][0][0])
        stats = self.call({"id": "st", "op": "stats"})
        self.assertIn("x", stats["adapters"])
        self.assertGreater(stats["memory"]["adapters_bytes"], 0)

    def test_stats_answered_while_training(self):
        self.call({"id": "e", "op": "ensure_adapter", "base": "b", "adapter": "busy", "init": INIT})
        rows = [
            {"tokens": list(range(3, 99)) * 2, "mask": [0] + [1] * 191, "advantages": [1.0] * 192} for _ in range(64)
        ]
        self.e.send(train("heavy", rows, "sft", adapter="busy"))
        t0 = time.monotonic()
        self.e.send({"id": "quick", "op": "stats"})
        order = []
        while len(order) < 2:
            f = self.e.next()
            if f["id"] in ("heavy", "quick"):
                order.append((f["id"], time.monotonic() - t0))
        self.assertEqual(order[0][0], "quick", order)
        self.assertLess(order[0][1], 1.0)

    def test_generation_goes_on_beside_a_train_step_and_later_ops_keep_their_order(self):
        self.call({"id": "e2", "op": "ensure_adapter", "base": "b", "adapter": "beside", "init": INIT})
        rows = [
            {"tokens": list(range(3, 99)) * 2, "mask": [0] + [1] * 191, "advantages": [1.0] * 192} for _ in range(64)
        ]
        self.e.send(train("train", rows, "sft", adapter="beside"))
        self.e.send(gen("gen", prompt=[3, 4, 5], max_tokens=4, temperature=0))
        self.e.send({"id": "drop", "op": "drop_adapter", "adapter": "beside"})  # must wait for the step
        order = []
        while len(order) < 3:
            f = self.e.next(timeout=120)
            if f["id"] in ("train", "drop", "gen") and f["done"]:
                self.assertNotIn("error", f)
                order.append(f["id"])
        self.assertEqual(order, ["gen", "train", "drop"])


class TestFlags(unittest.TestCase):
    def test_dtype_flag_sets_the_default_of_loaded_bases_and_bad_flags_are_refused(self):
        with tempfile.TemporaryDirectory() as d:
            path = make_checkpoint(os.path.join(d, "base"), "llama", std=0.1)
            e = EngineProcess("--dtype", "bfloat16")
            try:
                self.assertEqual(e.ready["dtype"], "bfloat16")
                self.assertNotIn("error", e.call({"id": "l", "op": "load_base", "base": "b", "path": path}))
                self.assertEqual(e.call({"id": "s", "op": "stats"})["dtype"], "bfloat16")
                # Loading the same base again in another dtype is refused: one dtype per loaded base.
                again = e.call({"id": "l2", "op": "load_base", "base": "b", "path": path, "dtype": "float32"})
                self.assertRegex(again["error"]["message"], "already loaded .* torch.bfloat16")
            finally:
                e.close()
        for flag, value in (("--dtype", "int8"), ("--threads", "0")):
            bad = subprocess.run(
                [sys.executable, "-m", "engine", flag, value],
                cwd=REPO,
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                timeout=60,
            )
            self.assertNotEqual(bad.returncode, 0)
            self.assertIn(flag, bad.stderr)


class TestTcp(unittest.TestCase):
    def test_tcp_mode(self):
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine", "--tcp", "127.0.0.1:0"],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            port = None
            deadline = time.time() + 60
            while port is None and time.time() < deadline:
                line = proc.stderr.readline().decode()
                m = re.search(r"listening on [\d.]+:(\d+)", line)
                if m:
                    port = int(m.group(1))
            self.assertIsNotNone(port)
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                f = s.makefile("rb")

                def frame():
                    (n,) = struct.unpack(">I", f.read(4))
                    return json.loads(f.read(n))

                self.assertEqual(frame()["event"], "ready")
                raw = json.dumps({"id": "1", "op": "stats"}).encode()
                s.sendall(struct.pack(">I", len(raw)) + raw)
                reply = frame()
                self.assertEqual((reply["id"], reply["done"], reply["bases"]), ("1", True, []))
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            proc.stderr.close()

    def test_refuses_to_listen_beyond_loopback_without_a_secret(self):
        env = {k: v for k, v in os.environ.items() if k != "ENGINE_SECRET"}
        done = subprocess.run(
            [sys.executable, "-m", "engine", "--tcp", "0.0.0.0:0"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=120,
        )
        self.assertNotEqual(done.returncode, 0)
        self.assertIn(b"without ENGINE_SECRET", done.stderr)


class TestLimits(unittest.TestCase):
    ARGS = ModelArgs(
        family="llama",
        vocab_size=100,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        max_position_embeddings=1024,
    )
    PER_TOKEN = 2 * 2 * 2 * 16 * 4  # k and v, layers, kv heads, head_dim, fp32 bytes

    def test_without_a_budget_the_model_and_flags_decide(self):
        self.assertEqual(Limits(max_num_seqs=8).sized(self.ARGS, torch.float32), (1024, 8, 1024))
        self.assertEqual(Limits(max_model_len=4096).sized(self.ARGS, torch.float32), (1024, 32, 1024))
        self.assertEqual(Limits(max_model_len=300).sized(self.ARGS, torch.float32), (300, 32, 300))

    def test_the_kv_budget_caps_full_length_sequences_then_length(self):
        budget = Limits(kv_cache_memory_bytes=self.PER_TOKEN * 1024 * 3 + 5)
        self.assertEqual(budget.sized(self.ARGS, torch.float32), (1024, 3, 0))  # 3 full-length sequences fit
        self.assertEqual(budget.sized(self.ARGS, torch.bfloat16), (1024, 6, 0))  # half the bytes per position
        self.assertEqual(
            Limits(max_num_seqs=2, kv_cache_memory_bytes=self.PER_TOKEN * 1024 * 3).sized(self.ARGS, torch.float32),
            (1024, 2, 1024),
        )  # what the batch leaves goes to the prefix cache
        tight = Limits(kv_cache_memory_bytes=self.PER_TOKEN * 500)
        self.assertEqual(tight.sized(self.ARGS, torch.float32), (500, 1, 0))
        with self.assertRaises(ValueError):
            Limits(kv_cache_memory_bytes=self.PER_TOKEN).sized(self.ARGS, torch.float32)


if __name__ == "__main__":
    unittest.main()
