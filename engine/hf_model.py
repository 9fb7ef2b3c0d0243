"""Any causal LM `transformers` knows, run through its own modeling code with our KV cache and per-row LoRA.

Owns: loading a folder with `AutoModelForCausalLM` (local safetensors only, no remote code), the two functions this
engine registers with `transformers` — an attention implementation that writes each layer's keys and values into our
KVCache slots and attends under our ForwardContext's mask (packed segments, cached slots, the layer's own sliding
window), and an experts implementation for mixture-of-experts blocks (the router stays `transformers`' own, so top-k
routing is exactly theirs) that adds each token's adapter delta per expert — the forward hooks that add LoRA deltas on
the decoder's linear projections, the table of adaptable projections (PEFT's names; routers are never targets), the
head (`transformers`' own CausalLM head code, softcapping and scaling included, fed our hidden states), and the checks
that refuse what our cache cannot hold (recurrent linear-attention layers, shared KV layers).

HFModel offers what our Transformer offers the scheduler and the trainer: `args`, `dtype`, `device`,
`forward(tokens_BT, ctx, lora)` -> final hidden states, `logits(h)`, `layers` and `blocks()` (the decoder layers a
sharded trainer wraps one by one), `recompute_tokens` (rows at least this long recompute each layer in backward),
`lora_targets()`, `prepare()`, `num_parameters()`.

Refuses to know: which adapter a row uses (the LoraBatch it is handed decides), scheduling, sampling, losses. Which
implementation serves a folder is loading.py's choice.
"""

from __future__ import annotations

import copy
import json
import os
import threading
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .lora import LoraTarget
from .model import (
    CHECKPOINT_TOKENS,
    SDPA_GQA,
    ForwardContext,
    KVCache,
    ModelArgs,
    cached_kv,
    eos_ids,
    rope_type,
    windowed,
)

NAME = "agent_trainer"  # the attention and experts implementation this module registers with transformers
ROUTERS = ("gate", "router", "shared_expert_gate")  # linear routers stay frozen: never LoRA targets
ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention")  # what our KV cache can hold
_LOCAL = threading.local()  # the forward running on this thread: its LoraBatch and ForwardContext


@dataclass
class _Active:
    lora: object | None
    ctx: ForwardContext
    T: int  # tokens per row: a flattened token n is row n // T
    recompute: bool = False  # each decoder layer keeps only its input and recomputes the rest in backward


def _active() -> _Active | None:
    return getattr(_LOCAL, "active", None)


def available() -> dict | None:
    """What the pinned transformers can load (its causal-LM model types and classes), or None without it."""
    try:
        import transformers
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as CAUSAL
    except ImportError:
        return None
    return {
        "version": transformers.__version__,
        "causal_lm": dict(sorted(CAUSAL.items())),  # model_type -> the class AutoModelForCausalLM builds
        "rope_types": ["default", *sorted(ROPE_INIT_FUNCTIONS)],
        "attention_layer_types": list(ATTENTION_LAYER_TYPES),
    }


def load_problem(cfg: dict) -> str | None:
    """Why this implementation cannot run a config.json, or None: an unknown model type, or layers whose state is not
    keys and values (recurrent linear attention) or is another layer's (shared KV)."""
    known = available()
    if known is None:
        return "transformers is not installed"
    text = cfg.get("text_config") or cfg
    cls = known["causal_lm"].get(cfg.get("model_type"))
    if cls is None:
        return f"model_type {cfg.get('model_type')!r} is not a causal LM transformers {known['version']} knows"
    other_classes = [a for a in cfg.get("architectures") or [] if a != cls]
    if other_classes:
        return f"its architectures {other_classes} are not {cls}, the causal LM of model_type {cfg['model_type']!r}"
    other = sorted(set(text.get("layer_types") or []) - set(ATTENTION_LAYER_TYPES))
    if other:
        return f"its layer types {other} keep a recurrent state, which this engine's KV cache cannot hold"
    if text.get("num_kv_shared_layers"):
        return "its layers share KV caches (num_kv_shared_layers), which this engine's KV cache cannot hold"
    unknown = [kind for kind in rope_type(text).split(",") if kind not in known["rope_types"]]
    if unknown:
        return f"its rope types {unknown} are not ones transformers knows"
    return None


def _expert_names(model_type: str) -> bool:
    """Whether this family's checkpoints name experts `mlp.experts.{e}.gate_proj|up_proj|down_proj` (the Qwen-MoE
    layout transformers fuses, and the per-expert names PEFT converts and vLLM serves): only then are experts
    targets under those names (Mixtral's w1/w2/w3 are not yet)."""
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    sources = [tuple(getattr(op, "source_patterns", ())) for op in get_checkpoint_conversion_mapping(model_type) or []]
    return ("mlp.experts.*.gate_proj.weight", "mlp.experts.*.up_proj.weight") in sources


