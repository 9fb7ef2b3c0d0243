"""RL loss knobs on hand-computed cases (rl-loss.md), row normalisation, and train steps that lower the loss."""

import math
import unittest

import torch

from engine import lora as L
from engine import model as M
from engine import train as TR
from engine.tests.helpers import TempModel, lora, loss_config, optimizer, parse_rows, train_request
from engine.train import forward_logprobs, rl_token_loss, train_step
from engine.wire import parse_train_step

LN = math.log


def case(new, old, adv, mask=None, seg=None, original=None, ref=None, **cfg):
    new_T = torch.tensor(new, dtype=torch.float64, requires_grad=True)
    T = len(new)
    mask_T = torch.tensor(mask or [1.0] * T, dtype=torch.float64)
    seg_T = torch.tensor(seg or [0] * T)
    orig_T = None if original is None else torch.tensor(original, dtype=torch.float64)
    ref_T = None if ref is None else torch.tensor(ref, dtype=torch.float64)
    loss_T, stats = rl_token_loss(
        new_T,
        torch.tensor(old, dtype=torch.float64),
        orig_T,
        torch.tensor(adv, dtype=torch.float64),
        mask_T,
        seg_T,
        loss_config(**cfg),
        ref_T,
    )
    loss_T.sum().backward()
    return loss_T.tolist(), new_T.grad.tolist(), stats


