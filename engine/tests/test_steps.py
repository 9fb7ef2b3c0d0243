"""Tinker's token-level primitives: the named losses' values and gradients, accumulation, AdamW, full state, the ops."""

import os
import tempfile
import unittest

import torch
import torch.nn.functional as F

from engine import lora as L
from engine import steps
from engine.model import ForwardContext
from engine.steps import StepRow
from engine.tests.helpers import EngineProcess, TempModel, make_checkpoint
from engine.wire import check_step_rows, parse_forward_backward, parse_optim_step

CLIP = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Every sampling field spelled out: the engine's wire gives none of them a default.
SAMPLING = {
    "n": 1,
    "min_tokens": 0,
    "ignore_eos": True,
    "stop_token_ids": [],
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
    "logit_bias": {},
    "allowed_token_ids": None,
    "bad_words_ids": [],
    "prompt_logprobs": None,
}
ADAM = {"learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.01, "grad_clip_norm": 1.0}


def row_of(n: int, **arrays) -> StepRow:
    return StepRow(
        tokens_T=torch.arange(n),
        target_tokens_T=torch.arange(n),
        weights_T=arrays.get("w", torch.ones(n)),
        sampler_logprobs_T=arrays.get("old"),
        advantages_T=arrays.get("adv"),
    )


def loss_grad(loss: str, cfg: dict, lp_T: torch.Tensor, row: StepRow) -> tuple:
    """(elementwise loss, d(sum of it)/d logprobs) at lp_T."""
    lp_T = lp_T.clone().requires_grad_(True)
    loss_T = steps.token_loss(loss, cfg, lp_T, row)
    loss_T.sum().backward()
    return loss_T.detach(), lp_T.grad


class TestLossDefinitions(unittest.TestCase):
    """Each loss against its formula in Tinker's docs, gradients included."""

    old_T = torch.tensor([-1.0, -2.0, -0.5, -3.0])
    adv_T = torch.tensor([1.0, -1.0, 2.0, -0.5])

    def row(self, w=None):
        return row_of(4, old=self.old_T, adv=self.adv_T, w=w if w is not None else torch.ones(4))

    def test_cross_entropy_is_the_weighted_sum_of_negative_logprobs(self):
        lp_T = torch.tensor([-1.5, -0.2, -3.0, -0.7])
        w_T = torch.tensor([0.0, 1.0, 2.0, 1.0])
        value, grad = loss_grad("cross_entropy", {}, lp_T, self.row(w_T))
        torch.testing.assert_close(value, -lp_T * w_T)
        torch.testing.assert_close(grad, -w_T)

    def test_importance_sampling_at_ratio_one_is_the_policy_gradient(self):
        value, grad = loss_grad("importance_sampling", {}, self.old_T, self.row())
        torch.testing.assert_close(value, -self.adv_T)
        torch.testing.assert_close(grad, -self.adv_T)  # the gradient of -A * logprob
        lp_T = self.old_T + torch.tensor([0.3, -0.2, 0.0, 0.1])
        value, grad = loss_grad("importance_sampling", {}, lp_T, self.row())
        ratio_T = torch.exp(lp_T - self.old_T)
        torch.testing.assert_close(value, -ratio_T * self.adv_T)
        torch.testing.assert_close(grad, -ratio_T * self.adv_T)

    def test_ppo_clips_the_objective_at_the_thresholds(self):
        # ratio per token: 1.5 (A>0: clipped, no gradient), 1.5 (A<0: unclipped), 0.5 (A>0: unclipped), 0.5 (A<0: clipped)
        adv_T = torch.tensor([1.0, -1.0, 1.0, -1.0])
        ratio_T = torch.tensor([1.5, 1.5, 0.5, 0.5])
        row = row_of(4, old=self.old_T, adv=adv_T)
        value, grad = loss_grad("ppo", CLIP, self.old_T + ratio_T.log(), row)
        torch.testing.assert_close(value, torch.tensor([-1.2, 1.5, -0.5, 0.8]))
        torch.testing.assert_close(grad, torch.tensor([0.0, 1.5, -0.5, 0.0]))
        inside = torch.tensor([1.1, 0.9, 1.0, 1.19])
        value, grad = loss_grad("ppo", CLIP, self.old_T + inside.log(), row)
        torch.testing.assert_close(grad, -inside * adv_T)

    def test_cispo_weights_the_logprob_by_the_clipped_ratio_without_its_gradient(self):
        ratio_T = torch.tensor([1.5, 0.5, 1.0, 1.1])
        lp_T = self.old_T + ratio_T.log()
        value, grad = loss_grad("cispo", CLIP, lp_T, self.row())
        clipped_T = ratio_T.clamp(0.8, 1.2)
        torch.testing.assert_close(value, -clipped_T * lp_T * self.adv_T)
        torch.testing.assert_close(grad, -clipped_T * self.adv_T)  # clipped tokens still train, unlike ppo

    def test_dro_is_the_advantage_objective_with_a_quadratic_penalty(self):
        lp_T = self.old_T + torch.tensor([0.5, -0.25, 0.0, 1.0])
        value, grad = loss_grad("dro", {"beta": 0.1}, lp_T, self.row())
        d_T = lp_T - self.old_T
        torch.testing.assert_close(value, -(lp_T * self.adv_T - 0.05 * d_T**2))
        torch.testing.assert_close(grad, -(self.adv_T - 0.1 * d_T))

    def test_gspo_gives_every_token_the_sequence_ratio_and_its_own_gradient(self):
        mask_T = torch.tensor([0.0, 1.0, 1.0, 0.0])
        row = row_of(4, old=self.old_T, adv=self.adv_T)
        row.sequence_ratio_mask_T = mask_T
        value, grad = loss_grad("gspo", CLIP, self.old_T, row)  # on policy: s = 1, the policy gradient
        torch.testing.assert_close(value, -self.adv_T)
        torch.testing.assert_close(grad, -self.adv_T)
        lp_T = self.old_T + torch.tensor([2.0, 0.1, 0.3, -1.0])  # unmarked tokens do not move s
        s = torch.tensor(0.2).exp()
        value, grad = loss_grad("gspo", {"clip_low_threshold": 0.5, "clip_high_threshold": 1.5}, lp_T, row)
        torch.testing.assert_close(value, -s * self.adv_T)
        torch.testing.assert_close(grad, -s * self.adv_T)
        value, grad = loss_grad("gspo", CLIP, lp_T, row)  # s = 1.22 > 1.2: clipped where A > 0, no gradient there
        torch.testing.assert_close(value, torch.where(self.adv_T > 0, -1.2 * self.adv_T, -s * self.adv_T))
        torch.testing.assert_close(grad, torch.where(self.adv_T > 0, torch.zeros(4), -s * self.adv_T))

    def test_stable_reinforce_truncates_the_ratio_at_one_and_pulls_towards_the_sampler(self):
        # On policy: the policy gradient, and no KL (its value and gradient are 0 there).
        value, grad = loss_grad("stable_reinforce", {"kl_coeff": 0.5}, self.old_T, self.row())
        torch.testing.assert_close(value, -self.adv_T * self.old_T)
        torch.testing.assert_close(grad, -self.adv_T)
        # Learner likelier than the sampler on the first two tokens (weight 1), less likely on the last two (weight r).
        d_T = torch.tensor([0.4, 0.2, -0.3, -0.6])
        lp_T = self.old_T + d_T
        weight_T = torch.exp(d_T).clamp(max=1.0)
        value, grad = loss_grad("stable_reinforce", {"kl_coeff": 0.0}, lp_T, self.row())
        torch.testing.assert_close(value, -weight_T * self.adv_T * lp_T)
        torch.testing.assert_close(grad, -weight_T * self.adv_T)
        value, grad = loss_grad("stable_reinforce", {"kl_coeff": 0.5}, lp_T, self.row())
        torch.testing.assert_close(value, -weight_T * self.adv_T * lp_T + 0.5 * (torch.exp(-d_T) + d_T - 1))
        torch.testing.assert_close(grad, -weight_T * self.adv_T + 0.5 * (1 - torch.exp(-d_T)))

    def test_gradients_match_finite_differences(self):
        row = row_of(4, old=self.old_T.double(), adv=self.adv_T.double(), w=torch.tensor([1.0, 0.5, 2.0, 1.0]).double())
        lp_T = (self.old_T + torch.tensor([0.05, -0.1, 0.3, 0.02])).double().requires_grad_(True)
        for loss, cfg in (("cross_entropy", {}), ("importance_sampling", {}), ("ppo", CLIP), ("dro", {"beta": 0.3})):
            with self.subTest(loss=loss):
                self.assertTrue(
                    torch.autograd.gradcheck(
                        lambda x, loss=loss, cfg=cfg: steps.token_loss(loss, cfg, x, row).sum(), (lp_T,)
                    )
                )


class TestSteps(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tm = TempModel("qwen2", std=0.1)
        cls.model = cls.tm.model
        V = cls.tm.args.vocab_size
        g = torch.Generator().manual_seed(0)
        cls.rows = []
        for T in (7, 5, 9, 6):
            toks = torch.randint(3, V, (T + 1,), generator=g).tolist()
            cls.rows.append(
                {
                    "tokens": toks[:-1],
                    "target_tokens": toks[1:],
                    "weights": [0.0] + [1.0] * (T - 1),
                    "logprobs": [-4.0] * T,
                    "advantages": [1.0] * T,
                }
            )

    @classmethod
    def tearDownClass(cls):
        cls.tm.dir.cleanup()

    def adapter(self, key="a", seed=0):
        config = L.LoraConfig(rank=4, alpha=8, target_modules=TARGETS, seed=seed)
        return L.new_adapter(key, "b", self.tm.args, config, "cpu")

    def fb(self, adapter, rows, loss="cross_entropy", cfg=None, backward=True):
        msg = {"base": "b", "adapter": "a", "loss": loss, "loss_config": cfg or {}, "backward": backward, "rows": rows}
        req = parse_forward_backward(msg)
        check_step_rows(req.rows, self.tm.args.vocab_size, 256)
        return steps.forward_backward(self.model, adapter, req.loss, req.loss_config, req.rows, req.backward)

    def step(self, adapter, **over):
        return steps.optim_step(adapter, parse_optim_step({"base": "b", "adapter": "a", "adam": {**ADAM, **over}}).adam)

    def train(self, adapter, n=2):
        for _ in range(n):
            self.fb(adapter, self.rows)
            self.step(adapter)

    def test_logprobs_and_cross_entropy_gradients_match_a_reference(self):
        a = self.adapter()
        self.train(a, 1)  # B nonzero, so gradients reach both factors
        out = self.fb(a, self.rows[:1])
        grads = [p.grad.clone() for p in a.parameters()]
        for p in a.parameters():
            p.grad = None
        r = self.rows[0]
        tokens_T, targets_T, w_T = (
            torch.tensor(r["tokens"]),
            torch.tensor(r["target_tokens"]),
            torch.tensor(r["weights"]),
        )
        lora = L.LoraBatch([a], self.model.dtype, self.model.device)
        seg_1T = torch.zeros(1, len(tokens_T), dtype=torch.long)
        logits_TV = self.model.logits(self.model(tokens_T[None], ForwardContext.packed(seg_1T, None), lora)[0])
        ce_T = F.cross_entropy(logits_TV, targets_T, reduction="none")
        (ce_T * w_T).sum().backward()
        torch.testing.assert_close(torch.tensor(out["outputs"][0]["logprobs"]), -ce_T.detach(), atol=1e-5, rtol=0)
        self.assertAlmostEqual(out["loss"], float((ce_T * w_T).sum().detach()), places=4)
        self.assertEqual(out["metrics"]["loss:sum"], out["loss"])
        for got, want in zip(grads, [p.grad for p in a.parameters()]):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)

    def test_cross_entropy_with_signed_weights_backpropagates_a_client_side_loss(self):
        """The SDK's forward_backward_custom: forward, C(logprobs) on the client, then CE with weights -dC/dlogprobs."""
        a = self.adapter()
        self.train(a, 1)
        lp = [torch.tensor(o["logprobs"], requires_grad=True) for o in self.fb(a, self.rows, backward=False)["outputs"]]
        sum(((x + 1.0) ** 2).sum() for x in lp).backward()  # some nonlinear client-side loss
        linear = [{**r, "weights": (-x.grad).tolist()} for r, x in zip(self.rows, lp)]
        self.fb(a, linear)
        got = [p.grad.clone() for p in a.parameters()]
        for p in a.parameters():
            p.grad = None
        lora = L.LoraBatch([a], self.model.dtype, self.model.device)
        want = sum(
            (
                (
                    steps.target_logprobs(self.model, torch.tensor(r["tokens"]), torch.tensor(r["target_tokens"]), lora)
                    + 1.0
                )
                ** 2
            ).sum()
            for r in self.rows
        )
        want.backward()
        for g, p in zip(got, a.parameters()):
            torch.testing.assert_close(g, p.grad, atol=1e-6, rtol=1e-4)

    def test_chunked_logits_give_the_same_logprobs_and_gradients(self):
        a = self.adapter()
        self.train(a, 1)
        whole = self.fb(a, self.rows, "ppo", CLIP)
        grads = [p.grad.clone() for p in a.parameters()]
        for p in a.parameters():
            p.grad = None
        saved = steps.LOGITS_CHUNK_ELEMENTS
        steps.LOGITS_CHUNK_ELEMENTS = 3 * self.tm.args.vocab_size  # 3 positions per chunk, recomputed in backward
        try:
            chunked = self.fb(a, self.rows, "ppo", CLIP)
        finally:
            steps.LOGITS_CHUNK_ELEMENTS = saved
        for x, y in zip(whole["outputs"], chunked["outputs"]):
            torch.testing.assert_close(torch.tensor(x["logprobs"]), torch.tensor(y["logprobs"]), atol=1e-6, rtol=0)
        for g, p in zip(grads, a.parameters()):
            torch.testing.assert_close(g, p.grad, atol=1e-6, rtol=1e-5)

    def test_accumulating_then_stepping_equals_one_batch_step(self):
        split, whole = self.adapter("s"), self.adapter("w")
        for loss, cfg in (("cross_entropy", {}), ("ppo", CLIP)):
            a = self.fb(split, self.rows[:2], loss, cfg)["loss"] + self.fb(split, self.rows[2:], loss, cfg)["loss"]
            b = self.fb(whole, self.rows, loss, cfg)["loss"]
            self.assertAlmostEqual(a, b, places=4)
            for p, q in zip(split.parameters(), whole.parameters()):
                torch.testing.assert_close(p.grad, q.grad, atol=1e-7, rtol=1e-5)
            self.assertEqual(self.step(split)["step"], self.step(whole)["step"])
            for p, q in zip(split.parameters(), whole.parameters()):
                torch.testing.assert_close(p, q, atol=1e-7, rtol=1e-5)
                self.assertIsNone(p.grad)  # the step consumed the gradient

    def test_forward_only_leaves_no_gradient_and_changes_nothing(self):
        a = self.adapter()
        self.train(a, 1)
        before = [p.detach().clone() for p in a.parameters()]
        out = self.fb(a, self.rows, backward=False)
        self.assertTrue(all(p.grad is None for p in a.parameters()))
        self.assertEqual(len(out["outputs"]), 4)
        self.assertEqual([len(o["elementwise_loss"]) for o in out["outputs"]], [7, 5, 9, 6])
        self.assertEqual(self.fb(a, self.rows, backward=False)["outputs"], out["outputs"])
        self.assertTrue(all(torch.equal(p, q) for p, q in zip(a.parameters(), before)))

    def test_cross_entropy_steps_lower_the_loss_and_count(self):
        a = self.adapter()
        losses = []
        for i in range(4):
            losses.append(self.fb(a, self.rows)["loss"])
            self.assertEqual(self.step(a)["step"], i + 1)
        self.assertLess(losses[-1], losses[0])

    def test_grad_clip_norm_bounds_the_update_and_zero_disables_it(self):
        for clip in (1e-3, 0.0):
            a = self.adapter()
            self.fb(a, self.rows)
            norm = self.step(a, grad_clip_norm=clip)["metrics"]["grad_norm"]
            self.assertGreater(norm, 1e-2)  # measured before clipping
            # After one step Adam's first moment is (1 - beta1) times the gradient it was given.
            m = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(a.optimizer.state[p]["exp_avg"]) for p in a.parameters()])
            )
            self.assertAlmostEqual(float(m), (1 - ADAM["beta1"]) * (clip or norm), delta=1e-4 * (clip or norm))

    def test_save_and_load_state_round_trip_bit_exactly(self):
        a = self.adapter()
        self.train(a, 2)
        with tempfile.TemporaryDirectory() as d:
            folder = os.path.join(d, "state")
            files = steps.save_state(a, folder, "base")
            self.assertEqual(
                sorted(files),
                ["adapter_config.json", "adapter_model.safetensors", "optimizer.pt", "training_state.json"],
            )
            self.assertEqual(sorted(os.listdir(d)), ["state"])  # no temp folder left behind
            steps.save_state(a, folder, "base")  # overwriting an existing state is fine
            b = steps.load_state("b", "b", folder, self.tm.args, "cpu")
        self.assertEqual(b.version, 2)
        for p, q in zip(a.parameters(), b.parameters()):
            self.assertTrue(torch.equal(p, q))
            sa, sb = a.optimizer.state[p], b.optimizer.state[q]
            self.assertEqual(sorted(sa), sorted(sb))
            self.assertTrue(all(torch.equal(sa[k], sb[k]) for k in sa))
        fa, fb = self.fb(a, self.rows), self.fb(b, self.rows)
        self.assertEqual(fa["outputs"], fb["outputs"])
        self.assertEqual((self.step(a)["step"], self.step(b)["step"]), (3, 3))
        self.assertTrue(all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters())))

    def test_a_weights_only_checkpoint_loads_at_step_zero(self):
        a = self.adapter()
        with tempfile.TemporaryDirectory() as d:
            L.save_peft(a, d, "base")
            self.assertEqual(steps.load_state("b", "b", d, self.tm.args, "cpu").version, 0)