# --- what this module registers with transformers ------------------------------------------------------------


def _attend(module, q_BHTD, k_BKTD, v_BKTD, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Attention under the running forward's context: keys/values into its cache slots, its mask, the layer's window."""
    for name in ("s_aux", "sinks"):
        if kwargs.get(name) is not None:
            raise ValueError("attention sinks are not supported by this engine")
    active = _active()
    if active is None:
        raise RuntimeError("this attention runs only inside HFModel.forward")
    k_BKSD, v_BKSD = cached_kv(active.ctx, module.layer_idx, k_BKTD, v_BKTD)
    allowed_BTS = windowed(active.ctx, kwargs.get("sliding_window"))
    H, K = q_BHTD.shape[1], k_BKSD.shape[1]
    softcap = kwargs.get("softcap")
    if softcap is None and (SDPA_GQA or H == K):
        out = F.scaled_dot_product_attention(
            q_BHTD, k_BKSD, v_BKSD, attn_mask=allowed_BTS, scale=scaling, enable_gqa=H != K
        )
    else:
        k_BHSD = k_BKSD.repeat_interleave(H // K, dim=1)
        v_BHSD = v_BKSD.repeat_interleave(H // K, dim=1)
        scores = torch.matmul(q_BHTD, k_BHSD.transpose(-1, -2)) * (scaling or q_BHTD.shape[-1] ** -0.5)
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        scores = scores.masked_fill(~allowed_BTS, float("-inf"))
        out = torch.matmul(torch.softmax(scores.float(), dim=-1).to(v_BHSD.dtype), v_BHSD)
    return out.transpose(1, 2).contiguous(), None


def _experts(self, hidden_NH, top_k_index_NK, top_k_weights_NK):
    """A mixture block's experts as transformers' eager loop computes them, plus each token's LoRA delta per expert."""
    prefix = getattr(self, "_lora_prefix", None)
    if prefix is None:  # a layout we do not adapt: transformers' own eager code
        return type(self).forward.__wrapped__(self, hidden_NH, top_k_index_NK, top_k_weights_NK)
    active = _active()
    lora = active.lora if active is not None else None
    inter, hidden = self.gate_up_proj.shape[1] // 2, self.gate_up_proj.shape[2]
    gate_up = down = rows_N = None
    if lora is not None:
        gate_up = lora.expert_stacks((f"{prefix}.gate_proj", f"{prefix}.up_proj"), (inter, inter), torch.float32)
        down = lora.expert_stacks((f"{prefix}.down_proj",), (hidden,), torch.float32)
        rows_N = torch.arange(hidden_NH.shape[0], device=hidden_NH.device) // active.T
    out_NH = torch.zeros_like(hidden_NH)
    experts = self.gate_up_proj.shape[0]
    with torch.no_grad():
        mask_EKN = F.one_hot(top_k_index_NK, num_classes=experts + 1).permute(2, 1, 0)
        hit = torch.greater(mask_EKN.sum(dim=(-1, -2)), 0).nonzero()
    for e in hit[:, 0].tolist():
        if e == experts:
            continue
        pos, tok = torch.where(mask_EKN[e])
        x = hidden_NH[tok]
        y = F.linear(x, self.gate_up_proj[e])
        if gate_up is not None:
            y = (y + lora.token_delta(gate_up, e, x.float(), rows_N[tok])).to(y.dtype)
        act = self._apply_gate(y)
        y = F.linear(act, self.down_proj[e])
        if down is not None:
            y = (y + lora.token_delta(down, e, act.float(), rows_N[tok])).to(y.dtype)
        out_NH.index_add_(0, tok, (y * top_k_weights_NK[tok, pos, None]).to(out_NH.dtype))
    return out_NH


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    AttentionInterface.register(NAME, _attend)
    ALL_EXPERTS_FUNCTIONS.register(NAME, _experts)


def _recomputing(forward):
    """A decoder layer's forward that, when the running forward asks, keeps only its inputs for backward and runs again
    there under the same adapters and context (whichever thread autograd recomputes it on)."""

    def run(*args, **kwargs):
        active = _active()
        if active is None or not active.recompute:
            return forward(*args, **kwargs)

        def again(*a, **k):
            outer = _active()
            _LOCAL.active = active
            try:
                return forward(*a, **k)
            finally:
                _LOCAL.active = outer

        return checkpoint(again, *args, use_reentrant=False, **kwargs)

    return run


def _lora_hook(module, inputs, output):
    """A decoder projection's output plus the running forward's per-row LoRA delta (none without an adapter)."""
    active = _active()
    if active is None or active.lora is None:
        return None
    x = inputs[0]
    flat = x.dim() == 2  # a mixture's shared expert sees tokens flattened: rows back for per-row selection
    x_BTI = x.reshape(-1, active.T, x.shape[-1]) if flat else x
    delta = active.lora.delta(module._lora_group, (module.out_features,), x_BTI.float())
    if delta is None:
        return None
    return (output + (delta.reshape(output.shape) if flat else delta)).to(output.dtype)


# --- the model ---------------------------------------------------------------------------------------------


class _Hidden(nn.Module):
    """Stands in for the decoder when the CausalLM head runs: answers the hidden states it is handed."""

    def forward(self, *args, inputs_embeds=None, **kwargs):
        return _HiddenOutput(inputs_embeds)


class _HiddenOutput(dict):
    def __init__(self, h):
        super().__init__(last_hidden_state=h)
        self.last_hidden_state = h

    def __getattr__(self, name):  # router logits, past key values …: none
        return None

    def __getitem__(self, key):
        return self.last_hidden_state if key == 0 else super().__getitem__(key)


class HFModel(nn.Module):
    implementation = "transformers"

    def __init__(self, hf, args: ModelArgs, dtype: torch.dtype, device: torch.device):
        super().__init__()
        self.hf, self.args, self.dtype, self.device = hf, args, dtype, device
        self.decoder = getattr(hf, hf.base_model_prefix)
        self.layers = self.decoder.layers
        self.recompute_tokens = CHECKPOINT_TOKENS  # training rows at least this long recompute each layer in backward
        for layer in self.layers:
            layer.forward = _recomputing(layer.forward)
        # The CausalLM's own head code (softcapping, logit scales) over a stand-in decoder: a shallow copy whose
        # decoder slot answers the hidden states given as inputs_embeds; parameters stay shared.
        self._head = copy.copy(hf)
        object.__setattr__(self._head, "_modules", {**hf._modules, hf.base_model_prefix: _Hidden()})
        self._targets = self._find_targets()

    @classmethod
    def from_pretrained(cls, folder: str, dtype: torch.dtype, device="cpu") -> HFModel:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        problem = load_problem(cfg)
        if problem:
            raise ValueError(f"{folder}: {problem}")
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()  # its warnings and progress bars are not the engine's log
        hf_logging.disable_progress_bar()
        _register()
        hf = AutoModelForCausalLM.from_pretrained(
            folder,
            dtype=dtype,
            attn_implementation=NAME,
            experts_implementation=NAME,
            use_safetensors=True,
            local_files_only=True,
            trust_remote_code=False,
        )
        hf.to(torch.device(device)).eval().requires_grad_(False)
        try:
            args = _args(hf.config.get_text_config(), cfg, folder)
        except Exception as e:  # transformers refuses a global read of a size that varies per layer
            raise ValueError(
                f"{folder}: its layers differ in attention sizes, which one KV cache cannot hold ({e})"
            ) from e
        return cls(hf, args, dtype, torch.device(device))

    def _find_targets(self) -> list[LoraTarget]:
        """The table (decoder_targets), hooking the linears and marking the expert stacks it lists."""
        return decoder_targets(self.hf, self.args.family, adapt=True)

    def lora_targets(self) -> list[LoraTarget]:
        return list(self._targets)

    def blocks(self) -> list[nn.Module]:
        """The repeated decoder layers, in order: the units a sharded trainer wraps one by one."""
        return list(self.layers)

    def forward(self, tokens_BT: torch.Tensor, ctx: ForwardContext, lora=None) -> torch.Tensor:
        """Final-normed hidden states [B, T, hidden], computed by transformers' decoder under `ctx`."""
        outer = _active()
        recompute = torch.is_grad_enabled() and ctx.cache is None and tokens_BT.numel() >= self.recompute_tokens
        _LOCAL.active = _Active(lora, ctx, tokens_BT.shape[1], recompute)
        try:
            out = self.decoder(input_ids=tokens_BT, position_ids=ctx.positions_BT, use_cache=False)
        finally:
            _LOCAL.active = outer
        return out.last_hidden_state

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """fp32 logits of hidden states [..., hidden] through the CausalLM's own head."""
        flat = h.reshape(1, -1, h.shape[-1])
        out = self._head(inputs_embeds=flat, use_cache=False, logits_to_keep=0)
        return out.logits.reshape(*h.shape[:-1], -1).float()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.hf.parameters())

    def prepare(self, max_positions: int) -> None:
        """Two tokens packed, then prefilled into a one-slot cache: a layer this engine cannot serve (attention sinks,
        keys and values of another shape than the cache's) fails the load, not the first request."""
        tokens = torch.zeros(1, 2, dtype=torch.long, device=self.device)
        with torch.no_grad():
            self(tokens, ForwardContext.packed(torch.zeros_like(tokens)))
            cache = KVCache(self.args, self.dtype, self.device, slots=1, length=2)
            try:
                self(tokens, ForwardContext.cached(cache, 0, [0], 2))
            except RuntimeError as e:  # a copy into the cache of another shape
                raise ValueError(f"its layers' keys and values do not all have one shape ({e})") from e


