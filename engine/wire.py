"""Requests into what the engine computes with: a checked JSON object in, the numeric modules' dataclasses out.

Owns: `parse`, which checks any op's request against protocol.json (schema.py:
required fields, types, bounds, the error messages naming the field's path)
and then builds it: the ops listed in PARSERS get the dataclasses their
numerics take (SamplingParams, Row, LossConfig, AdamW, StepRow, LoraConfig,
Spec) and the checks that span fields (a per-token array's length, a
segment's first mask, exactly one constraint kind); every other op gets its
fields by name. The server sends every value explicitly, so nothing here
fills a default: an optional field is one whose absence means "none" (no
adapter path, no constraint). Checks that need the loaded base (token ids
within the vocabulary, rows within the context) are `check_*` functions the
server calls once it has found the base.

Refuses to know: the fields' names and types (protocol.json), the numerics
(train.py, sampling.py, lora.py take the dataclasses), threads and replies
(server.py), frames (transport.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from . import schema
from .constraints import KINDS as CONSTRAINT_KINDS
from .constraints import Spec, spec_key
from .lora import LoraConfig
from .sampling import SamplingParams
from .schema import WireError
from .steps import RL_LOSSES, StepRow
from .train import AdamW, LossConfig, Row, continues

DTYPES = {name: getattr(torch, name) for name in schema.enum("Dtype")}
LOSSES = schema.enum("TrainLoss")
STEP_LOSSES = schema.enum("StepLoss")
# The request of an op without a dataclass: its checked fields by name (an optional one absent is None).
Fields = SimpleNamespace


def parse(op: str, msg: dict) -> Any:
    """The request of `op`, checked: its dataclass where PARSERS has a parser for it, else its fields by name."""
    if op in PARSERS:
        return PARSERS[op](msg)
    schema.check_request(op, msg)
    return Fields(**{name: msg.get(name) for name in schema.OPS[op]["request"]["properties"]})


def fail(op: str, path: str, what: str) -> WireError:
    return WireError(f"{op}: field {path} must be {what}")


# --- request dataclasses (what the handlers of server.py take) ----------------


@dataclass
class AdapterRef:
    """An adapter by engine key, loaded from `path` when not resident; key None: the base alone."""

    key: str | None
    path: str | None


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


# --- the parsers of the ops whose numerics take dataclasses -------------------


def parse_ensure_adapter(msg: dict) -> EnsureAdapter:
    schema.check_request("ensure_adapter", msg)
    out = EnsureAdapter(adapter=msg["adapter"], base=msg["base"], path=msg.get("path"), init=None)
    if out.path is None:
        init = msg.get("init")
        if init is None:
            raise WireError("ensure_adapter: missing field init (or path)")
        out.init = LoraConfig(
            rank=init["rank"],
            alpha=float(init["alpha"]),
            target_modules=tuple(init["target_modules"]),
            seed=init["seed"],
        )
    return out


def parse_generate(msg: dict) -> Generate:
    schema.check_request("generate", msg)
    return Generate(
        base=msg["base"],
        adapter=AdapterRef(key=msg["adapter"], path=msg.get("adapter_path")),
        prompt=list(msg["prompt"]),
        params=_sampling("generate", msg),
        constraint=_constraint("generate", msg["constraint"]) if msg.get("constraint") is not None else None,
    )


def parse_check_constraint(msg: dict) -> CheckConstraint:
    schema.check_request("check_constraint", msg)
    return CheckConstraint(base=msg["base"], constraint=_constraint("check_constraint", msg["constraint"]))


def _constraint(op: str, c: dict) -> Spec:
    """Exactly one of vLLM's structured_outputs kinds (the schema checked each one's shape), and its JSON options."""
    kinds = [k for k in CONSTRAINT_KINDS if c.get(k) not in (None, False)]
    if len(kinds) != 1:
        raise fail(op, "constraint", f"an object with exactly one of {', '.join(CONSTRAINT_KINDS)} (has {len(kinds)})")
    return Spec(
        kind=kinds[0],
        value=c[kinds[0]],
        key=spec_key(c),
        disable_any_whitespace=bool(c.get("disable_any_whitespace")),
        disable_additional_properties=bool(c.get("disable_additional_properties")),
    )


def _sampling(op: str, msg: dict) -> SamplingParams:
    p = SamplingParams(
        max_tokens=msg["max_tokens"],
        min_tokens=msg["min_tokens"],
        ignore_eos=msg["ignore_eos"],
        stop_token_ids=tuple(msg["stop_token_ids"]),
        temperature=float(msg["temperature"]),
        top_p=float(msg["top_p"]),
        top_k=-1 if msg["top_k"] in (0, -1) else msg["top_k"],
        min_p=float(msg["min_p"]),
        presence_penalty=float(msg["presence_penalty"]),
        frequency_penalty=float(msg["frequency_penalty"]),
        repetition_penalty=float(msg["repetition_penalty"]),
        logit_bias=_logit_bias(op, msg["logit_bias"]),
        allowed_token_ids=msg["allowed_token_ids"],
        bad_words_ids=[list(w) for w in msg["bad_words_ids"]],
        seed=msg["seed"],
        logprobs=msg["logprobs"],
        prompt_logprobs=msg["prompt_logprobs"],
        n=msg["n"],
    )
    if p.max_tokens is not None and p.min_tokens > p.max_tokens:
        raise fail(op, "min_tokens", f"at most max_tokens ({p.max_tokens})")
    return p


def _logit_bias(op: str, raw: dict) -> dict[int, float]:
    bias: dict[int, float] = {}
    for k, v in raw.items():
        try:
            tid = int(k)
        except (TypeError, ValueError):
            raise fail(op, "logit_bias", f"keyed by token ids (not {k!r})") from None
        bias[tid] = float(v)
    return bias


def parse_forward(msg: dict) -> Forward:
    schema.check_request("forward", msg)
    return Forward(
        base=msg["base"],
        adapter=AdapterRef(key=msg["adapter"], path=msg.get("adapter_path")),
        rows=[_row("forward", r, f"rows[{i}]", None) for i, r in enumerate(msg["rows"])],
    )


def parse_train_step(msg: dict) -> TrainStep:
    schema.check_request("train_step", msg)
    loss = msg["loss"]
    if loss == "rl" and msg.get("loss_config") is None:
        raise WireError("train_step: missing field loss_config")
    return TrainStep(
        base=msg["base"],
        adapter=AdapterRef(key=msg["adapter"], path=msg.get("adapter_path")),
        loss=loss,
        rows=[_row("train_step", r, f"rows[{i}]", loss) for i, r in enumerate(msg["rows"])],
        loss_config=LossConfig(**_numbers(msg["loss_config"], schema.ref("LossConfig"))) if loss == "rl" else None,
        optimizer=_optimizer(msg["optimizer"]),
        reference=AdapterRef(key=msg.get("reference_adapter"), path=msg.get("reference_adapter_path")),
        logprob_chunk_size=msg.get("logprob_chunk_size"),
    )


def _numbers(obj: dict, node: dict) -> dict:
    """The checked object's fields of `node` (an unknown key holds null), JSON integers as floats."""
    known = schema.resolve(node)["properties"]
    return {k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in obj.items() if k in known}