class TestStepOps(unittest.TestCase):
    """The four ops through a real engine process: replies, ordering with generate, error replies."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.model_path = make_checkpoint(os.path.join(cls.dir.name, "base"), "qwen2", std=0.1)
        cls.e = EngineProcess()
        assert "error" not in cls.e.call({"id": "load", "op": "load_base", "base": "b", "path": cls.model_path})
        init = {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"], "seed": 3}
        assert cls.e.call({"id": "ea", "op": "ensure_adapter", "base": "b", "adapter": "t", "init": init})["loaded"]

    @classmethod
    def tearDownClass(cls):
        cls.e.close()
        cls.dir.cleanup()

    def call(self, rid, op, **msg):
        return self.e.call({"id": rid, "op": op, **msg})

    def assertError(self, reply, code, pattern):
        self.assertIn("error", reply, reply)
        self.assertEqual(reply["error"]["code"], code, reply)
        self.assertRegex(reply["error"]["message"], pattern)

    def generate(self, rid, prompt, adapter):
        self.e.send(
            {
                "id": rid,
                "op": "generate",
                "base": "b",
                "adapter": adapter,
                "prompt": prompt,
                **SAMPLING,
                "max_tokens": 8,
                "seed": 7,
                "logprobs": 0,
            }
        )
        frames = self.e.until_done(rid)
        self.assertNotIn("error", frames[-1])
        toks = [f for f in frames if f.get("type") == "tokens"]
        return sum((f["tokens"] for f in toks), []), sum((f["logprobs"] for f in toks), [])

    def sampler_agreement(self, adapter):
        prompt = [5, 9, 11, 4]
        completion, sampled = self.generate("g-" + str(adapter), prompt, adapter)
        full = prompt + completion
        row = {
            "tokens": full[:-1],
            "target_tokens": full[1:],
            "weights": [1.0] * (len(full) - 1),
            "logprobs": [0.0] * (len(full) - 1),
            "advantages": [0.0] * (len(full) - 1),
        }
        out = self.call(
            "fa-" + str(adapter),
            "forward_backward",
            base="b",
            adapter=adapter,
            loss="importance_sampling",
            loss_config={},
            backward=False,
            rows=[row],
        )
        trainer = out["outputs"][0]["logprobs"][len(prompt) - 1 :]
        self.assertEqual(len(trainer), len(sampled))
        self.assertLess(max(abs(x - y) for x, y in zip(trainer, sampled)), 1e-4)

    def test_trainer_logprobs_equal_the_samplers_before_and_after_training(self):
        self.sampler_agreement(None)  # the base model
        self.sampler_agreement("t")  # step 0: a fresh adapter
        row = {"tokens": [5, 9, 11, 4, 6], "target_tokens": [9, 11, 4, 6, 8], "weights": [0, 1, 1, 1, 1]}
        fb = self.call(
            "fb1",
            "forward_backward",
            base="b",
            adapter="t",
            loss="cross_entropy",
            loss_config={},
            backward=True,
            rows=[row],
        )
        self.assertEqual(len(fb["outputs"][0]["elementwise_loss"]), 5)
        self.assertEqual(self.call("os1", "optim_step", base="b", adapter="t", adam=ADAM)["step"], 1)
        self.sampler_agreement("t")  # the sampler sees the stepped weights

    def test_state_ops_round_trip_and_replace_the_adapter(self):
        init = {"rank": 2, "alpha": 4, "target_modules": ["q_proj"], "seed": 1}
        self.call("es", "ensure_adapter", base="b", adapter="s", init=init)
        row = {"tokens": [7, 8, 9], "target_tokens": [8, 9, 10], "weights": [1, 1, 1]}
        fb = dict(base="b", adapter="s", loss="cross_entropy", loss_config={}, backward=True, rows=[row])
        self.call("sfb", "forward_backward", **fb)
        self.call("sos", "optim_step", base="b", adapter="s", adam=ADAM)
        folder = os.path.join(self.dir.name, "st")
        self.assertIn("optimizer.pt", self.call("ss", "save_state", adapter="s", path=folder)["files"])
        first = self.call("f1", "forward_backward", **{**fb, "backward": False})
        self.call("sfb2", "forward_backward", **fb)
        self.assertEqual(self.call("sos2", "optim_step", base="b", adapter="s", adam=ADAM)["step"], 2)
        self.assertEqual(self.call("ls", "load_state", base="b", adapter="s", path=folder)["step"], 1)
        self.assertEqual(self.call("f2", "forward_backward", **{**fb, "backward": False})["outputs"], first["outputs"])

    def test_pipelined_ops_run_in_submission_order_beside_generation(self):
        init = {"rank": 2, "alpha": 4, "target_modules": ["v_proj"], "seed": 2}
        self.call("ep", "ensure_adapter", base="b", adapter="p", init=init)
        row = {"tokens": [7, 8, 9, 10], "target_tokens": [8, 9, 10, 11], "weights": [1, 1, 1, 1]}
        fb = dict(op="forward_backward", base="b", adapter="p", loss="cross_entropy", loss_config={}, rows=[row])
        self.e.send(
            {
                "id": "pg",
                "op": "generate",
                "base": "b",
                "adapter": None,
                "prompt": [5],
                **SAMPLING,
                "max_tokens": 40,
                "seed": 1,
                "logprobs": None,
            }
        )
        for rid, msg in (
            ("p0", {**fb, "backward": False}),
            ("p1", {**fb, "backward": True}),
            ("p2", {"op": "optim_step", "base": "b", "adapter": "p", "adam": ADAM}),
            ("p3", {**fb, "backward": False}),
            ("p4", {"op": "optim_step", "base": "b", "adapter": "p", "adam": ADAM}),
        ):
            self.e.send({"id": rid, **msg})  # all in flight at once, as a client pipelines them
        got = {rid: self.e.until_done(rid)[-1] for rid in ("p0", "p1", "p2", "p3", "p4", "pg")}
        self.assertNotIn("error", got["pg"])
        self.assertEqual((got["p2"]["step"], got["p4"]["step"]), (1, 2))
        self.assertEqual(got["p0"]["loss"], got["p1"]["loss"])  # p1's forward saw the weights p0 saw
        self.assertLess(got["p3"]["loss"], got["p0"]["loss"])  # p3 ran after the step
        self.assertEqual(got["p4"]["metrics"]["grad_norm"], 0.0)  # p3 was forward only: nothing accumulated

    def test_bad_inputs_are_error_replies(self):
        row = {"tokens": [5, 6, 7], "target_tokens": [6, 7, 8], "weights": [1, 1, 1]}
        fb = dict(base="b", adapter="t", loss="cross_entropy", loss_config={}, backward=False, rows=[row])
        cases = [
            ({**fb, "loss": "hinge"}, "bad_request", "unknown loss 'hinge'"),
            (
                {**fb, "rows": [row, {**row, "weights": [1, 1]}]},
                "bad_request",
                r"rows\[1\]\.weights must be a list with one entry per token \(3\)",
            ),
            (
                {**fb, "rows": [{**row, "target_tokens": [6, 7]}]},
                "bad_request",
                r"rows\[0\]\.target_tokens must be a list with one entry per token \(3, has 2\)",
            ),
            (
                {**fb, "rows": [{**row, "target_tokens": [6, 7, 101]}]},
                "bad_request",
                r"rows\[0\]\.target_tokens .*vocabulary",
            ),
            ({**fb, "rows": [{**row, "tokens": [-1, 6, 7]}]}, "bad_request", r"rows\[0\]\.tokens .*vocabulary"),
            ({k: v for k, v in fb.items() if k != "loss_config"}, "bad_request", "missing field loss_config$"),
            ({k: v for k, v in fb.items() if k != "backward"}, "bad_request", "missing field backward$"),
            ({**fb, "loss": "ppo"}, "bad_request", "missing field loss_config.clip_low_threshold"),
            ({**fb, "loss_config": {"beta": 1}}, "bad_request", "not used by cross_entropy: beta"),
            ({**fb, "loss": "dro", "loss_config": {"beta": 0.1}}, "bad_request", r"missing field rows\[0\]\.logprobs"),
            (
                {
                    **fb,
                    "loss": "gspo",
                    "loss_config": CLIP,
                    "rows": [{**row, "logprobs": [-1] * 3, "advantages": [1] * 3, "sequence_ratio_mask": [0, 0, 0]}],
                },
                "bad_request",
                r"rows\[0\]\.sequence_ratio_mask must be non-zero for at least one token",
            ),
            ({**fb, "adapter": "nope"}, "not_found", "nope"),
            (
                {**fb, "adapter": None, "backward": True},
                "bad_request",
                "field adapter must be an adapter key when backward is true",
            ),
            ({k: v for k, v in fb.items() if k != "adapter"}, "bad_request", "missing field adapter$"),
            (
                {**fb, "rows": [{**row, "tokens": [5] * 300, "target_tokens": [5] * 300, "weights": [1] * 300}]},
                "bad_request",
                "more than the context length 256",
            ),
        ]
        for i, (msg, code, pattern) in enumerate(cases):
            with self.subTest(pattern=pattern):
                self.assertError(self.call(f"bad{i}", "forward_backward", **msg), code, pattern)
        self.assertError(
            self.call("o1", "optim_step", base="b", adapter="t", adam={**ADAM, "eps": None}),
            "bad_request",
            "field adam.eps must be given",
        )
        self.assertError(self.call("o2", "optim_step", base="b", adapter="gone", adam=ADAM), "not_found", "gone")
        self.assertError(self.call("s1", "save_state", adapter="gone", path=self.dir.name), "not_found", "gone")
        self.assertError(
            self.call("l1", "load_state", base="b", adapter="x", path=os.path.join(self.dir.name, "none")),
            "not_found",
            "none",
        )
        self.assertEqual(self.call("alive", "stats")["bases"], ["b"])


if __name__ == "__main__":
    unittest.main()
