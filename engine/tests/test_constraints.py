"""Constrained decoding in the engine: masks equal a token-by-token walk, EOS only where the automaton
accepts, constrained and free rows in one batch, the budget ending inside a constraint, and the wire."""

import base64
import struct
import unittest
import zlib

import torch

from engine.constraints import DEAD, Automaton, ConstraintStore, TokenTable
from engine.generate import Scheduler, SchedulerConfig
from engine.tests.helpers import EngineProcess, TempModel, generate_request
from engine.tests.test_generate import EOS, Run, drive
from engine.wire import ConstraintRef, parse_constraint, parse_generate, parse_load_base

VOCAB = 101
# Byte classes of the automaton below: 0 other, 1 "{", 2 '"', 3 a-c, 4 "}".
CLASS_OF = [0] * 256
CLASS_OF[ord("{")], CLASS_OF[ord('"')], CLASS_OF[ord("}")] = 1, 2, 4
for ch in "abc":
    CLASS_OF[ord(ch)] = 3
# {"[a-c]{1,3}"}: 0 -{-> 1 -"-> 2 -a-> 3 -a-> 4 -a-> 5, 3|4|5 -"-> 6 -}-> 7 (accepting).
EDGES = {(0, 1): 1, (1, 2): 2, (2, 3): 3, (3, 3): 4, (4, 3): 5, (3, 2): 6, (4, 2): 6, (5, 2): 6, (6, 4): 7}
STATES, CLASSES, ACCEPTING = 8, 5, [7]
PIECES = {10: "{", 11: '"', 12: "a", 13: "b", 14: "c", 15: "}", 16: "x", 17: '{"', 18: '"}', 19: "ab", 20: "abc",
          21: "abca", 22: '"a', 23: 'ca"}', 24: "b\"", 25: '{"a', 26: "{}"}


def wire(edges=EDGES, states=STATES, classes=CLASSES, accepting=ACCEPTING, class_of=CLASS_OF, ident="abc"):
    table = [DEAD] * (states * classes)
    for (state, cls), to in edges.items():
        table[state * classes + cls] = to
    packed = struct.pack("<%di" % len(table), *table)
    return {"id": ident, "states": states, "classes": classes, "class_of": base64.b64encode(bytes(class_of)).decode(),
            "start": 0, "accepting": accepting, "table": base64.b64encode(zlib.compress(packed)).decode()}


def token_bytes():
    return [base64.b64encode(PIECES[i].encode()).decode() if i in PIECES else None for i in range(VOCAB)]


def table() -> TokenTable:
    """The token bytes as load_base's parser hands them to the engine."""
    parsed = parse_load_base({"base": "b", "path": "/m", "token_bytes": token_bytes()}).token_bytes
    return TokenTable(parsed, VOCAB, torch.device("cpu"))


def ref(constraint: dict) -> ConstraintRef:
    return parse_generate(generate_request("g", prompt=[1], constraint=constraint)).constraint


def automaton(constraint: dict, tokens: TokenTable) -> Automaton:
    return Automaton(parse_constraint(ref(constraint)), tokens, [EOS])


def walk(state, text):
    for byte in text.encode():
        state = EDGES.get((state, CLASS_OF[byte]), DEAD)
        if state == DEAD:
            return DEAD
    return state


def accepted(tokens):
    text = "".join(PIECES[t] for t in tokens if t != EOS)
    return walk(0, text) in ACCEPTING


