"""Constrained decoding in the engine on llguidance: masks equal what the grammar allows, EOS only where it
may end, every kind of specification, refusals before any token, constrained and free rows in one batch (the
free row unchanged), a matcher that breaks failing its request alone, the budget ending inside a constraint,
and the protocol (check_constraint, load_base's constraint_kinds, generate)."""

import json
import os
import unittest
from concurrent.futures import Future

import torch

from engine.constraints import ConstraintError, ConstraintStore, Guide, Spec, grammar_of, ready_rows, step_masks
from engine.generate import Scheduler, SchedulerConfig
from engine.tests.helpers import EngineProcess, TempModel, generate_request
from engine.tests.test_generate import EOS, Run, drive
from engine.wire import WireError, parse_check_constraint, parse_generate

VOCAB = 101
# Text tokens of the test model's vocabulary; every other id is a special token (never text), EOS among them.
PIECES = {
    10: "{",
    11: '"',
    12: "a",
    13: "b",
    14: "c",
    15: "}",
    16: "x",
    17: '{"',
    18: '"}',
    19: "ab",
    20: "abc",
    21: "abca",
    22: '"a',
    23: 'ca"}',
    24: 'b"',
    25: '{"a',
    26: "{}",
    27: "1",
    28: "2",
    29: "+",
    30: "*",
    31: "(",
    32: ")",
    33: ":",
    34: ",",
    35: "[",
    36: "]",
    37: "Ġ",
    38: "12",
    39: "yes",
    40: "no",
}
TEXT = {"{", '"', "a", "b", "c", "}", "x"}


def write_tokenizer(folder: str) -> None:
    """A byte-level BPE tokenizer.json over PIECES (printable ASCII maps to itself; Ġ is the space), with
    every other id a special added token."""
    added = [
        {
            "id": i,
            "content": f"<|s{i}|>",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i in range(VOCAB)
        if i not in PIECES
    ]
    vocab = {piece: i for i, piece in PIECES.items()}
    vocab.update({token["content"]: token["id"] for token in added})
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "vocab": vocab,
            "merges": [],
        },
    }
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f)


def spec(kind: str, value, **options) -> Spec:
    return parse_check_constraint({"base": "b", "constraint": {kind: value, **options}}).constraint


def text_of(tokens):
    return "".join(PIECES[t] for t in tokens if t != EOS).replace("Ġ", " ")


class Fixture:
    """A test model with its tokenizer, and a store that knows it as base b."""

    def __init__(self):
        self.tm = TempModel("qwen2", std=0.15)
        write_tokenizer(self.tm.path)
        self.store = ConstraintStore()
        self.kinds = self.store.add_base("b", self.tm.path, VOCAB, [EOS])

    def compiled(self, s: Spec):
        return self.store.compile("b", s).result(timeout=60)


