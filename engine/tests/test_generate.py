"""Continuous batching: joins/leaves between steps, mixed adapters, n sharing a prefill, stops, cancel, logprobs."""

import unittest

import torch

from engine import lora as L
from engine.generate import Cancelled, GenRequest, PrefixCache, Scheduler, SchedulerConfig
from engine.tests.helpers import TempModel, lora, parse_rows, sampling
from engine.tests.test_lora import randomize
from engine.train import forward_logprobs

EOS = 2


class Run:
    """Collects what one request streams."""

    def __init__(self, prompt, adapter=None, **params):
        self.tokens, self.logprobs, self.finish, self.prompt_lp = {}, {}, {}, None
        self.result = None
        p = sampling(101, **params)
        self.req = GenRequest(
            id=str(id(self)), prompt=list(prompt), params=p, emit=self._emit, finish=self._done, adapter=adapter
        )

    def _emit(self, m):
        if m["type"] == "tokens":
            self.tokens.setdefault(m["seq"], []).extend(m["tokens"])
            if "logprobs" in m:
                self.logprobs.setdefault(m["seq"], []).extend(m["logprobs"])
        elif m["type"] == "finish":
            self.finish[m["seq"]] = (m["finish_reason"], m["stop_token_id"])
        elif m["type"] == "prompt":
            self.prompt_lp = m["prompt_logprobs"]

    def _done(self, payload):
        self.result = payload


def drive(sched: Scheduler, joins, max_steps=500) -> int:
    """joins: [(step, Run)]; steps until every run has finished. Returns the number of steps."""
    pending = sorted(joins, key=lambda j: j[0])
    step = 0
    while pending or sched.has_work():
        while pending and pending[0][0] <= step:
            sched.submit(pending.pop(0)[1].req)
        sched.step()
        step += 1
        if step > max_steps:
            raise AssertionError("generation did not finish")
    return step