class TestMasks(unittest.TestCase):
    def setUp(self):
        self.automaton = automaton(wire(), table())

    def test_mask_of_every_state_is_the_token_walk(self):
        for state in range(STATES):
            mask = self.automaton.mask(state)
            expected = {t for t, piece in PIECES.items() if walk(state, piece) != DEAD}
            if state in ACCEPTING:
                expected.add(EOS)
            self.assertEqual(set(torch.nonzero(mask).flatten().tolist()), expected, f"state {state}")

    def test_tokens_that_split_or_span_the_literal(self):
        allowed = lambda state: set(torch.nonzero(self.automaton.mask(state)).flatten().tolist())
        self.assertIn(25, allowed(0))  # '{"a' crosses two literal bytes into the letters
        self.assertNotIn(26, allowed(0))  # "{}" leaves the automaton on its second byte
        self.assertEqual(allowed(7), {EOS})  # complete: EOS is the only way on
        self.assertNotIn(EOS, allowed(3))
        self.assertEqual(self.automaton.step(0, 25), 3)
        self.assertEqual(self.automaton.step(3, 23), 7)  # 'ca"}' ends it
        self.assertEqual(self.automaton.step(5, 12), DEAD)  # a fourth letter is too many

    def test_malformed_wire_is_a_value_error(self):
        tokens = table()
        for broken in [{**wire(), "table": "AAAA"}, {**wire(), "states": 0}, {**wire(), "accepting": [99]},
                       {**wire(), "class_of": base64.b64encode(bytes(255)).decode()}, {"id": "x"},
                       wire(edges={(0, 1): 42})]:
            with self.assertRaises(ValueError):
                automaton(broken, tokens)

    def test_store_reuses_an_automaton_and_its_masks_by_id(self):
        store = ConstraintStore(max_automata=2)
        tokens = table()
        first = store.get("b", tokens, ref(wire()), [EOS])
        first.mask(0)
        self.assertIs(store.get("b", tokens, ref(wire()), [EOS]), first)
        self.assertIn(0, first.cached)
        store.get("b", tokens, ref(wire(ident="other")), [EOS])
        store.get("b", tokens, ref(wire(ident="third")), [EOS])
        self.assertIsNot(store.get("b", tokens, ref(wire()), [EOS]), first)  # evicted, rebuilt


class TestConstrainedBatch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tm = TempModel("qwen2", std=0.15)
        cls.automaton = automaton(wire(), table())

    @classmethod
    def tearDownClass(cls):
        cls.tm.dir.cleanup()

    def sched(self):
        return Scheduler(self.tm.model, [EOS], SchedulerConfig(max_len=256, max_batch=8))

    def constrained(self, **kw):
        run = Run([5, 6, 7], **kw)
        run.req.constraint = self.automaton
        return run

    def test_mixed_batch_constrained_rows_accept_and_free_rows_are_unchanged(self):
        free_kw = dict(seed=4, max_tokens=12, ignore_eos=True, logprobs=0)
        free = Run([9, 8, 7, 6], **free_kw)
        runs = [self.constrained(seed=s, n=2, max_tokens=20, logprobs=0) for s in range(6)]
        greedy = self.constrained(temperature=0, max_tokens=20, ignore_eos=True, min_tokens=3)
        drive(self.sched(), [(0, free), (0, runs[0]), (1, runs[1]), (2, greedy)] + [(3 + i, r) for i, r in enumerate(runs[2:])])
        for run in runs + [greedy]:
            for seq, tokens in run.tokens.items():
                self.assertEqual(tokens[-1], EOS)
                self.assertTrue(accepted(tokens), tokens)
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
        text = "".join(PIECES[t] for t in run.tokens[0])
        self.assertNotEqual(walk(0, text), DEAD)  # a prefix of an accepted text


class TestProtocol(unittest.TestCase):
    def test_load_base_token_bytes_and_generate_with_a_constraint(self):
        tm = TempModel("qwen2", std=0.15)
        engine = EngineProcess()
        try:
            loaded = engine.call({"id": "l1", "op": "load_base", "base": "b", "path": tm.path})
            self.assertEqual(loaded["vocab_size"], VOCAB)
            missing = engine.call(generate_request("g0", prompt=[5, 6], max_tokens=4, constraint=wire()))
            self.assertEqual(missing["error"]["code"], "bad_request")
            self.assertIn("token_bytes", missing["error"]["message"])
            engine.call({"id": "l2", "op": "load_base", "base": "b", "path": tm.path, "token_bytes": token_bytes()})
            bad = engine.call(generate_request("g1", prompt=[5, 6], max_tokens=4, constraint={**wire(), "table": "!"}))
            self.assertEqual(bad["error"]["code"], "bad_request")
            for seed in range(3):
                rid = f"s{seed}"
                engine.send(generate_request(rid, prompt=[5, 6], max_tokens=30, seed=seed, n=2, constraint=wire()))
                frames = engine.until_done(rid)
                self.assertNotIn("error", frames[-1])
                tokens = {}
                for frame in frames:
                    if frame.get("type") == "tokens":
                        tokens.setdefault(frame["seq"], []).extend(frame["tokens"])
                self.assertTrue(all(accepted(t) for t in tokens.values()), tokens)
        finally:
            engine.close()
            tm.dir.cleanup()


if __name__ == "__main__":
    unittest.main()
