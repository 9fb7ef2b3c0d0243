"""The engine's only parser of request messages: JSON objects in, dataclasses out.

Owns: one `parse_<op>` per op of docs/engine-protocol.md, the request
dataclasses they return, and the field-by-field checks: a missing field, a null
where none is allowed or a value of the wrong type is a WireError whose message
names the op and the field's path (`train_step: missing field
loss_config.epsilon`). The server sends every value explicitly, so nothing here
fills a default: an optional field is one whose absence means "none" (no
adapter path, no constraint), never a number chosen here. Checks that need the
loaded base (token ids within the vocabulary, rows within the context) are
`check_*` functions the server calls once it has found the base.

Refuses to know: the numerics (train.py, sampling.py, lora.py take the
dataclasses), threads and replies (server.py), frames (transport.py).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

import torch

from .constraints import KINDS as CONSTRAINT_KINDS
from .constraints import Spec, spec_key
from .lora import LoraConfig
from .sampling import SamplingParams
from .steps import LOSS_CONFIG_KEYS, RL_LOSSES, StepRow
from .train import IS_LEVELS, KL_SOURCES, AdamW, LossConfig, Row, continues

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LOSSES = ("rl", "sft")
# The sampling bounds the server's request validation states too (src/engine/bounds.ts reads the same file).
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "bounds.json"), encoding="utf-8") as _f:
    SAMPLING_BOUNDS: dict[str, dict] = json.load(_f)["sampling"]


class WireError(ValueError):
    """A request the protocol does not allow; answered as bad_request with this message."""


class Fields:
    """One JSON object of a request being read; every read names its field's path in errors."""

    def __init__(self, op: str, obj: Any, path: str = ""):
        if not isinstance(obj, dict):
            raise WireError(f"{op}: {path or 'the request'} must be an object")
        self.op, self.obj, self.path = op, obj, path

    def at(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def fail(self, name: str, what: str) -> WireError:
        return WireError(f"{self.op}: field {self.at(name)} must be {what}")

    def has(self, name: str) -> bool:
        return self.obj.get(name) is not None

    def get(self, name: str, nullable: bool = False) -> Any:
        if name not in self.obj:
            raise WireError(f"{self.op}: missing field {self.at(name)}")
        value = self.obj[name]
        if value is None and not nullable:
            raise self.fail(name, "given (it is null)")
        return value

    def str(self, name: str, nullable: bool = False, choices=None) -> str | None:
        v = self.get(name, nullable)
        if v is None:
            return None
        if not isinstance(v, str) or not v:
            raise self.fail(name, "a non-empty string")
        if choices is not None and v not in choices:
            raise self.fail(name, f"one of {', '.join(choices)}")
        return v

    def bool(self, name: str) -> bool:
        v = self.get(name)
        if not isinstance(v, bool):
            raise self.fail(name, "true or false")
        return v

    def int(self, name: str, nullable: bool = False, lo: int | None = None, hi: int | None = None) -> int | None:
        v = self.get(name, nullable)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(name, "an integer")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise self.fail(name, f"in [{lo}, {hi}] (got {v})")
        return v

    def num(
        self, name: str, nullable: bool = False, lo: float = -math.inf, hi: float = math.inf, lo_open: bool = False
    ) -> float | None:
        v = self.get(name, nullable)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.fail(name, "a finite number")
        v = float(v)
        if not (v > lo if lo_open else v >= lo) or v > hi:
            raise self.fail(name, f"in {'(' if lo_open else '['}{lo}, {hi}] (got {v})")
        return v

    def bounded(self, name: str):
        """A number within its SAMPLING_BOUNDS entry (an integer where the bounds are integers)."""
        b = SAMPLING_BOUNDS[name]
        if b.get("integer"):
            return self.int(name, lo=b["min"], hi=b["max"])
        return self.num(name, lo=b["min"], hi=b["max"], lo_open=bool(b.get("min_exclusive")))

    def ints(self, name: str, nullable: bool = False) -> list[int] | None:
        v = self.get(name, nullable)
        if v is None:
            return None
        if not isinstance(v, list) or any(isinstance(t, bool) or not isinstance(t, int) for t in v):
            raise self.fail(name, "a list of integers")
        return list(v)

    def floats(self, name: str, length: int, nullable_entries: bool) -> torch.Tensor:
        """A per-token array of `length` numbers (null entries become NaN where allowed)."""
        v = self.get(name)
        if not isinstance(v, list) or len(v) != length:
            raise self.fail(name, f"a list with one entry per token ({length})")
        out = []
        for x in v:
            if x is None and nullable_entries:
                out.append(float("nan"))
            elif isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                raise self.fail(name, f"a list of finite numbers (has {x!r})")
            else:
                out.append(float(x))
        return torch.tensor(out, dtype=torch.float32)

    def object(self, name: str) -> Fields:
        return Fields(self.op, self.get(name), self.at(name))

    def objects(self, name: str) -> list[Fields]:
        v = self.get(name)
        if not isinstance(v, list) or not v:
            raise self.fail(name, "a non-empty list")
        return [Fields(self.op, item, f"{self.at(name)}[{i}]") for i, item in enumerate(v)]


# --- request dataclasses ------------------------------------------------------


@dataclass
class AdapterRef:
    """An adapter by engine key, loaded from `path` when not resident; key None: the base alone."""

    key: str | None
    path: str | None


@dataclass
class LoadBase:
    base: str
    path: str
    dtype: str | None  # None: the engine's --dtype (its command line, not a training default)


@dataclass
class CheckConstraint:
    base: str
    constraint: Spec


@dataclass
class EnsureAdapter:
    adapter: str
    base: str
    path: str | None
    init: LoraConfig | None


@dataclass
class SaveAdapter:
    adapter: str
    path: str


@dataclass
class DropAdapter:
    adapter: str


@dataclass
class Cancel:
    target: str


@dataclass
class Generate:
    base: str
    adapter: AdapterRef
    prompt: list[int]
    params: SamplingParams
    constraint: Spec | None  # decode only what it allows (constraints.py)


@dataclass
class Forward:
    base: str
    adapter: AdapterRef
    rows: list[Row]


@dataclass
class TrainStep:
    base: str
    adapter: AdapterRef
    loss: str
    rows: list[Row]
    loss_config: LossConfig | None  # None for the sft loss
    optimizer: AdamW
    reference: AdapterRef  # the KL reference policy; key None: the base model
    logprob_chunk_size: int | None  # positions whose logits are computed at once; None: the memory bound


@dataclass
class ForwardBackward:
    base: str
    adapter: str | None  # None only for a forward without backward: the base model
    loss: str
    loss_config: dict[str, float]
    backward: bool
    rows: list[StepRow]


@dataclass
class OptimStep:
    base: str
    adapter: str
    adam: AdamW


@dataclass
class SaveState:
    adapter: str
    path: str


@dataclass
class LoadState:
    base: str
    adapter: str
    path: str


# --- one parser per op --------------------------------------------------------


def parse_load_base(msg: dict) -> LoadBase:
    f = Fields("load_base", msg)
    dtype = f.str("dtype", nullable=True, choices=tuple(DTYPES)) if "dtype" in msg else None
    return LoadBase(base=f.str("base"), path=f.str("path"), dtype=dtype)


def parse_ensure_adapter(msg: dict) -> EnsureAdapter:
    f = Fields("ensure_adapter", msg)
    out = EnsureAdapter(adapter=f.str("adapter"), base=f.str("base"), path=None, init=None)
    if f.has("path"):
        out.path = f.str("path")
    elif f.has("init"):
        out.init = _lora_init(f.object("init"))
    else:
        raise WireError("ensure_adapter: missing field init (or path)")
    return out


def _lora_init(f: Fields) -> LoraConfig:
    targets = f.get("target_modules")
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
        raise f.fail("target_modules", "a non-empty list of module names")
    return LoraConfig(
        rank=f.int("rank", lo=1),
        alpha=f.num("alpha", lo=0.0, lo_open=True),
        target_modules=tuple(targets),
        seed=f.int("seed", lo=0),
    )


def parse_save_adapter(msg: dict) -> SaveAdapter:
    f = Fields("save_adapter", msg)
    return SaveAdapter(adapter=f.str("adapter"), path=f.str("path"))


def parse_drop_adapter(msg: dict) -> DropAdapter:
    return DropAdapter(adapter=Fields("drop_adapter", msg).str("adapter"))


def parse_stats(msg: dict) -> None:
    """`stats` has no fields."""
    return None


def parse_cancel(msg: dict) -> Cancel:
    return Cancel(target=Fields("cancel", msg).str("target"))


def _adapter_ref(f: Fields, key_name: str, path_name: str, required: bool) -> AdapterRef:
    """The adapter key (required, null for none, when `required`; else it may be absent) and its optional path."""
    key = f.str(key_name, nullable=True) if required or key_name in f.obj else None
    path = f.str(path_name) if f.has(path_name) else None
    return AdapterRef(key=key, path=path)


def parse_generate(msg: dict) -> Generate:
    f = Fields("generate", msg)
    return Generate(
        base=f.str("base"),
        adapter=_adapter_ref(f, "adapter", "adapter_path", True),
        prompt=f.ints("prompt"),
        params=_sampling(f),
        constraint=_constraint(f) if f.has("constraint") else None,
    )


def parse_check_constraint(msg: dict) -> CheckConstraint:
    f = Fields("check_constraint", msg)
    return CheckConstraint(base=f.str("base"), constraint=_constraint(f))


JSON_OPTIONS = ("disable_any_whitespace", "disable_additional_properties")


def _constraint(f: Fields) -> Spec:
    """A constraint specification: exactly one of vLLM's structured_outputs kinds, and its JSON options."""
    c = f.object("constraint")
    unknown = sorted(k for k in c.obj if k not in CONSTRAINT_KINDS and k not in JSON_OPTIONS)
    if unknown:
        raise WireError(f"{f.op}: field constraint has unknown keys: {', '.join(unknown)}")
    kinds = [k for k in CONSTRAINT_KINDS if c.obj.get(k) not in (None, False)]
    if len(kinds) != 1:
        raise f.fail("constraint", f"an object with exactly one of {', '.join(CONSTRAINT_KINDS)} (has {len(kinds)})")
    kind = kinds[0]
    options = {k: c.bool(k) if k in c.obj else False for k in JSON_OPTIONS}
    return Spec(kind=kind, value=_constraint_value(c, kind), key=spec_key(c.obj), **options)


def _constraint_value(c: Fields, kind: str):
    value = c.get(kind)
    if kind in ("regex", "grammar"):
        return c.str(kind)
    if kind == "json" and not isinstance(value, (dict, bool)):
        raise c.fail(kind, "a JSON schema (an object or a boolean)")
    if kind == "json_object" and value is not True:
        raise c.fail(kind, "true")
    if kind == "choice" and (not isinstance(value, list) or not value or not all(isinstance(x, str) for x in value)):
        raise c.fail(kind, "a non-empty list of strings")
    if kind == "structural_tag":
        tag = c.object(kind)
        triggers = tag.get("triggers")
        if not isinstance(triggers, list) or not triggers or not all(isinstance(t, str) and t for t in triggers):
            raise tag.fail("triggers", "a non-empty list of non-empty strings")
        for s in tag.objects("structures"):
            if not isinstance(s.obj.get("begin"), str) or not isinstance(s.obj.get("end"), str):
                raise WireError(f"{c.op}: field {s.path} must have string begin and end")
            if not isinstance(s.get("schema"), (dict, bool)):
                raise s.fail("schema", "a JSON schema (an object or a boolean)")
    return value


def _sampling(f: Fields) -> SamplingParams:
    top_k = f.bounded("top_k")
    p = SamplingParams(
        max_tokens=f.int("max_tokens", nullable=True, lo=1),
        min_tokens=f.int("min_tokens", lo=0),
        ignore_eos=f.bool("ignore_eos"),
        stop_token_ids=tuple(f.ints("stop_token_ids")),
        temperature=f.bounded("temperature"),
        top_p=f.bounded("top_p"),
        top_k=-1 if top_k in (0, -1) else top_k,
        min_p=f.bounded("min_p"),
        presence_penalty=f.bounded("presence_penalty"),
        frequency_penalty=f.bounded("frequency_penalty"),
        repetition_penalty=f.bounded("repetition_penalty"),
        logit_bias=_logit_bias(f),
        allowed_token_ids=f.ints("allowed_token_ids", nullable=True),
        bad_words_ids=_bad_words(f),
        seed=f.int("seed", nullable=True),
        logprobs=f.int("logprobs", nullable=True, lo=0),
        prompt_logprobs=f.int("prompt_logprobs", nullable=True, lo=0),
        n=f.bounded("n"),
    )
    if p.allowed_token_ids is not None and not p.allowed_token_ids:
        raise f.fail("allowed_token_ids", "null or a non-empty list")
    if p.max_tokens is not None and p.min_tokens > p.max_tokens:
        raise f.fail("min_tokens", f"at most max_tokens ({p.max_tokens})")
    return p


def _logit_bias(f: Fields) -> dict[int, float]:
    raw = f.get("logit_bias")
    if not isinstance(raw, dict):
        raise f.fail("logit_bias", "an object of token id -> number")
    bias: dict[int, float] = {}
    for k, v in raw.items():
        try:
            tid = int(k)
        except (TypeError, ValueError):
            raise f.fail("logit_bias", f"keyed by token ids (not {k!r})") from None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise f.fail("logit_bias", "an object whose values are numbers")
        bias[tid] = float(v)
    return bias


def _bad_words(f: Fields) -> list[list[int]]:
    raw = f.get("bad_words_ids")
    if (
        not isinstance(raw, list)
        or not all(isinstance(w, list) and w for w in raw)
        or any(isinstance(t, bool) or not isinstance(t, int) for w in raw for t in w)
    ):
        raise f.fail("bad_words_ids", "a list of non-empty token id lists")
    return [list(w) for w in raw]


def parse_forward(msg: dict) -> Forward:
    f = Fields("forward", msg)
    return Forward(
        base=f.str("base"),
        adapter=_adapter_ref(f, "adapter", "adapter_path", True),
        rows=[_row(r, None) for r in f.objects("rows")],
    )


def parse_train_step(msg: dict) -> TrainStep:
    f = Fields("train_step", msg)
    loss = f.str("loss", choices=LOSSES)
    adapter = _adapter_ref(f, "adapter", "adapter_path", True)
    if adapter.key is None:
        raise f.fail("adapter", "an adapter key (train_step trains one)")
    return TrainStep(
        base=f.str("base"),
        adapter=adapter,
        loss=loss,
        rows=[_row(r, loss) for r in f.objects("rows")],
        loss_config=_loss_config(f.object("loss_config")) if loss == "rl" else None,
        optimizer=_optimizer(f.object("optimizer")),
        reference=_adapter_ref(f, "reference_adapter", "reference_adapter_path", False),
        logprob_chunk_size=f.int("logprob_chunk_size", nullable=True, lo=1) if "logprob_chunk_size" in f.obj else None,
    )


def _row(f: Fields, loss: str | None) -> Row:
    """A packed row; loss None means `forward` (tokens and segment_ids only)."""
    tokens = f.ints("tokens")
    if not tokens:
        raise f.fail("tokens", "a non-empty list of integers")
    T = len(tokens)
    seg = f.ints("segment_ids")
    if len(seg) != T:
        raise f.fail("segment_ids", f"a list with one entry per token ({T})")
    seg_T = torch.tensor(seg)
    row = Row(
        tokens_T=torch.tensor(tokens),
        segment_ids_T=seg_T,
        mask_T=torch.zeros(T),
        weights_T=torch.ones(T),
        advantages_T=torch.zeros(T),
        logprobs_T=torch.full((T,), float("nan")),
        original_T=None,
    )
    if loss is None:
        return row
    mask = f.get("mask")
    if not isinstance(mask, list) or len(mask) != T or any(isinstance(m, bool) or m not in (0, 1) for m in mask):
        raise f.fail("mask", f"a list of 0/1, one per token ({T})")
    row.mask_T = torch.tensor([float(m) for m in mask])
    if bool((row.mask_T * (~continues(seg_T)).float()).any()):
        raise f.fail("mask", "0 at the first token of every segment (it has no prediction)")
    row.weights_T = f.floats("weights", T, nullable_entries=False)
    if loss == "rl":
        row.advantages_T = f.floats("advantages", T, nullable_entries=False)
        row.logprobs_T = f.floats("logprobs", T, nullable_entries=True)
        if f.has("original_logprobs"):
            row.original_T = f.floats("original_logprobs", T, nullable_entries=True)
    return row


def _loss_config(f: Fields) -> LossConfig:
    known = set(LossConfig.__dataclass_fields__)
    unknown = sorted(k for k, v in f.obj.items() if k not in known and v is not None)
    if unknown:
        raise WireError(f"train_step: loss_config keys not implemented: {', '.join(unknown)}")
    return LossConfig(
        ppo=f.bool("ppo"),
        epsilon=f.num("epsilon", lo=0.0, lo_open=True),
        epsilon_high=f.num("epsilon_high", lo=0.0, lo_open=True),
        importance_sampling_level=f.str("importance_sampling_level", choices=IS_LEVELS),
        max_negative_advantage_importance_sampling_weight=f.num(
            "max_negative_advantage_importance_sampling_weight", nullable=True
        ),
        mask_prob_ratio=f.bool("mask_prob_ratio"),
        k2_tau=f.num("k2_tau", nullable=True),
        truncated_importance_sampling=f.num("truncated_importance_sampling", nullable=True),
        kl_penalty_coef=f.num("kl_penalty_coef", lo=0.0),
        kl_penalty_source=f.str("kl_penalty_source", choices=KL_SOURCES),
    )


# train_step's optimizer has no eps on the wire: AdamW's usual 1e-8, the value its steps have always used.
TRAIN_STEP_EPS = 1e-8


def _optimizer(f: Fields) -> AdamW:
    betas = f.get("betas")
    if (
        not isinstance(betas, list)
        or len(betas) != 2
        or not all(not isinstance(b, bool) and isinstance(b, (int, float)) and 0 <= b < 1 for b in betas)
    ):
        raise f.fail("betas", "two numbers in [0, 1)")
    return AdamW(
        learning_rate=f.num("learning_rate", lo=0.0),
        beta1=float(betas[0]),
        beta2=float(betas[1]),
        eps=TRAIN_STEP_EPS,
        weight_decay=f.num("weight_decay", lo=0.0),
        grad_clip_norm=f.num("max_grad_norm"),
    )


# --- the token-level training ops (steps.py) -----------------------------------


def parse_forward_backward(msg: dict) -> ForwardBackward:
    f = Fields("forward_backward", msg)
    loss = f.get("loss")
    if loss not in LOSS_CONFIG_KEYS:
        raise WireError(f"forward_backward: unknown loss {loss!r}; known: {', '.join(LOSS_CONFIG_KEYS)}")
    backward = f.bool("backward")
    adapter = f.str("adapter", nullable=True)
    if adapter is None and backward:
        raise f.fail("adapter", "an adapter key when backward is true")
    return ForwardBackward(
        base=f.str("base"),
        adapter=adapter,
        loss=loss,
        loss_config=_step_loss_config(f.object("loss_config"), loss),
        backward=backward,
        rows=[_step_row(r, loss) for r in f.objects("rows")],
    )


def _step_loss_config(f: Fields, loss: str) -> dict[str, float]:
    wanted = LOSS_CONFIG_KEYS[loss]
    extra = sorted(set(f.obj) - set(wanted))
    if extra:
        raise WireError(f"forward_backward: loss_config keys not used by {loss}: {', '.join(extra)}")
    return {k: f.num(k) for k in wanted}


def _step_row(f: Fields, loss: str) -> StepRow:
    """One datum; every per-token array has the length of `tokens`."""
    tokens = f.ints("tokens")
    if not tokens:
        raise f.fail("tokens", "a non-empty list of integers")
    T = len(tokens)
    targets = f.ints("target_tokens")
    if len(targets) != T:
        raise f.fail("target_tokens", f"a list with one entry per token ({T}, has {len(targets)})")
    row = StepRow(
        tokens_T=torch.tensor(tokens),
        target_tokens_T=torch.tensor(targets),
        weights_T=f.floats("weights", T, nullable_entries=False),
        sampler_logprobs_T=None,
        advantages_T=None,
    )
    for key, attr in (("logprobs", "sampler_logprobs_T"), ("advantages", "advantages_T")):
        if loss in RL_LOSSES or f.has(key):
            setattr(row, attr, f.floats(key, T, nullable_entries=False))
    if loss == "gspo":
        row.sequence_ratio_mask_T = f.floats("sequence_ratio_mask", T, nullable_entries=False)
        if not bool((row.sequence_ratio_mask_T != 0).any()):
            raise f.fail("sequence_ratio_mask", "non-zero for at least one token (the sequence ratio's tokens)")
    return row


def parse_optim_step(msg: dict) -> OptimStep:
    f = Fields("optim_step", msg)
    a = f.object("adam")
    p = AdamW(
        learning_rate=a.num("learning_rate", lo=0.0),
        beta1=a.num("beta1", lo=0.0, hi=0.999999),
        beta2=a.num("beta2", lo=0.0, hi=0.999999),
        eps=a.num("eps", lo=0.0),
        weight_decay=a.num("weight_decay", lo=0.0),
        grad_clip_norm=a.num("grad_clip_norm", lo=0.0),
    )
    return OptimStep(base=f.str("base"), adapter=f.str("adapter"), adam=p)


def parse_save_state(msg: dict) -> SaveState:
    f = Fields("save_state", msg)
    return SaveState(adapter=f.str("adapter"), path=f.str("path"))


def parse_load_state(msg: dict) -> LoadState:
    f = Fields("load_state", msg)
    return LoadState(base=f.str("base"), adapter=f.str("adapter"), path=f.str("path"))


# --- checks against the loaded base --------------------------------------------


def check_ids(op: str, field: str, ids, vocab: int) -> None:
    for t in ids:
        if not 0 <= t < vocab:
            raise WireError(f"{op}: field {field} has token id {t}, outside the vocabulary (size {vocab})")


def check_generate(req: Generate, vocab: int) -> None:
    p = req.params
    check_ids("generate", "prompt", req.prompt, vocab)
    check_ids("generate", "stop_token_ids", p.stop_token_ids, vocab)
    check_ids("generate", "logit_bias", p.logit_bias, vocab)
    check_ids("generate", "allowed_token_ids", p.allowed_token_ids or [], vocab)
    for word in p.bad_words_ids:
        check_ids("generate", "bad_words_ids", word, vocab)
    for name in ("logprobs", "prompt_logprobs"):
        if (getattr(p, name) or 0) > vocab:
            raise WireError(f"generate: field {name} must be at most the vocabulary size ({vocab})")


def check_rows(op: str, rows: list[Row], vocab: int, max_len: int) -> None:
    for i, row in enumerate(rows):
        if bool(((row.tokens_T < 0) | (row.tokens_T >= vocab)).any()):
            raise WireError(f"{op}: field rows[{i}].tokens has an id outside the vocabulary (size {vocab})")
        if row.tokens_T.shape[0] > max_len:
            raise WireError(
                f"{op}: field rows[{i}] has {row.tokens_T.shape[0]} tokens, more than the context length {max_len}"
            )


def check_step_rows(rows: list[StepRow], vocab: int, max_len: int) -> None:
    """forward_backward's rows against the loaded base: ids within its vocabulary, rows within its context."""
    for i, row in enumerate(rows):
        T = int(row.tokens_T.shape[0])
        if max_len < T:
            raise WireError(f"forward_backward: field rows[{i}] has {T} tokens, more than the context length {max_len}")
        for name, ids_T in (("tokens", row.tokens_T), ("target_tokens", row.target_tokens_T)):
            if bool(((ids_T < 0) | (ids_T >= vocab)).any()):
                raise WireError(
                    f"forward_backward: field rows[{i}].{name} has an id outside the vocabulary (size {vocab})"
                )