class TestMasks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.fx = Fixture()

    @classmethod
    def tearDownClass(cls):
        cls.fx.tm.dir.cleanup()

    def allowed(self, guide):
        self.assertEqual(ready_rows([guide], 60), [True])
        rows, allowed_CV = step_masks([guide], "cpu")
        self.assertEqual(rows, [0])
        return set(torch.nonzero(allowed_CV[0]).flatten().tolist())

    def test_masks_follow_the_grammar_and_eos_comes_only_at_its_end(self):
        guide = Guide(self.fx.compiled(spec("regex", '\\{"[a-c]{1,3}"\\}')))
        self.assertEqual(self.allowed(guide), {10, 17, 25})  # "{", '{"', '{"a'; never "{}"
        guide.advance(25)
        after = self.allowed(guide)  # one letter in: up to two more, or the closing quote (and brace)
        self.assertTrue({11, 12, 13, 14, 18, 19, 23, 24} <= after, after)
        self.assertFalse({20, 21, 16, 26, EOS} & after, after)
        guide.advance(23)  # 'ca"}' ends it
        self.assertEqual(self.allowed(guide), {EOS})
        guide.advance(EOS)
        ready_rows([guide], 60)
        self.assertIsNone(guide.error())

    def test_a_token_outside_the_mask_breaks_the_matcher_with_its_reason(self):
        guide = Guide(self.fx.compiled(spec("choice", ["yes", "no"])))
        self.assertEqual(self.allowed(guide), {39, 40})
        guide.advance(16)
        self.assertEqual(ready_rows([guide], 60), [True])
        self.assertRegex(str(guide.error()), "^constraint: .*(x|token)")

    def test_every_kind_compiles_and_accepts_its_text(self):
        cases = [
            (spec("json", {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}), '{"a":12}'),
            (spec("json_object", True, disable_any_whitespace=True), '{"a":[1,2]}'),
            (spec("grammar", 'start: e\ne: t ("+" t)*\nt: f ("*" f)*\nf: /[0-9]+/ | "(" e ")"'), "(1+2)*12"),
            (spec("grammar", 'root ::= "a" [bc]+'), "abcb"),  # GBNF, converted as vLLM's guidance backend does
        ]
        for s, text in cases:
            guide = Guide(self.fx.compiled(s))
            tokens = [t for t in self._tokens(text)]
            for t in tokens:
                self.assertIn(t, self.allowed(guide), f"{s.kind}: {text_of([t])!r} in {text!r}")
                guide.advance(t)
            self.assertIn(EOS, self.allowed(guide), f"{s.kind}: {text!r} may end")

    def _tokens(self, text: str):
        by_piece = {p: i for i, p in PIECES.items() if len(p) == 1}
        return [by_piece[ch] for ch in text.replace(" ", "Ġ")]

    def test_refusals_before_any_token_name_the_problem_and_are_cached(self):
        for s, message in [
            (spec("regex", "(ab"), "unclosed group"),
            (spec("regex", "a(?=b)"), "look-around"),
            (spec("json", {"type": "strange"}), "strange"),
            (spec("grammar", "start: foo"), "foo"),
        ]:
            with self.subTest(kind=s.kind, value=s.value):
                future = self.fx.store.compile("b", s)
                with self.assertRaisesRegex(ConstraintError, message):
                    future.result(timeout=120)
                self.assertIs(self.fx.store.compile("b", s), future)

    def test_the_layout_in_x_guidance_decides_whitespace(self):
        """The server's default layout (json.dumps' separators, nothing else) travels in the schema's x-guidance."""
        compact = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
        schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "x-guidance": compact}
        guide = Guide(self.fx.compiled(spec("json", schema)))
        for t in (25, 11, 33):  # {"a  "  :
            guide.advance(t)
            ready_rows([guide], 60)
        self.assertEqual(self.allowed(guide), {37}, "exactly one space after the colon")
        guide.advance(37)
        ready_rows([guide], 60)
        self.assertNotIn(37, self.allowed(guide), "and no second one")
        self.assertIn(27, self.allowed(guide))

    def test_additional_properties_off_where_asked(self):
        schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
        self.assertIn(
            '"additionalProperties":false', grammar_of(spec("json", schema, disable_additional_properties=True))
        )
        self.assertNotIn("additionalProperties", grammar_of(spec("json", schema)))

    def test_the_wire_names_a_bad_specification(self):
        for constraint, message in [
            ({}, "exactly one"),
            ({"regex": "a", "choice": ["a"]}, "exactly one"),
            ({"choice": []}, "constraint.choice must be"),
            ({"json": "x"}, "constraint.json must be"),
            ({"regex": "a", "whitespace_pattern": " "}, "unknown keys"),
        ]:
            with self.subTest(constraint=constraint), self.assertRaisesRegex(WireError, message):
                parse_generate(generate_request("g", prompt=[1], constraint=constraint))
        self.assertEqual(spec("regex", "a").key, spec("regex", "a").key)
        self.assertNotEqual(spec("regex", "a").key, spec("regex", "b").key)

    def test_a_base_without_tokenizer_json_cannot_be_constrained(self):
        store = ConstraintStore()
        self.assertEqual(store.add_base("bare", os.path.dirname(self.fx.tm.path) + "/nowhere", VOCAB, [EOS]), [])
        with self.assertRaisesRegex(ConstraintError, "cannot be constrained"):
            store.compile("bare", spec("regex", "a")).result()


