"""One request's broken weights never reach another's tokens.

A NaN (or +Inf, or 1e38) adapter shares the batch with the base model and another adapter: the other rows'
logprobs are bit-identical to the same batch without it at admission, and to the same batch with its weights left
finite when they turn bad mid-decode; its request fails alone with `non_finite` and emits nothing from bad logits;
the cache slots it used serve later requests unchanged. Broken values are refused at load (unless the engine runs
with --skip-adapter-value-check, which these tests use to get one resident) and at save, and a training step that
would produce them fails as `diverged` with the adapter as it was.
"""

import os
import re
import tempfile
import unittest

import torch

from engine import lora as L
from engine import steps
from engine import weights as W
from engine.generate import Scheduler, SchedulerConfig
from engine.model import ForwardContext
from engine.peft import load_peft
from engine.tests.helpers import EngineProcess, generate_request, lora, make_checkpoint, optimizer, parse_rows
from engine.tests.test_generate import EOS, Run
from engine.tests.test_lora import randomize
from engine.train import AdamW, TrainingDiverged, train_step

DOWN0 = "model.layers.0.mlp.down_proj"
BAD_VALUES = (float("nan"), float("inf"), 1e38)


def poison(adapter: L.Adapter, value: float = float("nan")) -> L.Adapter:
    """The adapter first found corrupting other tenants' rows: the first 4 floats of layer 0's down_proj lora_A set to
    `value` (a new version)."""
    with torch.no_grad():
        adapter.A[DOWN0].view(-1)[:4] = value
    adapter.version += 1
    return adapter


def greedy(prompt, adapter=None, max_tokens=10) -> Run:
    return Run(prompt, adapter, temperature=0, max_tokens=max_tokens, logprobs=2, ignore_eos=True)


