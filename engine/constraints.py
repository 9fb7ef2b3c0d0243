"""Constrained decoding on llguidance: a request's constraint specification as token masks.

Owns: KINDS (what a specification may ask for: vLLM's structured_outputs kinds, converted to an llguidance
grammar as vLLM's `guidance` backend converts them), LIMITS (llguidance's fuel and size caps), each base's
LLTokenizer (built from the model folder's own tokenizer.json on a background thread when the base loads),
compilation off the decode thread (a small pool; the matcher and its first mask are built there, so a grammar
that fails or runs out of fuel is refused before any token), compiled grammars by base and specification
(least recently used out), Guide (one sequence's matcher), and its masks: each computed on a mask pool as soon
as the previous token is consumed, so it overlaps the next forward pass; a step waits for late masks only
briefly (ready_rows), and a row whose mask is still not ready sits that step out, so a costly grammar slows
only its own sequences.

EOS is never text: llguidance allows the base's EOS ids exactly where the grammar may end.

Refuses to know: how a request states its constraint (the server writes the specification, a structural
tag as a grammar; wire.py checks its shape), sampling (sampling.py applies the masks), scheduling (generate.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import torch

try:
    import llguidance as llg
except ImportError:  # an engine without it serves free text only, and says so in load_base's reply
    llg = None

KINDS = ("json", "json_object", "regex", "choice", "grammar")
# Fuel under llguidance's defaults (a fifth to a quarter): a grammar whose lexer needs more is refused (before its
# first token) or failed mid-way, after well under a second of one mask thread. That thread is never the decode
# thread (a row waits for its own mask), so this bounds what a hostile grammar costs, not others' latency.
LIMITS = dict(
    initial_lexer_fuel=200_000,
    step_lexer_fuel=50_000,
    step_max_items=20_000,
    max_lexer_states=50_000,
    max_grammar_size=200_000,
    verbose_errors=False,
)
COMPILE_THREADS = 2
MAX_COMPILED = 64  # per engine; a sequence keeps its own matcher when its grammar is evicted
MAX_ERROR_CHARS = 600
MASK_THREADS = 2
# After the forward pass, how long a step waits for masks still being computed (at least this, at most as long
# as the forward took); a row whose mask is later sits the step out and samples at the next one.
MASK_GRACE_S = 0.02


class ConstraintError(ValueError):
    """A specification llguidance refuses (invalid, unsupported, or over its limits); answered as bad_request."""


@dataclass(frozen=True)
class Spec:
    """One constraint as wire.py parsed it: exactly one kind with its value, and vLLM's JSON options."""

    kind: str
    value: object
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    key: str = ""  # names the specification (its canonical JSON) for the compiled cache