class TestRlLoss(unittest.TestCase):
    def close(self, got, want, places=9):
        for g, w in zip(got, want, strict=True):
            self.assertAlmostEqual(g, w, places=places)

    def test_cispo_bounds(self):
        # ratio 2 is inside CISPO's default (1 - 1.0, 1 + 4.0); ratio 6 is clipped to 5.
        loss, grad, _ = case([LN(0.5), LN(0.6)], [LN(0.25), LN(0.1)], [1.0, -2.0])
        self.close(loss, [-2 * LN(0.5), -5 * -2 * LN(0.6)])
        self.close(grad, [-2.0, 10.0])  # the ratio is detached: gradient is -clip(ratio) * A

    def test_ppo_clipping(self):
        # ratio 1.5 with epsilon 0.2: positive advantage takes the clipped (flat) branch, negative the raw one.
        loss, grad, _ = case(
            [LN(0.3), LN(0.3)], [LN(0.2), LN(0.2)], [1.0, -1.0], ppo=True, epsilon=0.2, epsilon_high=0.2
        )
        self.close(loss, [-1.2, 1.5])
        self.close(grad, [0.0, 1.5])
        loss, _, _ = case([LN(0.3)], [LN(0.2)], [1.0], ppo=True, epsilon=0.1, epsilon_high=0.6)
        self.close(loss, [-1.5])  # 1.5 < 1 + 0.6: unclipped

    def test_missing_old_logprob_means_ratio_one(self):
        loss, grad, _ = case([LN(0.4)], [float("nan")], [3.0])
        self.close(loss, [-3 * LN(0.4)])
        self.close(grad, [-3.0])

    def test_mask_prob_ratio(self):
        loss, grad, _ = case(
            [LN(0.3), LN(0.21)],
            [LN(0.2), LN(0.2)],
            [1.0, 1.0],
            ppo=True,
            epsilon=0.2,
            epsilon_high=0.2,
            mask_prob_ratio=True,
        )
        self.close(loss, [0.0, -1.05])  # 1.5 is outside (0.8, 1.2): masked to 0
        self.close(grad, [0.0, -1.05])

    def test_max_negative_advantage_weight_caps_ratio(self):
        loss, _, _ = case([LN(0.3)], [LN(0.2)], [-1.0], ppo=True, max_negative_advantage_importance_sampling_weight=1.1)
        self.close(loss, [1.1])

    def test_k2_tau(self):
        loss, grad, _ = case([LN(0.5)], [LN(0.25)], [1.0], k2_tau=0.5)
        adv = 1.0 - 0.5 * LN(2.0)
        self.close(loss, [-2 * adv * LN(0.5)])
        self.close(grad, [-2 * adv])

    def test_sequence_level_importance_sampling_is_per_segment(self):
        new = [0.0, LN(0.5), LN(0.5), LN(0.8), LN(0.9)]
        old = [0.0, LN(0.25), LN(1 / 8), LN(0.4), LN(0.9)]
        mask = [0.0, 1.0, 1.0, 1.0, 0.0]
        seg = [0, 0, 0, 1, 1]
        adv = [0.0, 1.0, 1.0, 1.0, 1.0]
        seq0 = math.exp((LN(2) + LN(4)) / 2)  # mean delta over the trainable tokens of segment 0
        seq1 = 2.0
        for level, r1, r2, r3 in (
            ("sequence", seq0, seq0, seq1),
            ("average", (2 + seq0) / 2, (4 + seq0) / 2, 2.0),
            ("geometric_average", math.sqrt(2 * seq0), math.sqrt(4 * seq0), 2.0),
        ):
            with self.subTest(level=level):
                loss, _, _ = case(new, old, adv, mask, seg, importance_sampling_level=level)
                self.close([loss[1], loss[2], loss[3]], [-r1 * LN(0.5), -r2 * LN(0.5), -r3 * LN(0.8)])

    def test_truncated_importance_sampling(self):
        # The weight is min(exp(old - original), U), detached: here 0.5 (kept) and 4 (truncated to 1.5).
        new, old, original = [LN(0.5), LN(0.5)], [LN(0.25), LN(0.4)], [LN(0.5), LN(0.1)]
        loss, grad, stats = case(new, old, [1.0, 1.0], original=original, truncated_importance_sampling=1.5)
        self.close(loss, [-2 * LN(0.5) * 0.5, -1.25 * LN(0.5) * 1.5])
        self.close(grad, [-2 * 0.5, -1.25 * 1.5])
        self.assertEqual(stats.truncated_T.tolist(), [False, True])
        # A missing original counts as ratio 1 to the old logprob; without originals ART 0.5.23 skips the truncation.
        loss, _, _ = case(new, old, [1.0, 1.0], original=[float("nan"), LN(0.1)], truncated_importance_sampling=1.5)
        self.close(loss, [-2 * LN(0.5) * 0.5, -1.25 * LN(0.5) * 1.5])
        loss, _, stats = case(new, old, [1.0, 1.0], truncated_importance_sampling=1.5)
        self.close(loss, [-2 * LN(0.5), -1.25 * LN(0.5)])
        self.assertIsNone(stats.truncated_T)

    def test_log_ratio_is_clamped_at_20(self):
        # ART 0.5.23 bounds δ to [-20, 20] before exp, so one far-off token cannot overflow the ratio.
        loss, _, stats = case([0.0], [-50.0], [1.0], ppo=True, epsilon=1e9, epsilon_high=1e12)
        self.close(loss, [-math.exp(20.0)], places=0)
        self.assertAlmostEqual(stats.ratio_T.item(), math.exp(20.0), delta=1.0)

    def test_clipped_tokens_are_reported_as_art_counts_them(self):
        # Ratios 0.5, 1, 3 against bounds (0.8, 1.2): CISPO counts both sides; PPO only the side A's sign clips.
        new, old, adv = [LN(0.1), LN(0.2), LN(0.6)], [LN(0.2), LN(0.2), LN(0.2)], [1.0, 1.0, -1.0]
        _, _, stats = case(new, old, adv, epsilon=0.2, epsilon_high=0.2)
        self.assertEqual(stats.clipped_T.tolist(), [True, False, True])
        _, _, stats = case(new, old, adv, ppo=True, epsilon=0.2, epsilon_high=0.2)
        self.assertEqual(stats.clipped_T.tolist(), [False, False, False])
        _, _, stats = case(new, old, [-1.0, 1.0, 1.0], ppo=True, epsilon=0.2, epsilon_high=0.2)
        self.assertEqual(stats.clipped_T.tolist(), [True, False, True])

    def test_kl_penalty(self):
        new, ref, old = [LN(0.5), LN(0.4)], [LN(0.25), LN(0.4)], [LN(0.5), LN(0.4)]
        kl = [LN(2.0), 0.0]
        mean = sum(kl) / 2
        loss, _, stats = case(new, old, [1.0, 1.0], ref=ref, kl_penalty_coef=0.1)
        adv = [1.0 + 0.1 * (mean - k) for k in kl]
        self.close(loss, [-adv[0] * new[0], -adv[1] * new[1]])
        self.assertAlmostEqual(float(stats.kl), mean)
        # kl_penalty_source "sample" measures from the sampler's logprobs instead.
        loss, _, stats = case(
            new, [LN(0.25), LN(0.4)], [1.0, 1.0], ref=ref, kl_penalty_coef=0.1, kl_penalty_source="sample"
        )
        self.assertAlmostEqual(float(stats.kl), 0.0)
        # Without a penalty nothing is measured and the advantages stay as sent.
        loss, _, stats = case(new, old, [1.0, 1.0], ref=ref, kl_penalty_coef=0.0)
        self.close(loss, [-new[0], -new[1]])
        self.assertIsNone(stats.kl)

    def test_config_validation(self):
        self.assertEqual(loss_config(ppo=True, epsilon=0.2, epsilon_high=0.2).bounds(), (0.8, 1.2))
        self.assertEqual(loss_config(something_unknown=None).bounds(), (0.0, 5.0))
        with self.assertRaisesRegex(ValueError, "advantage_balance"):
            loss_config(advantage_balance=0.5)
        with self.assertRaisesRegex(ValueError, "loss_config.importance_sampling_level"):
            loss_config(importance_sampling_level="tokens")
        msg = train_request([{"tokens": [1, 2], "mask": [0, 1], "advantages": [0, 1]}], "rl")
        del msg["loss_config"]["epsilon"]
        with self.assertRaisesRegex(ValueError, "^train_step: missing field loss_config.epsilon$"):
            parse_train_step(msg)