def decoder_targets(hf, model_type: str, adapt: bool = False) -> list[LoraTarget]:
    """Every linear projection of the decoder's layers (routers aside) and every standard expert stack, in module
    order, named as PEFT names them; `adapt`: hooks the linears and marks the expert stacks on the way."""
    names = {m: n for n, m in hf.named_modules()}
    experts_named = _expert_names(model_type)
    targets = []
    for layer in getattr(hf, hf.base_model_prefix).layers:
        for sub in layer.modules():
            path = names[sub]
            kind = "attention" if any(p in ("self_attn", "attention", "attn") for p in path.split(".")) else "mlp"
            leaf = path.rsplit(".", 1)[-1]
            if isinstance(sub, nn.Linear) and leaf not in ROUTERS:
                if adapt:
                    sub._lora_group = (path,)
                    sub.register_forward_hook(_lora_hook)
                targets.append(LoraTarget(path, leaf, kind, sub.in_features, sub.out_features))
            elif experts_named and _standard_experts(sub):
                if adapt:
                    sub._lora_prefix = path
                E, two_i, h = sub.gate_up_proj.shape
                for name, fan_in, fan_out in (("gate_proj", h, two_i // 2), ("up_proj", h, two_i // 2)):
                    targets.append(LoraTarget(f"{path}.{name}", name, "mlp", fan_in, fan_out, E))
                targets.append(LoraTarget(f"{path}.down_proj", "down_proj", "mlp", two_i // 2, h, E))
    return targets


def folder_targets(folder: str) -> list[LoraTarget]:
    """The target table of a base folder this implementation would run, from its config alone: the module tree built
    on the meta device (no weights read), for checking an adapter against a base that is not loaded."""
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    problem = load_problem(cfg)
    if problem:
        raise ValueError(f"{folder}: {problem}")
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    with torch.device("meta"):
        hf = AutoModelForCausalLM.from_config(config)
    return decoder_targets(hf, cfg["model_type"])


def _standard_experts(module: nn.Module) -> bool:
    """A mixture's experts in transformers' standard layout: [experts, 2·inter, hidden] gate/up concatenated, [experts,
    hidden, inter] down, no bias, not transposed, gated (what PEFT converts per-expert adapters into)."""
    gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    return (
        isinstance(gate_up, nn.Parameter)
        and isinstance(down, nn.Parameter)
        and gate_up.dim() == 3
        and getattr(module, "has_gate", False)
        and getattr(module, "is_concatenated", False)
        and not getattr(module, "has_bias", True)
        and not getattr(module, "is_transposed", True)
        and tuple(down.shape) == (gate_up.shape[0], gate_up.shape[2], gate_up.shape[1] // 2)
    )


def _args(text, cfg: dict, folder: str) -> ModelArgs:
    """The sizes the scheduler and the KV cache need, read from transformers' own (text) config."""
    heads = int(text.num_attention_heads)
    return ModelArgs(
        family=cfg["model_type"],
        vocab_size=int(text.vocab_size),
        hidden_size=int(text.hidden_size),
        intermediate_size=int(getattr(text, "intermediate_size", 0) or 0),
        num_layers=int(text.num_hidden_layers),
        num_heads=heads,
        num_kv_heads=int(getattr(text, "num_key_value_heads", None) or heads),
        head_dim=int(getattr(text, "head_dim", None) or text.hidden_size // heads),
        max_position_embeddings=int(getattr(text, "max_position_embeddings", None) or 2048),
        tie_word_embeddings=bool(getattr(text, "tie_word_embeddings", False)),
        sliding_window=None,  # per layer: each attention call names its own window
        eos_token_ids=eos_ids(cfg, folder),
    )