class TestIsolation(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from engine.tests.helpers import TempModel

        cls.tm = TempModel("qwen3", std=0.15)
        cls.model, cls.args = cls.tm.model, cls.tm.args
        cls.other = randomize(L.new_adapter("other", "b", cls.args, lora(seed=1), "cpu"), 11, 0.2)

    @classmethod
    def tearDownClass(cls):
        cls.tm.dir.cleanup()

    def adapter(self, key: str, seed: int) -> L.Adapter:
        return randomize(L.new_adapter(key, "b", self.args, lora(rank=4, seed=seed), "cpu"), seed, 0.2)

    def sched(self) -> Scheduler:
        # With a prefix cache: a prompt whose logits were not finite must not leave its KV there.
        return Scheduler(self.model, [EOS], SchedulerConfig(max_len=256, prefix_cache_tokens=512))

    def run_all(self, joins, on_step=None, max_steps=300):
        """joins: [(step, Run)], submitted at that step; on_step(step) runs before each step."""
        sched, pending, step = self.sched(), sorted(joins, key=lambda j: j[0]), 0
        self.last = sched
        while pending or sched.has_work():
            while pending and pending[0][0] <= step:
                sched.submit(pending.pop(0)[1].req)
            if on_step is not None:
                on_step(step)
            sched.step()
            step += 1
            self.assertLess(step, max_steps)
        # Every sequence zeroed what it left behind: the cache holds nothing once all are gone.
        self.assertFalse(bool(sched.cache.k.any()) or bool(sched.cache.v.any()))
        return sched

    def assertSameOutput(self, a: Run, b: Run):
        self.assertEqual(a.result, b.result)
        self.assertEqual(a.tokens, b.tokens)
        self.assertEqual(a.logprobs, b.logprobs)  # bit for bit: float lists compare exactly

    def assertFailedNonFinite(self, run: Run):
        self.assertIsInstance(run.result.get("error"), L.NonFinite, run.result)
        self.assertRegex(str(run.result["error"]), "not finite")

    def test_lora_rows_never_read_another_adapters_weights(self):
        def logits(rows, ads):
            t = torch.tensor(rows)
            with torch.no_grad():
                return self.model.logits(
                    self.model(t, ForwardContext.packed(torch.zeros_like(t)), L.LoraBatch(ads, torch.float32, "cpu"))
                )

        base_row, other_row, bad_row = [3, 4, 5], [6, 7, 8], [9, 10, 11]
        clean = logits([base_row, other_row], [None, self.other])
        for value in BAD_VALUES:
            bad = poison(self.adapter(f"bad{value}", 5), value)
            mixed = logits([base_row, other_row, bad_row], [None, self.other, bad])
            self.assertTrue(torch.equal(mixed[:2], clean), value)
            # 1e38 need not overflow (RMSNorm rescales it): garbage, but finite and its own row's alone.
            self.assertEqual(bool(torch.isfinite(mixed[2]).all()), value == 1e38, value)
            first = logits([bad_row, base_row, other_row], [bad, None, self.other])
            self.assertTrue(torch.equal(first[1:], clean), value)

    def test_a_nan_request_fails_alone_at_admission_and_its_slot_is_clean_for_the_next(self):
        long_prompt = list(range(3, 43))

        def runs():
            return {
                "base": greedy(long_prompt, None, 24),
                "other": greedy([7, 8, 9, 10, 11, 12, 13, 14], self.other, 24),
                "after": greedy([20, 21, 22, 23, 24], None, 12),
            }

        without = runs()
        self.run_all([(0, without["base"]), (0, without["other"]), (4, without["after"])])
        bad = poison(self.adapter("bad", 6))
        with_bad = runs()
        # Longer than `after`'s prompt (its slot holds NaN past it) and than the prefix cache's 32-token minimum.
        nan_run = greedy(list(range(50, 90)), bad, 12)
        self.run_all([(0, with_bad["base"]), (0, with_bad["other"]), (2, nan_run), (4, with_bad["after"])])
        self.assertFailedNonFinite(nan_run)
        kept = [tokens for tokens, _ in self.last.prefix._items.values()]
        self.assertIn(long_prompt, kept)  # a finite prompt of that length is kept...
        self.assertNotIn(nan_run.req.prompt, kept)  # ...the NaN one is not
        self.assertEqual((nan_run.tokens, nan_run.logprobs), ({}, {}))  # nothing sampled from NaN logits
        for name in without:
            self.assertSameOutput(with_bad[name], without[name])
            self.assertEqual(len(with_bad[name].tokens[0]), with_bad[name].req.params.max_tokens)

    def test_weights_turning_bad_mid_decode_fail_only_their_request(self):
        def runs(flip, flip_tokens=12):
            # The flip row's prompt is no longer than the others': a decode step attends over the longest row's span.
            return {
                "base": greedy([5, 6, 7], None, 12),
                "other": greedy([8, 9], self.other, 12),
                "after": greedy([30, 31, 32, 33], None, 8),
                "flip": greedy([40, 41], flip, flip_tokens),
            }

        def run_all(rows, on_step=None):
            self.run_all([(0, r) for k, r in rows.items() if k != "after"] + [(6, rows["after"])], on_step=on_step)

        for value in BAD_VALUES:
            flip = self.adapter("flip", 7)
            with_flip = runs(flip)
            run_all(with_flip, on_step=lambda step, flip=flip, value=value: poison(flip, value) if step == 3 else None)
            got, failed = with_flip["flip"].tokens[0], "error" in with_flip["flip"].result
            if value == 1e38:  # its own garbage, finite until it overflows (if it does): then it fails as well
                if failed:
                    self.assertFailedNonFinite(with_flip["flip"])
                self.assertGreaterEqual(len(got), 4)
            else:
                self.assertFailedNonFinite(with_flip["flip"])
                # Step 0 admits (one token) and decodes (one more), steps 1 and 2 decode: 4 tokens from finite
                # weights, none after they turned bad.
                self.assertEqual(len(got), 4)
            self.assertTrue(all(isinstance(lp, float) and lp == lp for lp in with_flip["flip"].logprobs[0]))
            # The control is the same batch with the adapter left finite, its row leaving at the step the bad one
            # failed: a batch of another size rounds differently on some CPUs' kernels (AVX-512 here), which is
            # batching, not a leak, so a batch without the row at all cannot be compared bit for bit.
            control = runs(self.adapter("flip", 7), len(got) + 1 if failed else 12)
            run_all(control)
            self.assertEqual(got[:4], control["flip"].tokens[0][:4])
            for name in ("base", "other", "after"):
                self.assertSameOutput(with_flip[name], control[name])

    def test_bad_values_are_refused_at_load_and_save(self):
        with tempfile.TemporaryDirectory() as d:
            good = self.adapter("good", 8)
            L.save_peft(good, d, "base")
            weights = os.path.join(d, L.WEIGHTS_NAME)
            for value in BAD_VALUES:
                tensors = W.load_file(weights)
                name = f"base_model.model.{DOWN0}.lora_A.weight"
                tensors[name].view(-1)[5] = value
                W.save_file(tensors, weights, {"format": "pt"})
                with self.assertRaisesRegex(L.NonFinite, re.escape(name) + r": value \S+ at index \[0,5\]: adapter"):
                    load_peft("k", "b", d, self.args, "cpu")
                loaded = load_peft("k", "b", d, self.args, "cpu", check_values=False)
                with self.assertRaisesRegex(L.NonFinite, "is not saved"):
                    L.save_peft(loaded, os.path.join(d, "out"), "base")
                self.assertFalse(os.path.exists(os.path.join(d, "out")))
            self.assertIsNone(L.weights_problem(L.peft_tensors(good)))
            edge = {"t": torch.tensor([[0.0, L.MAX_ABS_WEIGHT], [-L.MAX_ABS_WEIGHT, 1.0]])}
            self.assertIsNone(L.weights_problem(edge))  # the bound itself is allowed


class TestDivergence(unittest.TestCase):
    """An absurd learning rate: the step fails as diverged and the adapter, moments and version stay bit for bit."""

    @classmethod
    def setUpClass(cls):
        from engine.tests.helpers import TempModel

        cls.tm = TempModel("qwen2", std=0.1)
        cls.model, cls.args = cls.tm.model, cls.tm.args
        cls.rows = parse_rows([{"tokens": [1, 5, 9, 13, 17], "mask": [0, 1, 1, 1, 1]}], 101, 256, "sft")

    @classmethod
    def tearDownClass(cls):
        cls.tm.dir.cleanup()

    def snapshot(self, adapter: L.Adapter):
        state = {k: v.clone() for k, v in L.peft_tensors(adapter).items()}
        moments = {n: {k: v.clone() for k, v in st.items()} for n, st in L.optimizer_state(adapter)["state"].items()}
        return state, moments, adapter.version

    def assertUnchanged(self, adapter: L.Adapter, snap):
        state, moments, version = snap
        self.assertEqual(adapter.version, version)
        for k, v in L.peft_tensors(adapter).items():
            self.assertTrue(torch.equal(v, state[k]), k)
        now = L.optimizer_state(adapter)["state"]
        self.assertEqual(sorted(now), sorted(moments))
        for n in moments:
            for k in moments[n]:
                self.assertTrue(torch.equal(now[n][k], moments[n][k]), (n, k))
        self.assertTrue(all(p.grad is None for p in adapter.parameters()))

    def test_train_step_with_an_absurd_learning_rate_diverges_and_changes_nothing(self):
        a = L.new_adapter("a", "b", self.args, lora(seed=1), "cpu")
        train_step(self.model, a, "sft", self.rows, None, optimizer("sft", learning_rate=1e-2))
        snap = self.snapshot(a)
        with self.assertRaisesRegex(TrainingDiverged, "training diverged: the step would leave .* at index"):
            train_step(self.model, a, "sft", self.rows, None, optimizer("sft", learning_rate=1e30))
        self.assertUnchanged(a, snap)
        train_step(self.model, a, "sft", self.rows, None, optimizer("sft", learning_rate=1e-2))  # it goes on
        self.assertEqual(a.version, snap[2] + 1)

    def test_optim_step_diverges_and_a_nan_loss_keeps_the_accumulated_gradient(self):
        a = L.new_adapter("a", "b", self.args, lora(seed=2), "cpu")
        row = steps.StepRow(
            tokens_T=torch.tensor([1, 5, 9]),
            target_tokens_T=torch.tensor([5, 9, 13]),
            weights_T=torch.ones(3),
            sampler_logprobs_T=None,
            advantages_T=None,
        )
        adam = AdamW(learning_rate=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0, grad_clip_norm=0.0)
        steps.forward_backward(self.model, a, "cross_entropy", {}, [row], True)
        steps.optim_step(a, adam)
        snap = self.snapshot(a)
        steps.forward_backward(self.model, a, "cross_entropy", {}, [row], True)
        with self.assertRaisesRegex(TrainingDiverged, "training diverged"):
            steps.optim_step(a, AdamW(**{**adam.__dict__, "learning_rate": 1e30}))
        self.assertUnchanged(a, snap)  # the gradient it could not apply is discarded too
        steps.forward_backward(self.model, a, "cross_entropy", {}, [row], True)
        grads = [None if p.grad is None else p.grad.clone() for p in a.parameters()]
        nan_row = steps.StepRow(
            tokens_T=row.tokens_T,
            target_tokens_T=row.target_tokens_T,
            weights_T=torch.tensor([1.0, float("inf"), 1.0]),
            sampler_logprobs_T=None,
            advantages_T=None,
        )
        with self.assertRaisesRegex(TrainingDiverged, r"the loss of rows\[1\] is not finite"):
            steps.forward_backward(self.model, a, "cross_entropy", {}, [row, nan_row], True)
        for p, g in zip(a.parameters(), grads):
            self.assertTrue(torch.equal(p.grad, g))


class TestEngineProcess(unittest.TestCase):
    """Through `python3 -m engine`: load refuses bad values (non_finite); the test-only flag lets one in, and its
    generate fails alone with non_finite while a base request beside it completes."""

    def test_load_check_and_the_test_only_flag(self):
        with tempfile.TemporaryDirectory() as d:
            base = make_checkpoint(os.path.join(d, "base"), "qwen2", std=0.1)
            from engine.model import load_args

            folder = os.path.join(d, "bad")
            adapter = randomize(L.new_adapter("x", "b", load_args(base), lora(seed=3), "cpu"), 3, 0.2)
            L.save_peft(adapter, folder, base)
            tensors = W.load_file(os.path.join(folder, L.WEIGHTS_NAME))
            tensors[f"base_model.model.{DOWN0}.lora_A.weight"].view(-1)[:4] = float("nan")
            W.save_file(tensors, os.path.join(folder, L.WEIGHTS_NAME), {"format": "pt"})
            for flags in ((), ("--skip-adapter-value-check",)):
                e = EngineProcess(*flags)
                try:
                    self.assertNotIn("error", e.call({"id": "l", "op": "load_base", "base": "b", "path": base}))
                    load = e.call({"id": "a", "op": "ensure_adapter", "adapter": "x", "base": "b", "path": folder})
                    if not flags:
                        self.assertEqual(load["error"]["code"], "non_finite", load)
                        self.assertRegex(
                            load["error"]["message"], r"down_proj.lora_A.weight: value NaN at index \[0,0\]"
                        )
                        continue
                    self.assertEqual(load, {"id": "a", "done": True, "loaded": True})
                    e.send(generate_request("g-bad", adapter="x", prompt=[5, 6, 7], max_tokens=4, temperature=0))
                    e.send(generate_request("g-base", prompt=[5, 6, 7], max_tokens=4, temperature=0, ignore_eos=True))
                    bad = e.until_done("g-bad")
                    self.assertEqual(len(bad), 1)  # no token event: the error reply alone
                    self.assertEqual(bad[0]["error"]["code"], "non_finite", bad)
                    good = e.until_done("g-base")
                    self.assertEqual(sum(len(f.get("tokens", [])) for f in good), 4)
                    self.assertNotIn("error", good[-1])
                finally:
                    e.close()


if __name__ == "__main__":
    unittest.main()