class TestTrainStep(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tm = TempModel("llama", std=0.1)
        cls.model = cls.tm.model

    @classmethod
    def tearDownClass(cls):
        cls.tm.dir.cleanup()

    def adapter(self, seed=0):
        return L.new_adapter("a", "b", self.tm.args, lora(seed=seed), "cpu")

    ROWS = [
        {
            "tokens": [1, 5, 9, 13, 17, 21, 1, 7, 8],
            "segment_ids": [0] * 6 + [1] * 3,
            "mask": [0, 0, 1, 1, 1, 1, 0, 1, 1],
            "weights": [0, 0, 1, 1, 1, 1, 0, 2, 2],
            "advantages": [0, 0, 1, 1, 1, 1, 0, -0.5, -0.5],
            "logprobs": [None] * 9,
        },
        {
            "tokens": [4, 4, 6, 8],
            "segment_ids": [3, 3, 3, 3],
            "mask": [0, 1, 1, 0],
            "weights": [1, 1, 1, 1],
            "advantages": [0, 2, 2, 0],
            "logprobs": [None, -4.0, None, None],
        },
    ]

    def test_sft_loss_is_batch_normalised_and_decreases(self):
        a = self.adapter()
        rows = parse_rows(self.ROWS, 101, 256, "sft")
        lp = forward_logprobs(self.model, rows, a)
        num = sum(
            -lp_t * w * m
            for r, row in zip(lp, self.ROWS, strict=True)
            for lp_t, w, m in zip(r, row["weights"], row["mask"], strict=True)
            if m
        )
        want = num / sum(sum(r["mask"]) for r in self.ROWS)
        opt = optimizer("sft", learning_rate=3e-2)
        losses = [train_step(self.model, a, "sft", rows, None, opt)["loss"] for _ in range(4)]
        self.assertAlmostEqual(losses[0], want, places=5)
        self.assertLess(losses[-1], losses[0] - 0.1)

    def test_rl_loss_is_mean_of_row_losses_and_decreases(self):
        a = self.adapter()
        rows = parse_rows(self.ROWS, 101, 256, "rl")
        lp = forward_logprobs(self.model, rows, a)
        cfg = loss_config()
        row_losses = []
        for r, row in zip(lp, self.ROWS, strict=True):
            new = torch.tensor([x or 0.0 for x in r], dtype=torch.float64)
            old = torch.tensor([float("nan") if x is None else x for x in row["logprobs"]], dtype=torch.float64)
            m = torch.tensor(row["mask"], dtype=torch.float64)
            l_T, _ = rl_token_loss(
                new,
                old,
                None,
                torch.tensor(row["advantages"], dtype=torch.float64),
                m,
                torch.tensor(row["segment_ids"]),
                cfg,
                None,
            )
            row_losses.append(float((l_T * torch.tensor(row["weights"]) * m).sum() / m.sum()))
        opt = optimizer("rl", learning_rate=3e-2)
        metrics = train_step(self.model, a, "rl", rows, cfg, opt)
        self.assertAlmostEqual(metrics["loss"], sum(row_losses) / 2, places=5)
        self.assertEqual(metrics["loss"], metrics["policy_loss"])
        self.assertEqual(metrics["num_trainable_tokens"], 8.0)
        self.assertAlmostEqual(metrics["frac_old_logprobs_valid"], 1 / 8)
        pairs = [
            (n, o)
            for r, row in zip(lp, self.ROWS)
            for n, o, m in zip(r, row["logprobs"], row["mask"])
            if o is not None and m > 0
        ]
        self.assertAlmostEqual(metrics["sampler_logprob_gap"], sum(abs(n - o) for n, o in pairs) / len(pairs), places=5)
        self.assertLessEqual(metrics["grad_norm"], 1e9)
        for _ in range(3):
            last = train_step(self.model, a, "rl", rows, cfg, opt)
        self.assertLess(last["loss"], metrics["loss"])

    def test_grad_clip_and_kl_metric(self):
        a = self.adapter()
        rows = parse_rows(self.ROWS, 101, 256, "rl")
        opt = optimizer("rl", learning_rate=1e-2, max_grad_norm=1e-3)
        before = {m: t.detach().clone() for m, t in a.B.items()}
        m = train_step(self.model, a, "rl", rows, loss_config(kl_penalty_coef=0.5), opt)
        self.assertIn("kl_policy_ref", m)
        self.assertAlmostEqual(m["kl_policy_ref"], 0.0, places=6)  # B was zero: the adapter is the reference
        self.assertGreater(m["grad_norm"], 1e-3)
        self.assertTrue(any(not torch.equal(before[k], a.B[k]) for k in before))

    def test_kl_reference_adapter(self):
        # The reference is the named adapter when one is given (an earlier checkpoint), else the base model.
        from engine.tests.test_lora import randomize

        a = randomize(self.adapter(seed=5), 3, 0.05)
        rows = parse_rows(self.ROWS, 101, 256, "rl")
        cfg = loss_config(kl_penalty_coef=0.5, kl_penalty_source="current_learner")
        opt = optimizer("rl", learning_rate=0.0)
        self.assertAlmostEqual(
            train_step(self.model, a, "rl", rows, cfg, opt, reference=a)["kl_policy_ref"], 0.0, places=6
        )
        self.assertGreater(abs(train_step(self.model, a, "rl", rows, cfg, opt)["kl_policy_ref"]), 1e-4)

    def test_off_policy_metrics(self):
        # Row 0 carries no old logprobs (ratio 1); row 1's one old logprob -8.0 puts that token's ratio far above 1.
        a = self.adapter()
        spec = [self.ROWS[0], {**self.ROWS[1], "logprobs": [None, -8.0, None, None]}]
        rows = parse_rows(spec, 101, 256, "rl")
        lp = forward_logprobs(self.model, rows, a)
        far = math.exp(lp[1][1] + 8.0)
        self.assertGreater(far, 1.5)
        m = train_step(
            self.model, a, "rl", rows, loss_config(epsilon=0.5, epsilon_high=0.5), optimizer("rl", learning_rate=0.0)
        )
        self.assertAlmostEqual(m["importance_ratio_mean"], (7 + far) / 8, places=3)
        self.assertAlmostEqual(m["clipped_token_fraction"], 1 / 8)
        self.assertNotIn("truncated_token_fraction", m)
        for row, trainer in zip(rows, lp, strict=True):  # precalculated: original = the sampler's, old = the trainer's
            row.original_T = row.logprobs_T
            row.logprobs_T = torch.tensor([float("nan") if x is None else x for x in trainer])
        m = train_step(
            self.model,
            a,
            "rl",
            rows,
            loss_config(truncated_importance_sampling=1.5),
            optimizer("rl", learning_rate=0.0),
        )
        self.assertAlmostEqual(m["truncated_token_fraction"], 1 / 8)
        self.assertAlmostEqual(m["importance_ratio_mean"], 1.0, places=5)  # old is this very policy now

    def test_logprob_chunk_size(self):
        # ART's logprob_calculation_chunk_size: positions per logits chunk, capped by the memory bound.
        from engine.tests.test_lora import randomize

        a = randomize(self.adapter(seed=4), 3, 0.05)
        rows = parse_rows(self.ROWS, 101, 256, "rl")
        want = train_step(self.model, a, "rl", rows, loss_config(), optimizer("rl", learning_rate=0.0))
        got = train_step(
            self.model, a, "rl", rows, loss_config(), optimizer("rl", learning_rate=0.0), logprob_chunk_size=2
        )
        self.assertNotIn("logprob_chunk_size", want)
        self.assertEqual(got["logprob_chunk_size"], 2.0)
        self.assertAlmostEqual(got["loss"], want["loss"], places=5)
        self.assertAlmostEqual(got["grad_norm"], want["grad_norm"], places=4)
        self.assertEqual(TR.logits_chunk(self.model, 10**9), TR.LOGITS_CHUNK_ELEMENTS // 101)
        self.assertEqual(
            parse_train_step(
                train_request([{"tokens": [1, 2], "mask": [0, 1], "advantages": [0, 1]}], "rl", logprob_chunk_size=64)
            ).logprob_chunk_size,
            64,
        )
        with self.assertRaisesRegex(ValueError, "logprob_chunk_size"):
            parse_train_step(
                train_request([{"tokens": [1, 2], "mask": [0, 1], "advantages": [0, 1]}], "rl", logprob_chunk_size=0)
            )

    def test_nothing_trainable_changes_nothing(self):
        a = self.adapter()
        rows = parse_rows([{"tokens": [1, 2, 3], "mask": [0, 0, 0], "advantages": [0, 0, 0]}], 101, 256, "rl")
        before = [t.detach().clone() for t in a.parameters()]
        m = train_step(self.model, a, "rl", rows, loss_config(), optimizer("rl"))
        self.assertEqual((m["num_trainable_tokens"], m["grad_norm"], a.version), (0.0, 0.0, 0))
        self.assertTrue(all(torch.equal(x, y) for x, y in zip(before, a.parameters(), strict=True)))

    def test_memory_bounding_paths_give_the_same_gradients(self):
        # Query-chunked attention, per-block recomputation and chunked logits must change memory, not numbers.
        from engine.tests.test_lora import randomize

        a = randomize(self.adapter(seed=4), 3, 0.05)
        rows = parse_rows(self.ROWS[:1], 101, 256, "rl")

        def grads():
            for t in a.parameters():
                t.grad = None
            lora = L.LoraBatch([a], torch.float32, "cpu")
            new_T, _, _ = TR.row_logprobs(self.model, rows[0].tokens_T, rows[0].segment_ids_T, lora)
            (new_T * rows[0].mask_T).sum().backward()
            return new_T.detach(), [t.grad.clone() for t in a.parameters()]

        want_lp, want_g = grads()
        saved = (M.ATTN_CHUNK_ELEMENTS, M.CHECKPOINT_TOKENS, TR.LOGITS_CHUNK_ELEMENTS)
        M.ATTN_CHUNK_ELEMENTS, M.CHECKPOINT_TOKENS, TR.LOGITS_CHUNK_ELEMENTS = 4 * 9 * 2, 4, 101 * 3
        try:
            got_lp, got_g = grads()
        finally:
            M.ATTN_CHUNK_ELEMENTS, M.CHECKPOINT_TOKENS, TR.LOGITS_CHUNK_ELEMENTS = saved
        self.assertLess((got_lp - want_lp).abs().max().item(), 1e-5)
        for g1, g2 in zip(got_g, want_g, strict=True):
            self.assertLess((g1 - g2).abs().max().item(), 1e-5)

    def test_row_validation(self):
        bad = [
            [{"tokens": [1, 2], "mask": [0, 1, 1]}],
            [{"tokens": [1, 2], "mask": [1, 1]}],  # the first token has no prediction
            [{"tokens": [1, 2, 3], "segment_ids": [0, 1, 1], "mask": [0, 1, 1]}],  # nor does a segment's first
            [{"tokens": [1, 500], "mask": [0, 1]}],
            [{"tokens": [1, 2], "mask": [0, 1], "weights": [1, "x"]}],
            [{"tokens": [1, 2], "mask": [0, 1]}],  # rl without advantages
            [],
        ]
        for rows in bad:
            with self.subTest(rows=rows), self.assertRaises(ValueError):
                parse_rows(rows, 101, 256, "rl")
        with self.assertRaisesRegex(ValueError, "context"):
            parse_rows([{"tokens": [1] * 300}], 101, 256, None)


if __name__ == "__main__":
    unittest.main()