def _per_token(op: str, row: dict, at: str, name: str, T: int, nullable: bool = False) -> torch.Tensor:
    """A per-token array of T numbers (the schema checked its entries; null entries become NaN)."""
    values = row.get(name)
    if values is None:
        raise WireError(f"{op}: missing field {at}.{name}")
    if len(values) != T:
        raise fail(op, f"{at}.{name}", f"a list with one entry per token ({T})")
    if nullable:
        values = [float("nan") if v is None else v for v in values]
    return torch.tensor(values, dtype=torch.float32)


def _row(op: str, r: dict, at: str, loss: str | None) -> Row:
    """A packed row; loss None means `forward` (tokens and segment_ids only)."""
    T = len(r["tokens"])
    if len(r["segment_ids"]) != T:
        raise fail(op, f"{at}.segment_ids", f"a list with one entry per token ({T})")
    seg_T = torch.tensor(r["segment_ids"])
    row = Row(
        tokens_T=torch.tensor(r["tokens"]),
        segment_ids_T=seg_T,
        mask_T=torch.zeros(T),
        weights_T=torch.ones(T),
        advantages_T=torch.zeros(T),
        logprobs_T=torch.full((T,), float("nan")),
        original_T=None,
    )
    if loss is None:
        return row
    row.mask_T = _per_token(op, r, at, "mask", T)
    if bool((row.mask_T * (~continues(seg_T)).float()).any()):
        raise fail(op, f"{at}.mask", "0 at the first token of every segment (it has no prediction)")
    row.weights_T = _per_token(op, r, at, "weights", T)
    if loss == "rl":
        row.advantages_T = _per_token(op, r, at, "advantages", T)
        row.logprobs_T = _per_token(op, r, at, "logprobs", T, nullable=True)
        if r.get("original_logprobs") is not None:
            row.original_T = _per_token(op, r, at, "original_logprobs", T, nullable=True)
    return row


