"""Each sampling parameter on synthetic logits: it changes the distribution the way vLLM defines it."""

import collections
import unittest

import torch

from engine.sampling import SeqSampler, prompt_mask, sample_step, static_bias
from engine.tests.helpers import sampling

V = 12
EOS = 11


def sampler(prompt=(), index=0, **kw) -> SeqSampler:
    p = sampling(V, **kw)
    return SeqSampler(
        p, list(prompt), index, V, static_bias(p, V, "cpu"), prompt_mask(p, list(prompt), V, "cpu"), "cpu"
    )


def logits(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


BASE = [0.5, 2.0, 1.0, 0.0, -1.0, 1.5, 0.2, 0.1, -0.5, 0.3, 0.4, 1.9]  # argmax 1, EOS (11) close behind


def draw(n: int, row=BASE, **kw) -> collections.Counter:
    s = sampler(seed=0, **kw)
    out = collections.Counter()
    for _ in range(n):
        out[sample_step(logits(row), [s], [EOS]).tokens[0]] += 1
    return out


class TestSampling(unittest.TestCase):
    def test_temperature_zero_is_argmax_and_logprobs_are_raw(self):
        s = sampler(temperature=0, logprobs=3, logit_bias={"5": 5.0})
        r = sample_step(logits(BASE), [s], [EOS])
        self.assertEqual(r.tokens, [5])  # argmax after the bias
        raw = torch.log_softmax(logits(BASE), -1)[0]
        self.assertAlmostEqual(r.logprobs[0], raw[5].item(), places=6)  # but the logprob is unbiased
        self.assertEqual([t for t, _ in r.top[0]], [1, 11, 5])

    def test_top_k_one_equals_argmax(self):
        self.assertEqual(set(draw(50, top_k=1)), {1})

    def test_top_k_and_top_p_restrict_support(self):
        self.assertEqual(set(draw(400, top_k=3)), {1, 11, 5})
        probs = torch.softmax(logits(BASE), -1)[0].tolist()
        keep = [t for t in range(V) if sum(q for q in probs if q > probs[t]) < 0.5]
        self.assertEqual(set(draw(400, top_p=0.5)), set(keep))

    def test_top_p_draws_follow_the_nucleus_distribution(self):
        # Rejection sampling must reproduce the renormalised nucleus exactly, peaked or flat.
        for row, top_p in ((BASE, 0.5), ([3.0, 2.5, 2.0] + [0.0] * (V - 3), 0.9), ([0.0] * V, 0.2)):
            with self.subTest(top_p=top_p, row=row[:3]):
                probs = torch.softmax(logits(row), -1)[0].tolist()
                # The nucleus: tokens whose strictly-more-probable mass is below top_p (ties kept together).
                keep = [t for t in range(V) if sum(q for q in probs if q > probs[t]) < top_p]
                n = 4000
                got = draw(n, row=row, top_p=top_p)
                self.assertEqual(set(got), set(keep))
                total = sum(probs[t] for t in keep)
                for t in keep:
                    self.assertAlmostEqual(got[t] / n, probs[t] / total, delta=0.03)

    def test_min_p(self):
        probs = torch.softmax(logits(BASE), -1)[0]
        keep = {t for t in range(V) if probs[t] >= 0.5 * probs.max()}
        self.assertEqual(set(draw(400, min_p=0.5)), keep)

    def test_logit_bias_minus_100_bans(self):
        self.assertNotIn(1, draw(300, logit_bias={"1": -100}))
        self.assertEqual(set(draw(20, logit_bias={"7": 100})), {7})

    def test_allowed_token_ids(self):
        self.assertEqual(set(draw(300, allowed_token_ids=[3, 4, 8])), {3, 4, 8})

    def test_min_tokens_delays_eos_and_stop_ids(self):
        row = [0.0] * V
        row[EOS], row[6] = 10.0, 9.0
        s = sampler(temperature=0, min_tokens=2, stop_token_ids=[6])
        got = []
        for _ in range(3):
            t = sample_step(logits(row), [s], [EOS]).tokens[0]
            s.append(t)
            got.append(t)
        self.assertNotIn(EOS, got[:2])
        self.assertNotIn(6, got[:2])
        self.assertEqual(got[2], EOS)
        # ignore_eos: EOS is an ordinary token, so min_tokens does not ban it.
        s = sampler(temperature=0, min_tokens=2, ignore_eos=True)
        self.assertEqual(sample_step(logits(row), [s], [EOS]).tokens[0], EOS)

    def test_bad_words(self):
        row = [0.0] * V
        row[4], row[5] = 5.0, 4.0
        s = sampler(temperature=0, bad_words_ids=[[3, 4], [9]])
        self.assertEqual(sample_step(logits(row), [s], [EOS]).tokens[0], 4)  # [3,4] needs a preceding 3
        s.append(3)
        self.assertEqual(sample_step(logits(row), [s], [EOS]).tokens[0], 5)
        row[9] = 50.0
        self.assertNotEqual(sample_step(logits(row), [s], [EOS]).tokens[0], 9)

    def test_penalties(self):
        row = [0.0] * V
        row[2], row[3], row[4] = 2.0, 1.9, -1.0
        # Repetition penalty (prompt tokens count): positive logits divided, negative multiplied.
        s = sampler(prompt=[2, 4], temperature=0, repetition_penalty=2.0)
        self.assertEqual(sample_step(logits(row), [s], [EOS]).tokens[0], 3)
        # Frequency penalty scales with the count of generated occurrences; presence does not.
        s = sampler(temperature=0, frequency_penalty=0.06)
        s.append(2)
        self.assertEqual(sample_step(logits(row), [s], [EOS]).tokens[0], 2)  # 2.0 - 0.06 > 1.9
        s.append(2)
        self.assertEqual(sample_step(logits(row), [s], [EOS]).tokens[0], 3)  # 2.0 - 0.12 < 1.9
        s = sampler(temperature=0, presence_penalty=0.2)
        s.append(2)
        self.assertEqual(sample_step(logits(row), [s], [EOS]).tokens[0], 3)
        # A negative presence penalty encourages repetition.
        s = sampler(temperature=0, presence_penalty=-0.5)
        s.append(4)
        row[4] = 1.8
        self.assertEqual(sample_step(logits(row), [s], [EOS]).tokens[0], 4)

    def test_seeds(self):
        def run(seed, index=0):
            s = sampler(seed=seed, index=index)
            return [sample_step(logits([0.0] * V), [s], [EOS]).tokens[0] for _ in range(30)]

        self.assertEqual(run(1), run(1))
        self.assertNotEqual(run(1), run(2))
        self.assertNotEqual(run(1, 0), run(1, 1))  # the n samples of one request differ

    def test_rows_are_independent_of_the_batch(self):
        a, b = sampler(seed=4), sampler(seed=4)
        others = [sampler(seed=9, top_k=2), sampler(temperature=0, repetition_penalty=1.5)]
        row = logits(BASE)
        alone = [sample_step(row, [a], [EOS]).tokens[0] for _ in range(20)]
        batched = [sample_step(row.repeat(3, 1), [others[0], b, others[1]], [EOS]).tokens[1] for _ in range(20)]
        self.assertEqual(alone, batched)

    def test_sampled_frequencies_follow_temperature(self):
        hot = draw(2000, temperature=5.0)
        cold = draw(2000, temperature=0.3)
        self.assertGreater(cold[1], hot[1])
        self.assertGreater(len(hot), len(cold))

    def test_validation(self):
        for bad in (
            {"temperature": -1},
            {"top_p": 0},
            {"top_k": -2},
            {"logit_bias": {"x": 1}},
            {"allowed_token_ids": [V]},
            {"bad_words_ids": [[]]},
            {"n": 0},
            {"max_tokens": 0},
            {"min_tokens": 5, "max_tokens": 2},
            {"seed": "x"},
            {"logprobs": True},
        ):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                sampling(V, **bad)
        with self.assertRaisesRegex(ValueError, "generate: field temperature must be given"):
            sampling(V, temperature=None)
        p = sampling(V, top_k=0, seed=None)
        self.assertEqual((p.top_k, p.seed), (-1, None))


if __name__ == "__main__":
    unittest.main()