class TestConstrainedBatch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.fx = Fixture()
        cls.compiled = cls.fx.compiled(spec("regex", '\\{"[a-c]{1,3}"\\}'))

    @classmethod
    def tearDownClass(cls):
        cls.fx.tm.dir.cleanup()

    def sched(self):
        return Scheduler(self.fx.tm.model, [EOS], SchedulerConfig(max_len=256, max_batch=8))

    def constrained(self, compiled=None, **kw):
        run = Run([5, 6, 7], **kw)
        run.req.constraint = compiled or self.compiled
        return run

    def test_mixed_batch_constrained_rows_match_and_free_rows_are_unchanged(self):
        free_kw = dict(seed=4, max_tokens=12, ignore_eos=True, logprobs=0)
        free = Run([9, 8, 7, 6], **free_kw)
        runs = [self.constrained(seed=s, n=2, max_tokens=20, logprobs=0) for s in range(6)]
        greedy = self.constrained(temperature=0, max_tokens=20, ignore_eos=True, min_tokens=3)
        drive(
            self.sched(),
            [(0, free), (0, runs[0]), (1, runs[1]), (2, greedy)] + [(3 + i, r) for i, r in enumerate(runs[2:])],
        )
        for run in runs + [greedy]:
            for seq, tokens in run.tokens.items():
                self.assertEqual(tokens[-1], EOS)
                self.assertRegex(text_of(tokens), r'^\{"[a-c]{1,3}"\}$')
                self.assertEqual(run.finish[seq], ("stop", None))
        alone = Run([9, 8, 7, 6], **free_kw)
        drive(self.sched(), [(0, alone)])
        self.assertEqual(free.tokens, alone.tokens)
        self.assertLess(max(abs(a - b) for a, b in zip(free.logprobs[0], alone.logprobs[0], strict=True)), 1e-5)
        # Reported logprobs stay the raw model's, constraint or not.
        self.assertTrue(all(lp <= 0 for run in runs for lps in run.logprobs.values() for lp in lps))

    def test_budget_ending_inside_the_constraint_is_length(self):
        run = self.constrained(seed=1, max_tokens=2)
        drive(self.sched(), [(0, run)])
        self.assertEqual(run.finish[0], ("length", None))
        self.assertTrue(text_of(run.tokens[0]).startswith("{"))

    def test_a_row_whose_mask_is_late_sits_steps_out_while_the_others_decode(self):
        slow = self.constrained(seed=3, max_tokens=20)
        free = Run([9, 8, 7, 6], seed=4, max_tokens=12, ignore_eos=True)
        sched = self.sched()
        sched.submit(slow.req)
        sched.submit(free.req)
        sched.step()  # both admitted (a token each) and one decode step (another)
        guide = next(s.guide for s in sched.running if s.req is slow.req)
        computed, guide.next_W = guide.next_W.result(timeout=60), Future()  # as if its mask took long
        for _ in range(3):
            sched.step()
        self.assertEqual((len(slow.tokens[0]), len(free.tokens[0])), (2, 5))
        guide.next_W.set_result(computed)
        drive(sched, [])
        self.assertRegex(text_of(slow.tokens[0]), r'^\{"[a-c]{1,3}"\}$')
        alone = self.constrained(seed=3, max_tokens=20)
        drive(self.sched(), [(0, alone)])
        self.assertEqual(slow.tokens, alone.tokens)  # sitting out changed nothing but the timing

    def test_a_broken_matcher_fails_its_request_alone(self):
        doomed = self.constrained(seed=2, n=2, max_tokens=20)
        free = Run([9, 8, 7, 6], seed=4, max_tokens=12, ignore_eos=True)
        sched = self.sched()
        sched.submit(doomed.req)
        sched.submit(free.req)
        sched.step()
        for seq in [s for s in sched.running if s.req is doomed.req]:
            seq.guide.next_W.result(timeout=60)
            seq.guide.advance(16)  # a token its grammar refuses, as if sampled outside the mask
        drive(sched, [])
        self.assertIsInstance(doomed.result["error"], ConstraintError)
        self.assertRegex(str(doomed.result["error"]), "^constraint: ")
        self.assertEqual(len(free.tokens[0]), 12)
        self.assertNotIn("error", free.result)


class TestProtocol(unittest.TestCase):
    def test_load_base_announces_kinds_check_refuses_before_generate_and_generate_obeys(self):
        tm = TempModel("qwen2", std=0.15)
        write_tokenizer(tm.path)
        engine = EngineProcess()
        try:
            loaded = engine.call({"id": "l1", "op": "load_base", "base": "b", "path": tm.path})
            self.assertEqual(set(loaded["constraint_kinds"]), {"json", "json_object", "regex", "choice", "grammar"})
            good = {"regex": '\\{"[a-c]{1,3}"\\}'}
            self.assertEqual(
                engine.call({"id": "c1", "op": "check_constraint", "base": "b", "constraint": good}),
                {"id": "c1", "done": True, "ok": True},
            )
            bad = engine.call({"id": "c2", "op": "check_constraint", "base": "b", "constraint": {"regex": "(ab"}})
            self.assertEqual(bad["error"]["code"], "bad_request")
            self.assertIn("unclosed group", bad["error"]["message"])
            unknown = engine.call({"id": "c3", "op": "check_constraint", "base": "nope", "constraint": good})
            self.assertEqual(unknown["error"]["code"], "not_found")
            refused = engine.call(generate_request("g0", prompt=[5, 6], max_tokens=4, constraint={"regex": "(ab"}))
            self.assertEqual(refused["error"]["code"], "bad_request")
            for seed in range(3):
                rid = f"s{seed}"
                # A new specification each time: generate compiles it on the pool before admitting the request.
                engine.send(
                    generate_request(
                        rid,
                        prompt=[5, 6],
                        max_tokens=30,
                        seed=seed,
                        n=2,
                        constraint={"regex": f'\\{{"[a-c]{{1,{seed + 1}}}"\\}}'},
                    )
                )
                frames = engine.until_done(rid)
                self.assertNotIn("error", frames[-1])
                tokens = {}
                for frame in frames:
                    if frame.get("type") == "tokens":
                        tokens.setdefault(frame["seq"], []).extend(frame["tokens"])
                for seq in tokens.values():
                    self.assertRegex(text_of(seq), f'^\\{{"[a-c]{{1,{seed + 1}}}"\\}}$')
        finally:
            engine.close()
            tm.dir.cleanup()


if __name__ == "__main__":
    unittest.main()