# train_step's optimizer has no eps on the wire: AdamW's usual 1e-8, the value its steps have always used.
TRAIN_STEP_EPS = 1e-8


def _optimizer(o: dict) -> AdamW:
    return AdamW(
        learning_rate=float(o["learning_rate"]),
        beta1=float(o["betas"][0]),
        beta2=float(o["betas"][1]),
        eps=TRAIN_STEP_EPS,
        weight_decay=float(o["weight_decay"]),
        grad_clip_norm=float(o["max_grad_norm"]),
    )


# --- the token-level training ops (steps.py) -----------------------------------


def parse_forward_backward(msg: dict) -> ForwardBackward:
    schema.check_request("forward_backward", msg)
    loss, backward, adapter = msg["loss"], msg["backward"], msg["adapter"]
    if adapter is None and backward:
        raise fail("forward_backward", "adapter", "an adapter key when backward is true")
    config_node = schema.resolve(schema.ref("StepLossConfigs"))["properties"][loss]
    extra = sorted(set(msg["loss_config"]) - set(schema.resolve(config_node)["properties"]))
    if extra:
        raise WireError(f"forward_backward: loss_config keys not used by {loss}: {', '.join(extra)}")
    schema.Checker("forward_backward").check(msg["loss_config"], config_node, "loss_config")
    return ForwardBackward(
        base=msg["base"],
        adapter=adapter,
        loss=loss,
        loss_config=_numbers(msg["loss_config"], config_node),
        backward=backward,
        rows=[_step_row(r, f"rows[{i}]", loss) for i, r in enumerate(msg["rows"])],
    )


def _step_row(r: dict, at: str, loss: str) -> StepRow:
    """One datum; every per-token array has the length of `tokens`."""
    op, T = "forward_backward", len(r["tokens"])
    if len(r["target_tokens"]) != T:
        raise fail(op, f"{at}.target_tokens", f"a list with one entry per token ({T}, has {len(r['target_tokens'])})")
    row = StepRow(
        tokens_T=torch.tensor(r["tokens"]),
        target_tokens_T=torch.tensor(r["target_tokens"]),
        weights_T=_per_token(op, r, at, "weights", T),
        sampler_logprobs_T=None,
        advantages_T=None,
    )
    for key, attr in (("logprobs", "sampler_logprobs_T"), ("advantages", "advantages_T")):
        if loss in RL_LOSSES or r.get(key) is not None:
            setattr(row, attr, _per_token(op, r, at, key, T))
    if loss == "gspo":
        row.sequence_ratio_mask_T = _per_token(op, r, at, "sequence_ratio_mask", T)
        if not bool((row.sequence_ratio_mask_T != 0).any()):
            raise fail(op, f"{at}.sequence_ratio_mask", "non-zero for at least one token (the sequence ratio's tokens)")
    return row


def parse_optim_step(msg: dict) -> OptimStep:
    schema.check_request("optim_step", msg)
    return OptimStep(
        base=msg["base"], adapter=msg["adapter"], adam=AdamW(**_numbers(msg["adam"], schema.ref("AdamParams")))
    )


# The ops whose handlers take a dataclass; any other op's handler gets its checked fields by name.
PARSERS = {
    "ensure_adapter": parse_ensure_adapter,
    "generate": parse_generate,
    "check_constraint": parse_check_constraint,
    "forward": parse_forward,
    "train_step": parse_train_step,
    "forward_backward": parse_forward_backward,
    "optim_step": parse_optim_step,
}


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