class TestGenerate(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tm = TempModel("qwen3", std=0.15)
        cls.model = cls.tm.model
        cls.a1 = randomize(L.new_adapter("a1", "b", cls.tm.args, lora(seed=1), "cpu"), 11, 0.2)
        cls.a2 = randomize(L.new_adapter("a2", "b", cls.tm.args, lora(rank=4, seed=2), "cpu"), 12, 0.2)

    @classmethod
    def tearDownClass(cls):
        cls.tm.dir.cleanup()

    def sched(self, **kw) -> Scheduler:
        return Scheduler(self.model, [EOS], SchedulerConfig(**{"max_len": 256, **kw}))

    def specs(self):
        return [
            (0, dict(prompt=[5, 6, 7, 8, 9], adapter=self.a1, seed=1, max_tokens=12, logprobs=0, ignore_eos=True)),
            (3, dict(prompt=[10, 11], adapter=None, temperature=0, max_tokens=6, logprobs=0, ignore_eos=True)),
            (
                5,
                dict(
                    prompt=[40, 41, 42, 43, 44, 45, 46],
                    adapter=self.a2,
                    seed=5,
                    top_p=0.9,
                    n=2,
                    max_tokens=9,
                    logprobs=0,
                    ignore_eos=True,
                ),
            ),
            (
                5,
                dict(
                    prompt=[7, 7, 7],
                    adapter=self.a1,
                    seed=7,
                    top_k=20,
                    repetition_penalty=1.3,
                    max_tokens=15,
                    logprobs=0,
                    ignore_eos=True,
                ),
            ),
            (9, dict(prompt=[99, 98], adapter=self.a2, seed=8, max_tokens=4, logprobs=0, ignore_eos=True)),
        ]

    def test_continuous_batching_with_mixed_adapters_equals_alone(self):
        together = [(step, Run(**kw)) for step, kw in self.specs()]
        drive(self.sched(max_batch=4), together)  # max_batch 4 < 6 sequences: some wait for a free slot
        for (_step, kw), (_, run) in zip(self.specs(), together, strict=True):
            alone = Run(**kw)
            drive(self.sched(), [(0, alone)])
            self.assertEqual(run.tokens, alone.tokens)
            self.assertEqual(run.finish, alone.finish)
            for seq in alone.logprobs:
                self.assertLess(
                    max(abs(a - b) for a, b in zip(run.logprobs[seq], alone.logprobs[seq], strict=True)), 1e-5
                )
            self.assertEqual(run.result, {"prompt_tokens": len(kw["prompt"]), "cached_tokens": 0})

    def test_seeds_and_temperature_zero(self):
        def gen(**kw):
            r = Run([3, 4, 5], max_tokens=10, ignore_eos=True, **kw)
            drive(self.sched(), [(0, r)])
            return r.tokens[0]

        self.assertEqual(gen(seed=1), gen(seed=1))
        self.assertNotEqual(gen(seed=1), gen(seed=2))
        self.assertEqual(gen(temperature=0), gen(temperature=0))
        self.assertEqual(gen(temperature=0, seed=1), gen(temperature=0, seed=2))

    def test_n_samples_share_one_prefill(self):
        calls = []
        original = self.model.forward

        def counting(tokens_BT, ctx, lora=None):
            calls.append(tuple(tokens_BT.shape))
            return original(tokens_BT, ctx, lora)

        self.model.forward = counting
        try:
            greedy = Run([8, 9, 10, 11], temperature=0, n=3, max_tokens=5, ignore_eos=True)
            drive(self.sched(), [(0, greedy)])
        finally:
            del self.model.forward
        self.assertEqual([c for c in calls if c[1] > 1], [(1, 4)])  # one prefill for three sequences
        self.assertEqual(greedy.tokens[0], greedy.tokens[1])
        self.assertEqual(greedy.tokens[0], greedy.tokens[2])
        sampled = Run([8, 9, 10, 11], seed=3, n=2, max_tokens=8, ignore_eos=True)
        drive(self.sched(), [(0, sampled)])
        self.assertNotEqual(sampled.tokens[0], sampled.tokens[1])

    def test_identical_waiting_requests_share_one_prefill_and_sample_as_alone(self):
        prompt = [8, 9, 10, 11, 12, 13]
        specs = [
            dict(seed=1, max_tokens=6, logprobs=0, ignore_eos=True),
            dict(seed=2, n=2, max_tokens=4, logprobs=0, ignore_eos=True),
            dict(temperature=0, max_tokens=1, logprobs=0),
            dict(seed=3, max_tokens=5, logprobs=0, ignore_eos=True, adapter=self.a1),  # another adapter's KV
            dict(seed=4, max_tokens=3, logprobs=0, ignore_eos=True, prompt_logprobs=0),
        ]  # its own prefill
        calls = []
        original = self.model.forward

        def counting(tokens_BT, ctx, lora=None):
            calls.append(tuple(tokens_BT.shape))
            return original(tokens_BT, ctx, lora)

        together = [Run(prompt, **kw) for kw in specs]
        self.model.forward = counting
        try:
            drive(self.sched(), [(0, run) for run in together])
        finally:
            del self.model.forward
        self.assertEqual([c for c in calls if c[1] > 1], [(1, 6)] * 3)  # the first three, the adapter's, the last
        self.assertEqual([r.result["cached_tokens"] for r in together], [0, 5, 5, 0, 0])
        for kw, run in zip(specs, together, strict=True):
            alone = Run(prompt, **kw)
            drive(self.sched(), [(0, alone)])
            self.assertEqual(run.tokens, alone.tokens)
            self.assertEqual(run.finish, alone.finish)
            for seq in alone.logprobs:
                self.assertLess(
                    max(abs(a - b) for a, b in zip(run.logprobs[seq], alone.logprobs[seq], strict=True)), 1e-5
                )

    def test_a_sequence_done_at_its_first_token_takes_no_cache_slot(self):
        sched = self.sched(max_batch=32)
        slots = sched.cache.slots
        runs = [Run([20, 21, 22], seed=s, max_tokens=1) for s in range(16)]
        drive(sched, [(0, run) for run in runs])
        self.assertEqual(sched.cache.slots, slots)  # 16 requests of one token: no slot grown, no KV copied
        self.assertEqual([len(r.tokens[0]) for r in runs], [1] * 16)

    def test_stop_rules(self):
        stop = Run([5, 6], temperature=0, logit_bias={"17": 100}, stop_token_ids=[17], max_tokens=9)
        eos = Run([5, 6], temperature=0, logit_bias={str(EOS): 100}, max_tokens=9)
        ignored = Run([5, 6], temperature=0, logit_bias={str(EOS): 100}, ignore_eos=True, max_tokens=4)
        delayed = Run([5, 6], temperature=0, logit_bias={str(EOS): 100}, min_tokens=3, max_tokens=9)
        drive(self.sched(), [(0, stop), (0, eos), (0, ignored), (0, delayed)])
        self.assertEqual((stop.tokens[0], stop.finish[0]), ([17], ("stop", 17)))
        self.assertEqual((eos.tokens[0], eos.finish[0]), ([EOS], ("stop", None)))
        self.assertEqual((ignored.tokens[0], ignored.finish[0]), ([EOS] * 4, ("length", None)))
        self.assertEqual(len(delayed.tokens[0]), 4)
        self.assertEqual(delayed.tokens[0][-1], EOS)
        self.assertNotIn(EOS, delayed.tokens[0][:3])

    def test_context_limit_ends_with_length(self):
        r = Run(list(range(3, 13)), temperature=0, ignore_eos=True)
        drive(self.sched(max_len=16), [(0, r)])
        self.assertEqual((len(r.tokens[0]), r.finish[0][0]), (6, "length"))
        with self.assertRaisesRegex(ValueError, "context"):
            self.sched(max_len=16).submit(Run(list(range(3, 19))).req)

    def test_cancel_within_one_step(self):
        sched = self.sched()
        keep = Run([5, 6, 7], seed=1, max_tokens=30, ignore_eos=True)
        gone = Run([5, 6, 7], seed=2, n=2, max_tokens=30, ignore_eos=True)
        sched.submit(keep.req)
        sched.submit(gone.req)
        for _ in range(3):
            sched.step()
        produced = len(gone.tokens[0])
        gone.req.cancelled = True
        sched.step()
        self.assertIsInstance(gone.result["error"], Cancelled)
        self.assertEqual(len(gone.tokens[0]), produced)
        self.assertEqual(len(sched.running), 1)
        drive(sched, [])
        self.assertEqual(len(keep.tokens[0]), 30)

    def test_sampler_logprobs_equal_trainer_logprobs(self):
        prompt = [12, 13, 14, 15, 16, 17]
        r = Run(prompt, adapter=self.a1, seed=4, max_tokens=20, logprobs=0, prompt_logprobs=0, ignore_eos=True)
        other = Run([3, 3, 3], adapter=self.a2, seed=5, max_tokens=20, ignore_eos=True)  # a mixed batch
        drive(self.sched(), [(0, other), (1, r)])
        seq = prompt + r.tokens[0]
        rows = parse_rows([{"tokens": seq}], 101, 256, None)
        trainer = forward_logprobs(self.model, rows, self.a1)[0]
        diffs = [abs(a - b) for a, b in zip(r.logprobs[0], trainer[len(prompt) :], strict=True)]
        self.assertLess(max(diffs), 1e-4)
        self.assertIsNone(r.prompt_lp[0])
        pdiffs = [abs(e["logprob"] - t) for e, t in zip(r.prompt_lp[1:], trainer[1 : len(prompt)], strict=True)]
        self.assertEqual(len(pdiffs), len(prompt) - 1)
        self.assertLess(max(pdiffs), 1e-4)


if __name__ == "__main__":
    unittest.main()


class TestPrefixCache(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tm = TempModel("qwen3", std=0.15)
        cls.adapter = randomize(L.new_adapter("a", "b", cls.tm.args, lora(seed=3), "cpu"), 13, 0.2)

    @classmethod
    def tearDownClass(cls):
        cls.tm.dir.cleanup()

    def run_all(self, prefix_tokens, specs):
        sched = Scheduler(
            self.tm.model, [EOS], SchedulerConfig(max_len=256, prefill_chunk=16, prefix_cache_tokens=prefix_tokens)
        )
        runs = [(step, Run(**kw)) for step, kw in specs]
        drive(sched, runs)
        return [run for _, run in runs]

    def test_a_shared_prefix_is_reused_and_samples_exactly_as_a_full_prefill(self):
        shared = [(7 * i) % 90 + 3 for i in range(60)]
        specs = [
            (0, dict(prompt=shared + [4, 5], seed=1, max_tokens=5, logprobs=0, ignore_eos=True)),
            (2, dict(prompt=shared + [4, 5], seed=2, max_tokens=5, logprobs=0, ignore_eos=True)),  # all but the last
            (3, dict(prompt=shared[:50] + [9, 9, 9], seed=3, max_tokens=5, logprobs=0, ignore_eos=True, n=2)),
            (4, dict(prompt=shared + [4, 5], adapter=self.adapter, seed=4, max_tokens=5, logprobs=0, ignore_eos=True)),
            (9, dict(prompt=shared[:10], seed=5, max_tokens=5, logprobs=0, ignore_eos=True)),  # shorter than min
        ]
        cached, plain = self.run_all(256, specs), self.run_all(0, specs)
        self.assertEqual([r.result["cached_tokens"] for r in cached], [0, 61, 50, 0, 0])
        self.assertEqual([r.result["cached_tokens"] for r in plain], [0] * 5)
        for a, b in zip(cached, plain, strict=True):
            self.assertEqual(a.tokens, b.tokens)
            for s in a.logprobs:
                for x, y in zip(a.logprobs[s], b.logprobs[s], strict=True):
                    self.assertAlmostEqual(x, y, places=4)

    def test_bounded_in_positions_least_recently_used_first(self):
        cache = PrefixCache(max_tokens=100, min_tokens=4)
        kv = lambda n: (torch.zeros(1, 1, n, 2), torch.zeros(1, 1, n, 2))  # noqa: E731
        cache.store(None, list(range(60)), lambda: kv(60))
        cache.store(None, list(range(100, 150)), lambda: kv(50))  # 110 > 100: the first goes
        self.assertIsNone(cache.lookup(None, list(range(60))))
        self.assertEqual(cache.lookup(None, list(range(100, 150)) + [1])[1], 50)
        self.assertIsNone(cache.lookup(self.adapter, list(range(100, 150)) + [1]))  # another adapter's KV
        cache.store(None, list(range(200)), lambda: kv(200))  # too long to keep
        self.assertEqual(cache.tokens, 50)