def spec_key(raw: dict) -> str:
    return hashlib.sha256(json.dumps(raw, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def available_kinds(has_tokenizer: bool) -> list[str]:
    return list(KINDS) if llg is not None and has_tokenizer else []


def _no_additional_properties(schema):
    """The schema with `additionalProperties: false` wherever properties are listed and it is unset (vLLM's
    disable_additional_properties); a copy, walked through every subschema."""
    if isinstance(schema, list):
        return [_no_additional_properties(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _no_additional_properties(v) for k, v in schema.items()}
    if isinstance(out.get("properties"), dict) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _json_grammar(schema, spec: Spec) -> str:
    if spec.disable_additional_properties:
        schema = _no_additional_properties(schema)
    text = schema if isinstance(schema, str) else json.dumps(schema)
    return llg.LLMatcher.grammar_from_json_schema(
        text, defaults={"whitespace_flexible": not spec.disable_any_whitespace}
    )


def grammar_of(spec: Spec) -> str:
    """The llguidance grammar of a specification; a ConstraintError when its shape is refused here."""
    try:
        if spec.kind == "json":
            return _json_grammar(spec.value, spec)
        if spec.kind == "json_object":
            return _json_grammar({"type": "object"}, spec)
        if spec.kind == "choice":
            return llg.grammar_from("choice", json.dumps(spec.value))
        return llg.grammar_from(spec.kind, spec.value)  # regex, grammar
    except (ValueError, TypeError, AssertionError) as e:
        raise ConstraintError(str(e) or type(e).__name__) from None


def _short(error: str) -> str:
    error = error.replace("<non-verbose/>", "").strip()
    return error if len(error) <= MAX_ERROR_CHARS else error[:MAX_ERROR_CHARS] + "…"


class Vocabulary:
    """A base's llguidance tokenizer (built on a background thread) and the mask size it implies."""

    def __init__(self, tokenizer_json: str, vocab_size: int, eos_ids: Sequence[int]):
        self.vocab_size = vocab_size
        self.words = (vocab_size + 31) // 32  # int32 words of one bitmask
        self.ready: Future = Future()
        args = (tokenizer_json, vocab_size, [t for t in eos_ids if 0 <= t < vocab_size])
        threading.Thread(target=self._build, args=args, name="llg-tokenizer", daemon=True).start()

    def _build(self, path: str, vocab_size: int, eos_ids: list[int]) -> None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            self.ready.set_result(llg.LLTokenizer(text, n_vocab=vocab_size, eos_token=eos_ids or None))
        except Exception as e:  # noqa: BLE001 - answered to every constraint on this base
            self.ready.set_exception(ConstraintError(f"the base's tokenizer.json cannot be used for constraints: {e}"))


class Compiled:
    """A grammar's matcher at its start, with the start's mask (computed once, shared by every sequence)."""

    def __init__(self, matcher, vocab: Vocabulary, first_W: torch.Tensor):
        self.matcher, self.vocab, self.first_W = matcher, vocab, first_W


MASK_POOL = ThreadPoolExecutor(MASK_THREADS, thread_name_prefix="llg-masks")


def _done(value) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class Guide:
    """One sequence's matcher (its own copy of the compiled one) and the mask of its next token. Each sampled token
    is consumed and the next mask computed on the mask pool, never on the decode thread; a token the matcher
    refuses, or a limit it reaches, makes that future fail with a ConstraintError."""

    __slots__ = ("matcher", "vocab", "next_W")

    def __init__(self, compiled: Compiled):
        self.matcher, self.vocab = compiled.matcher.deep_copy(), compiled.vocab
        self.next_W: Future = _done(compiled.first_W)

    def advance(self, token: int) -> None:
        """Only once next_W is done (the row sampled with it), so a sequence's matcher is used by one task at a time."""
        self.next_W = MASK_POOL.submit(self._consume_and_mask, token)

    def _consume_and_mask(self, token: int) -> torch.Tensor:
        bits_W = torch.empty(self.vocab.words, dtype=torch.int32)
        if self.matcher.consume_token(token):
            self.matcher.unsafe_compute_mask_ptr(bits_W.data_ptr(), self.vocab.words * 4)  # releases the GIL
        if self.matcher.is_error():
            raise ConstraintError(f"constraint: {_short(self.matcher.get_error())}")
        return bits_W

    def error(self) -> BaseException | None:
        """Why the sequence cannot go on (once its mask is done): the matcher's error, or None."""
        return self.next_W.exception() if self.next_W.done() else None


class ConstraintStore:
    """Each base's vocabulary and the grammars compiled for it, by specification key."""

    def __init__(self, max_compiled: int = MAX_COMPILED):
        self.max_compiled = max_compiled
        self.vocabs: dict[str, Vocabulary] = {}
        self.compiled: OrderedDict[tuple, Future] = OrderedDict()
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(COMPILE_THREADS, thread_name_prefix="llg-compile")
        self.limits = llg.LLParserLimits(**LIMITS) if llg is not None else None

    def add_base(self, base: str, folder: str, vocab_size: int, eos_ids: Sequence[int]) -> list[str]:
        """Starts building the base's tokenizer (once); answers the kinds this base can be constrained with."""
        path = os.path.join(folder, "tokenizer.json")
        kinds = available_kinds(os.path.isfile(path))
        with self.lock:
            if kinds and base not in self.vocabs:
                self.vocabs[base] = Vocabulary(path, vocab_size, eos_ids)
        return kinds

    def compile(self, base: str, spec: Spec) -> Future:
        """A future of the Compiled grammar (shared by concurrent requests for it); ConstraintError when refused."""
        key = (base, spec.key)
        with self.lock:
            found = self.compiled.get(key)
            if found is None:
                vocab = self.vocabs.get(base)
                if vocab is None:
                    found = Future()
                    found.set_exception(
                        ConstraintError(f"base {base!r} cannot be constrained (no llguidance or no tokenizer.json)")
                    )
                    return found
                found = self.pool.submit(self._compile, vocab, spec)
                self.compiled[key] = found
                while len(self.compiled) > self.max_compiled:
                    self.compiled.popitem(last=False)
            self.compiled.move_to_end(key)
        return found

    def _compile(self, vocab: Vocabulary, spec: Spec) -> Compiled:
        tokenizer = vocab.ready.result()
        matcher = llg.LLMatcher(tokenizer, grammar_of(spec), log_level=0, limits=self.limits)
        first_W = torch.zeros(vocab.words, dtype=torch.int32)
        if not matcher.is_error():
            matcher.unsafe_compute_mask_ptr(first_W.data_ptr(), vocab.words * 4)
            self._probe(matcher, first_W, tokenizer.eos_tokens)
        if matcher.is_error():
            raise ConstraintError(_short(matcher.get_error()))
        return Compiled(matcher, vocab, first_W)

    @staticmethod
    def _probe(matcher, first_W: torch.Tensor, eos_ids: Sequence[int]) -> None:
        """One step further on a copy (the first allowed token, then its mask): grammars whose lexer explodes only
        once it has started (nested counted repeats, rows past the item limit) are then refused before any token."""
        allowed = ((first_W[:, None] & BITS_32) != 0).reshape(-1).nonzero().flatten().tolist()
        token = next((t for t in allowed if t not in eos_ids), None)
        if token is None:
            return
        probe, scratch_W = matcher.deep_copy(), torch.empty_like(first_W)
        if probe.consume_token(token):
            probe.unsafe_compute_mask_ptr(scratch_W.data_ptr(), first_W.numel() * 4)
        if probe.is_error():
            raise ConstraintError(_short(probe.get_error()))


BITS_32 = torch.tensor([1 << i for i in range(31)] + [-(1 << 31)], dtype=torch.int32)


def ready_rows(guides: Sequence[Guide | None], grace_s: float) -> list[bool]:
    """Per row: whether it is done waiting (free, or its mask computed or failed), waiting up to `grace_s` for masks
    still being computed. When no row is, waits for the first mask instead: there is nothing else to do."""
    pending = [g.next_W for g in guides if g is not None and not g.next_W.done()]
    if pending:
        wait(pending, timeout=grace_s)
        if all(g is not None and not g.next_W.done() for g in guides):
            wait(pending, return_when=FIRST_COMPLETED)
    return [g is None or g.next_W.done() for g in guides]


def step_masks(guides: Sequence[Guide | None], device) -> tuple[list[int], torch.Tensor] | None:
    """The constrained rows (their masks computed, without error) and their allowed tokens, bool [C, V], as
    sample_step takes them; None when no row is constrained."""
    rows = [b for b, g in enumerate(guides) if g is not None]
    if not rows:
        return None
    bits_CW = torch.stack([guides[b].next_W.result() for b in rows]).to(device)
    allowed_CV = ((bits_CW[:, :, None] & BITS_32.to(device)) != 0).reshape(len(rows), -1)[
        :, : guides[rows[0]].vocab.vocab_size
    ]
    return rows, allowed_CV
