"""The decoder-only transformer of the Llama / Mistral / Qwen2 / Qwen3 families.

Owns: ModelArgs (mapped explicitly from HF `config.json`), the module tree
(RMSNorm, RoPE with Llama-3 scaling, GQA attention with optional q/k norm and
qkv bias, SwiGLU MLP, tied or untied head), the explicit HF-name -> parameter
mapping used when loading, the preallocated KV cache tensors, and the three
ways a forward sees attention: packed rows with segment ids (training,
`forward`), a prompt written into one cache slot (prefill), and one new token
per cache slot (decode).

Refuses to know: which adapter a row uses (it calls `lora.delta(modules, sizes, x)`
on whatever object it is given), how cache slots are scheduled, sampling, losses.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from . import weights as W

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
HAS_RMS_NORM = hasattr(F, "rms_norm")


def _sdpa_has_gqa() -> bool:
    # torch >= 2.5 attends grouped kv heads without materialising copies of them.
    if not HAS_SDPA:
        return False
    try:
        z = torch.zeros(1, 2, 1, 4)
        F.scaled_dot_product_attention(z, z[:, :1], z[:, :1], enable_gqa=True)
        return True
    except (TypeError, RuntimeError):
        return False


SDPA_GQA = _sdpa_has_gqa()
ATTN_CHUNK_ELEMENTS = 1 << 25  # score elements per attention chunk on the non-SDPA path (128 MiB fp32)
CHECKPOINT_TOKENS = 4096  # training rows at least this long recompute each block in backward (unless told otherwise)
# What this engine runs, as config.json names it (model_type -> its architecture class); announced in the ready frame.
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
FAMILIES = tuple(ARCHITECTURES)
ROPE_TYPES = ("default", "linear", "llama3")  # rope_scaling types rope_inv_freq computes
# Names the LoRA side addresses; q/k/v and gate/up are fused in the base
# weights for speed but stay separate modules for adapters and HF loading.
ATTN_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")


@dataclass
class ModelArgs:
    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    eos_token_ids: list[int] = field(default_factory=list)

    @classmethod
    def from_hf_config(cls, cfg: dict) -> ModelArgs:
        family = cfg.get("model_type")
        if family not in FAMILIES:
            raise ValueError(f"unsupported model_type {family!r}; supported: {', '.join(FAMILIES)}")
        unknown = [name for name in cfg.get("architectures") or [] if name not in ARCHITECTURES.values()]
        if unknown:
            raise ValueError(f"unsupported architectures {unknown}; supported: {', '.join(ARCHITECTURES.values())}")
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        attention_bias = bool(cfg.get("attention_bias", False))
        if family == "qwen2" and cfg.get("use_sliding_window"):
            raise ValueError("qwen2 use_sliding_window=true is not supported")
        eos = cfg.get("eos_token_id")
        eos_ids = [] if eos is None else [int(e) for e in (eos if isinstance(eos, list) else [eos])]
        rope_theta, rope_scaling = rope_config(cfg)
        return cls(
            family=family,
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            # Every one of these four HF config classes defaults to untied.
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            # Qwen2 always has q/k/v bias and never an o bias; Llama/Qwen3 put
            # `attention_bias` on all four projections; Mistral has none.
            qkv_bias=True if family == "qwen2" else (attention_bias and family != "mistral"),
            o_bias=attention_bias and family in ("llama", "qwen3"),
            mlp_bias=bool(cfg.get("mlp_bias", False)) and family == "llama",
            qk_norm=family == "qwen3",
            sliding_window=cfg.get("sliding_window") if family == "mistral" else None,
            eos_token_ids=eos_ids,
        )

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim


def rope_config(cfg: dict) -> tuple[float, dict | None]:
    """(theta, scaling) from config.json: `rope_theta` + `rope_scaling`, or `rope_parameters` as transformers 5
    writes them (one flat dict; a dict per layer type is another model's layout, not ours)."""
    params = cfg.get("rope_parameters")
    if params is None:
        return float(cfg.get("rope_theta", 10000.0)), cfg.get("rope_scaling")
    if not isinstance(params, dict) or "rope_theta" not in params:
        raise ValueError("rope_parameters per layer type are not supported by this implementation")
    kind = params.get("rope_type", params.get("type", "default"))
    return float(params["rope_theta"]), None if kind == "default" else dict(params)


def rope_type(cfg: dict) -> str:
    """The RoPE scaling type a config.json asks for (`default`: none), in either layout."""
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if (
        isinstance(params, dict)
        and "rope_theta" not in params
        and params
        and all(isinstance(v, dict) for v in params.values())
    ):
        kinds = {v.get("rope_type", v.get("type", "default")) for v in params.values()}
        return ",".join(sorted(kinds))
    return params.get("rope_type", params.get("type", "default")) if isinstance(params, dict) else "default"


def rope_inv_freq(args: ModelArgs) -> tuple[torch.Tensor, float]:
    """Inverse frequencies [D/2] and the position divisor, as HF computes them."""
    dim = args.head_dim
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    scaling = args.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv_freq, 1.0
    if kind == "linear":
        return inv_freq, float(scaling["factor"])
    if kind == "llama3":
        factor = float(scaling["factor"])
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old_len = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        return torch.where(medium, smoothed, scaled), 1.0
    raise ValueError(f"unsupported rope_scaling type {kind!r} (supported: {', '.join(ROPE_TYPES)})")


class Rope:
    """cos/sin tables grown on demand, indexed by absolute position."""

    def __init__(self, args: ModelArgs, device: torch.device):
        inv_freq, self.divisor = rope_inv_freq(args)
        self.inv_freq = inv_freq.to(device)
        self.cos = torch.empty(0, args.head_dim, device=device)
        self.sin = torch.empty(0, args.head_dim, device=device)

    def _grow(self, length: int) -> None:
        length = max(length, 2 * self.cos.shape[0], 256)
        pos = torch.arange(length, device=self.inv_freq.device, dtype=torch.float32) / self.divisor
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos, self.sin = emb.cos(), emb.sin()

    def lookup(self, positions_BT: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        need = int(positions_BT.max()) + 1 if positions_BT.numel() else 1
        if need > self.cos.shape[0]:
            self._grow(need)
        # [B, 1, T, D] broadcasts over heads in the [B, H, T, D] layout.
        return (self.cos[positions_BT].unsqueeze(1).to(dtype), self.sin[positions_BT].unsqueeze(1).to(dtype))


def apply_rope(x_BHTD: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x_BHTD.shape[-1] // 2
    rotated = torch.cat([-x_BHTD[..., half:], x_BHTD[..., :half]], dim=-1)
    return x_BHTD * cos + rotated * sin


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if HAS_RMS_NORM and x.dtype == torch.float32:
        # One fused kernel (torch >= 2.4), same result in fp32 up to rounding.
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    # Same op order and fp32 upcast as HF so bf16 results match theirs.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


class KVCache:
    """Per-slot key/value tensors [layers, slots, kv_heads, length, head_dim], grown by doubling.

    A slot holds one sequence; position p of a sequence lives at index p of its slot.
    """

    def __init__(
        self,
        args: ModelArgs,
        dtype: torch.dtype,
        device: torch.device,
        slots: int = 4,
        length: int = 256,
        max_slots: int | None = None,
        max_length: int | None = None,
    ):
        self.args, self.dtype, self.device = args, dtype, device
        self.max_slots, self.max_length = max_slots, max_length
        self.k = self.v = torch.empty(0)
        self.slots = self.length = 0
        self.ensure(slots, length)

    def ensure(self, slots: int, length: int) -> None:
        if slots <= self.slots and length <= self.length:
            return
        # Doubling keeps regrowth (a full copy) rare; the caps keep it from overshooting the scheduler's limits.
        new_slots = (
            max(slots, self.slots)
            if slots <= self.slots
            else max(slots, min(2 * self.slots, self.max_slots or 1 << 30))
        )
        new_len = (
            max(length, self.length)
            if length <= self.length
            else max(length, min(2 * self.length, self.max_length or 1 << 30))
        )
        a = self.args
        shape = (a.num_layers, new_slots, a.num_kv_heads, new_len, a.head_dim)
        k = torch.zeros(shape, dtype=self.dtype, device=self.device)
        v = torch.zeros(shape, dtype=self.dtype, device=self.device)
        if self.slots:
            k[:, : self.slots, :, : self.length] = self.k
            v[:, : self.slots, :, : self.length] = self.v
        self.k, self.v, self.slots, self.length = k, v, new_slots, new_len

    def copy_slot(self, src: int, dst: int, length: int) -> None:
        self.k[:, dst, :, :length] = self.k[:, src, :, :length]
        self.v[:, dst, :, :length] = self.v[:, src, :, :length]

    def clear(self, slot: int, begin: int, end: int) -> None:
        """Zeroes positions [begin, end) of a slot: a masked position still enters attention (0 x NaN is NaN), so
        what a departed sequence left there must not be read by the next one."""
        if begin < end:
            self.k[:, slot, :, begin:end] = 0
            self.v[:, slot, :, begin:end] = 0

    def clear_all(self) -> None:
        self.k.zero_()
        self.v.zero_()

    def read_prefix(self, slot: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Copies of the first `length` positions of a slot (for the prefix cache)."""
        return self.k[:, slot, :, :length].clone(), self.v[:, slot, :, :length].clone()

    def write_prefix(self, slot: int, kv: tuple[torch.Tensor, torch.Tensor], length: int) -> None:
        """Puts the first `length` positions of a `read_prefix` result into a slot."""
        self.k[:, slot, :, :length] = kv[0][:, :, :length]
        self.v[:, slot, :, :length] = kv[1][:, :, :length]


@dataclass
class ForwardContext:
    """How one forward sees attention; built by `packed` or `cached`."""

    positions_BT: torch.Tensor
    allowed_BTS: torch.Tensor  # bool [B, 1, T, S]: query t may attend to key s
    cache: KVCache | None = None
    first_slot: int = 0  # cached mode: row b is the sequence in slot first_slot + b
    starts: list[int] | None = None  # cached mode: row b's new tokens sit at starts[b] .. starts[b]+T-1

    @classmethod
    def packed(cls, segment_ids_BT: torch.Tensor, window: int | None = None) -> ForwardContext:
        """Rows of several sequences: block-diagonal causal attention, positions restart per segment."""
        B, T = segment_ids_BT.shape
        device = segment_ids_BT.device
        idx_T = torch.arange(T, device=device)
        starts_BT = torch.ones(B, T, dtype=torch.bool, device=device)
        starts_BT[:, 1:] = segment_ids_BT[:, 1:] != segment_ids_BT[:, :-1]
        # position = t - (index where this segment began)
        start_idx_BT = torch.where(starts_BT, idx_T.expand(B, T), torch.zeros_like(idx_T).expand(B, T))
        start_idx_BT = torch.cummax(start_idx_BT, dim=1).values
        positions_BT = idx_T[None, :] - start_idx_BT
        same_BTT = segment_ids_BT[:, :, None] == segment_ids_BT[:, None, :]
        allowed = same_BTT & (idx_T[None, :, None] >= idx_T[None, None, :])
        if window:
            allowed &= (idx_T[None, :, None] - idx_T[None, None, :]) < window
        return cls(positions_BT=positions_BT, allowed_BTS=allowed.unsqueeze(1))

    @classmethod
    def cached(
        cls, cache: KVCache, first_slot: int, starts: list[int], length: int, window: int | None = None
    ) -> ForwardContext:
        """Rows continue the sequences in consecutive cache slots.

        Row b feeds `length` new tokens at positions starts[b].., writes their
        keys into its slot and attends to everything its slot holds up to them.
        Prefill is one row with starts=[0] (or a later chunk); decode is every
        running slot with length 1.
        """
        device = cache.device
        starts_B = torch.tensor(starts, device=device)
        positions_BT = starts_B[:, None] + torch.arange(length, device=device)[None, :]
        s_S = torch.arange(max(starts) + length, device=device)
        allowed = s_S[None, None, :] <= positions_BT[:, :, None]
        if window:
            allowed &= (positions_BT[:, :, None] - s_S[None, None, :]) < window
        return cls(
            positions_BT=positions_BT,
            allowed_BTS=allowed.unsqueeze(1),
            cache=cache,
            first_slot=first_slot,
            starts=list(starts),
        )


def cached_kv(ctx: ForwardContext, layer: int, k_BKTD: torch.Tensor, v_BKTD: torch.Tensor) -> tuple:
    """The keys and values one layer attends to: the new ones alone (packed rows), or, in cached mode, the new ones
    written into each row's cache slot and a view of the slots up to them (consecutive slots: no gather)."""
    cache = ctx.cache
    if cache is None:
        return k_BKTD, v_BKTD
    B, T = k_BKTD.shape[0], k_BKTD.shape[2]
    s0, span = ctx.first_slot, ctx.allowed_BTS.shape[-1]
    if T == 1:
        rows = torch.arange(s0, s0 + B, device=k_BKTD.device)
        pos_B = ctx.positions_BT[:, 0]
        cache.k[layer, rows, :, pos_B] = k_BKTD[:, :, 0]
        cache.v[layer, rows, :, pos_B] = v_BKTD[:, :, 0]
    else:
        for b, start in enumerate(ctx.starts):
            cache.k[layer, s0 + b, :, start : start + T] = k_BKTD[b]
            cache.v[layer, s0 + b, :, start : start + T] = v_BKTD[b]
    return cache.k[layer, s0 : s0 + B, :, :span], cache.v[layer, s0 : s0 + B, :, :span]


def windowed(ctx: ForwardContext, window: int | None) -> torch.Tensor:
    """ctx's mask [B, 1, T, S] with keys further back than `window` positions hidden (a sliding-window layer)."""
    if not window:
        return ctx.allowed_BTS
    T, S = ctx.allowed_BTS.shape[-2:]
    if ctx.cache is None:  # packed: a key at index s of the same segment is t - s positions back
        idx = torch.arange(T, device=ctx.allowed_BTS.device)
        near = (idx[:, None] - idx[None, :]) < window
        return ctx.allowed_BTS & near[None, None]
    keys_S = torch.arange(S, device=ctx.allowed_BTS.device)
    near = (ctx.positions_BT[:, :, None] - keys_S[None, None, :]) < window
    return ctx.allowed_BTS & near[:, None]


def attention(
    q_BHTD: torch.Tensor,
    k_BKSD: torch.Tensor,
    v_BKSD: torch.Tensor,
    allowed_BTS: torch.Tensor,
    bias_BTS: torch.Tensor | None,
) -> torch.Tensor:
    B, H, T, D = q_BHTD.shape
    K, S = k_BKSD.shape[1], k_BKSD.shape[2]
    G = H // K
    mask = allowed_BTS if bias_BTS is None else bias_BTS  # the same positions, as an additive mask when given one
    if SDPA_GQA and G > 1:
        return F.scaled_dot_product_attention(q_BHTD, k_BKSD, v_BKSD, attn_mask=mask, enable_gqa=True)
    if HAS_SDPA:
        if G > 1:
            k_BKSD = k_BKSD[:, :, None].expand(B, K, G, S, D).reshape(B, H, S, D)
            v_BKSD = v_BKSD[:, :, None].expand(B, K, G, S, D).reshape(B, H, S, D)
        return F.scaled_dot_product_attention(q_BHTD, k_BKSD, v_BKSD, attn_mask=mask)
    q_BKGTD = q_BHTD.view(B, K, G, T, D)
    # Bound the score matrix of long rows: queries in chunks, each seeing all keys.
    chunk = max(1, ATTN_CHUNK_ELEMENTS // (B * H * S))
    if chunk >= T:
        out = _attend(q_BKGTD, k_BKSD, v_BKSD, bias_BTS)
    else:
        out = torch.cat(
            [
                _attend(q_BKGTD[:, :, :, t : t + chunk], k_BKSD, v_BKSD, bias_BTS[:, :, t : t + chunk])
                for t in range(0, T, chunk)
            ],
            dim=3,
        )
    return out.view(B, H, T, D)


def _attend(q_BKGTD: torch.Tensor, k_BKSD: torch.Tensor, v_BKSD: torch.Tensor, bias_BTS: torch.Tensor) -> torch.Tensor:
    # Grouped query heads share a kv head: fold the group into the query axis
    # instead of copying keys G times.
    B, K, G, T, D = q_BKGTD.shape
    S = k_BKSD.shape[2]
    scores = torch.matmul(q_BKGTD.reshape(B, K, G * T, D), k_BKSD.transpose(-1, -2)).mul_(1.0 / math.sqrt(D))
    scores = scores.view(B, K, G, T, S).add_(bias_BTS.unsqueeze(2))
    probs = torch.softmax(scores.float(), dim=-1).to(v_BKSD.dtype).view(B, K, G * T, S)
    return torch.matmul(probs, v_BKSD).view(B, K, G, T, D)


class Block(nn.Module):
    def __init__(self, args: ModelArgs, index: int, dtype: torch.dtype, device: torch.device):
        super().__init__()
        a, e = args, dict(dtype=dtype, device=device)
        self.args, self.index = args, index
        p = f"model.layers.{index}."
        # LoRA groups: projections that read the same input and share one fused base matmul.
        self.g_qkv = (p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj")
        self.g_o = (p + "self_attn.o_proj",)
        self.g_gate_up = (p + "mlp.gate_proj", p + "mlp.up_proj")
        self.g_down = (p + "mlp.down_proj",)
        self.input_layernorm = nn.Parameter(torch.empty(a.hidden_size, **e), requires_grad=False)
        self.post_attention_layernorm = nn.Parameter(torch.empty(a.hidden_size, **e), requires_grad=False)
        self.qkv = nn.Parameter(torch.empty(a.q_size + 2 * a.kv_size, a.hidden_size, **e), requires_grad=False)
        self.qkv_bias = (
            nn.Parameter(torch.empty(a.q_size + 2 * a.kv_size, **e), requires_grad=False) if a.qkv_bias else None
        )
        self.o = nn.Parameter(torch.empty(a.hidden_size, a.q_size, **e), requires_grad=False)
        self.o_bias = nn.Parameter(torch.empty(a.hidden_size, **e), requires_grad=False) if a.o_bias else None
        self.q_norm = nn.Parameter(torch.empty(a.head_dim, **e), requires_grad=False) if a.qk_norm else None
        self.k_norm = nn.Parameter(torch.empty(a.head_dim, **e), requires_grad=False) if a.qk_norm else None
        self.gate_up = nn.Parameter(torch.empty(2 * a.intermediate_size, a.hidden_size, **e), requires_grad=False)
        self.gate_up_bias = (
            nn.Parameter(torch.empty(2 * a.intermediate_size, **e), requires_grad=False) if a.mlp_bias else None
        )
        self.down = nn.Parameter(torch.empty(a.hidden_size, a.intermediate_size, **e), requires_grad=False)
        self.down_bias = nn.Parameter(torch.empty(a.hidden_size, **e), requires_grad=False) if a.mlp_bias else None

    def _lora(
        self, lora, group: tuple[str, ...], sizes: tuple[int, ...], x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        if lora is None:
            return y
        # The low-rank products run in fp32 whatever the weights' dtype (the adapter's own dtype): in bf16, x·Aᵀ,
        # then ·Bᵀ, then the sum would each round to 8 bits, and the adapter's gradients would come from rounded
        # activations. One rounding, of the sum, remains. A no-op for fp32 models.
        delta = lora.delta(group, sizes, x.float())
        return y if delta is None else (y + delta).to(y.dtype)

    def forward(
        self,
        x_BTD: torch.Tensor,
        ctx: ForwardContext,
        rope: tuple[torch.Tensor, torch.Tensor],
        bias_BTS: torch.Tensor | None,
        lora,
    ) -> torch.Tensor:
        a = self.args
        B, T, _ = x_BTD.shape
        h = rms_norm(x_BTD, self.input_layernorm, a.rms_norm_eps)
        qkv = self._lora(lora, self.g_qkv, (a.q_size, a.kv_size, a.kv_size), h, F.linear(h, self.qkv, self.qkv_bias))
        q, k, v = qkv.split([a.q_size, a.kv_size, a.kv_size], dim=-1)
        q_BHTD = q.view(B, T, a.num_heads, a.head_dim)
        k_BKTD = k.view(B, T, a.num_kv_heads, a.head_dim)
        if self.q_norm is not None:
            q_BHTD = rms_norm(q_BHTD, self.q_norm, a.rms_norm_eps)
            k_BKTD = rms_norm(k_BKTD, self.k_norm, a.rms_norm_eps)
        q_BHTD = apply_rope(q_BHTD.transpose(1, 2), *rope)
        k_BKTD = apply_rope(k_BKTD.transpose(1, 2), *rope)
        v_BKTD = v.view(B, T, a.num_kv_heads, a.head_dim).transpose(1, 2)
        k_BKTD, v_BKTD = cached_kv(ctx, self.index, k_BKTD, v_BKTD)
        out = attention(q_BHTD, k_BKTD, v_BKTD, ctx.allowed_BTS, bias_BTS)
        out = out.transpose(1, 2).reshape(B, T, a.q_size)
        x_BTD = x_BTD + self._lora(lora, self.g_o, (a.hidden_size,), out, F.linear(out, self.o, self.o_bias))
        h = rms_norm(x_BTD, self.post_attention_layernorm, a.rms_norm_eps)
        inter = a.intermediate_size
        gate_up = self._lora(lora, self.g_gate_up, (inter, inter), h, F.linear(h, self.gate_up, self.gate_up_bias))
        gate, up = gate_up.chunk(2, dim=-1)
        act = F.silu(gate) * up
        return x_BTD + self._lora(lora, self.g_down, (a.hidden_size,), act, F.linear(act, self.down, self.down_bias))


class Transformer(nn.Module):
    implementation = "ours"

    def __init__(self, args: ModelArgs, dtype: torch.dtype = torch.float32, device="cpu"):
        super().__init__()
        device = torch.device(device)
        self.args, self.dtype, self.device = args, dtype, device
        e = dict(dtype=dtype, device=device)
        self.embed_tokens = nn.Parameter(torch.empty(args.vocab_size, args.hidden_size, **e), requires_grad=False)
        self.layers = nn.ModuleList(Block(args, i, dtype, device) for i in range(args.num_layers))
        self.norm = nn.Parameter(torch.empty(args.hidden_size, **e), requires_grad=False)
        self.lm_head = (
            None
            if args.tie_word_embeddings
            else nn.Parameter(torch.empty(args.vocab_size, args.hidden_size, **e), requires_grad=False)
        )
        self.rope = Rope(args, device)
        self.recompute_tokens = CHECKPOINT_TOKENS  # the engine sets it from its activation budget

    @classmethod
    def on_meta(cls, args: ModelArgs, dtype: torch.dtype, device) -> Transformer:
        """A model whose parameters are not allocated yet (device meta: shard.py shards them, then fills each rank's
        rows); its rope tables and `device` are the real device's."""
        model = cls(args, dtype, "meta")
        model.device = torch.device(device)
        model.rope = Rope(args, model.device)
        return model

    def blocks(self) -> list[nn.Module]:
        """The repeated transformer blocks, in order: the units FSDP shards one by one (shard.py)."""
        return list(self.layers)

    def activation_bytes_per_token(self) -> int:
        """About what one token's forward keeps for backward (every block's saved tensors, measured within ~20% on
        SmolLM2); the engine divides its activation budget by it to choose when blocks recompute."""
        a, size = self.args, torch.finfo(self.dtype).bits // 8
        return (
            a.num_layers
            * size
            * (6 * a.hidden_size + 2 * (a.q_size + 2 * a.kv_size) + 2 * a.q_size + 5 * a.intermediate_size)
        )

    def forward(self, tokens_BT: torch.Tensor, ctx: ForwardContext, lora=None) -> torch.Tensor:
        """Final-normed hidden states [B, T, hidden]; `logits` turns chosen positions into logits."""
        x = F.embedding(tokens_BT, self.embed_tokens)
        rope = self.rope.lookup(ctx.positions_BT, x.dtype)
        bias = None
        training = torch.is_grad_enabled() and ctx.cache is None
        if not HAS_SDPA or training:
            # One additive mask shared by every layer: given a boolean one, SDPA makes (and keeps for backward) a float
            # copy per layer, T x T each.
            bias = torch.zeros(ctx.allowed_BTS.shape, dtype=torch.float32 if not HAS_SDPA else x.dtype, device=x.device)
            bias.masked_fill_(~ctx.allowed_BTS, float("-inf"))
        # Long training rows keep only each block's input and recompute the rest in backward.
        recompute = training and tokens_BT.numel() >= self.recompute_tokens
        for block in self.layers:
            if recompute:
                x = checkpoint(block, x, ctx, rope, bias, lora, use_reentrant=False)
            else:
                x = block(x, ctx, rope, bias, lora)
        return rms_norm(x, self.norm, self.args.rms_norm_eps)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        head = self.embed_tokens if self.lm_head is None else self.lm_head
        return F.linear(h, head).float()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def prepare(self, max_positions: int) -> None:
        """Grows the rope tables now, so the training and compute threads never race to replace them."""
        self.rope.lookup(torch.tensor([[max_positions - 1]], device=self.device), self.dtype)

    def lora_targets(self) -> list:
        """The projections an adapter may target (lora.py's table, from ModelArgs)."""
        from .lora import dense_targets  # lora.py imports this module's constants

        return dense_targets(self.args)

    # --- HF checkpoints -------------------------------------------------------

    def hf_mapping(self) -> dict[str, tuple[nn.Parameter, int, int]]:
        """HF tensor name -> (our parameter, first row, end row) it fills."""
        a = self.args
        m: dict[str, tuple[nn.Parameter, int, int]] = {}

        def whole(name: str, p: nn.Parameter | None) -> None:
            if p is not None:
                m[name] = (p, 0, p.shape[0])

        whole("model.embed_tokens.weight", self.embed_tokens)
        whole("model.norm.weight", self.norm)
        whole("lm_head.weight", self.lm_head)
        q, kv, inter = a.q_size, a.kv_size, a.intermediate_size
        for i, b in enumerate(self.layers):
            p = f"model.layers.{i}."
            whole(p + "input_layernorm.weight", b.input_layernorm)
            whole(p + "post_attention_layernorm.weight", b.post_attention_layernorm)
            for suffix, param in (("weight", b.qkv), ("bias", b.qkv_bias)):
                if param is not None:
                    m[p + f"self_attn.q_proj.{suffix}"] = (param, 0, q)
                    m[p + f"self_attn.k_proj.{suffix}"] = (param, q, q + kv)
                    m[p + f"self_attn.v_proj.{suffix}"] = (param, q + kv, q + 2 * kv)
            whole(p + "self_attn.o_proj.weight", b.o)
            whole(p + "self_attn.o_proj.bias", b.o_bias)
            whole(p + "self_attn.q_norm.weight", b.q_norm)
            whole(p + "self_attn.k_norm.weight", b.k_norm)
            for suffix, param in (("weight", b.gate_up), ("bias", b.gate_up_bias)):
                if param is not None:
                    m[p + f"mlp.gate_proj.{suffix}"] = (param, 0, inter)
                    m[p + f"mlp.up_proj.{suffix}"] = (param, inter, 2 * inter)
            whole(p + "mlp.down_proj.weight", b.down)
            whole(p + "mlp.down_proj.bias", b.down_bias)
        return m

    def load_hf_tensors(self, tensors, fill=None) -> None:
        """Every parameter from HF-named tensors; `fill(param, first_row, tensor)` copies one tensor into the rows it
        fills (default: all of them; a sharded trainer copies only its own)."""
        mapping = self.hf_mapping()
        filled, unexpected = set(), []
        for name, t in tensors:
            target = mapping.get(name)
            if target is None:
                # Tied checkpoints sometimes still carry lm_head; rotary buffers are derived.
                if not (name == "lm_head.weight" or name.endswith("rotary_emb.inv_freq")):
                    unexpected.append(name)
                continue
            param, lo, hi = target
            expected = (hi - lo,) + tuple(param.shape[1:])
            if tuple(t.shape) != expected:
                raise ValueError(f"{name}: shape {tuple(t.shape)} != expected {expected}")
            if fill is not None:
                fill(param, lo, t)
            else:
                with torch.no_grad():
                    param[lo:hi].copy_(t)
            filled.add(name)
        missing = sorted(set(mapping) - filled)
        if missing or unexpected:
            raise ValueError(
                f"checkpoint mismatch: missing {missing[:8]}{'…' if len(missing) > 8 else ''}, "
                f"unexpected {unexpected[:8]}{'…' if len(unexpected) > 8 else ''}"
            )

    @classmethod
    def from_pretrained(cls, folder: str, dtype: torch.dtype, device="cpu") -> Transformer:
        args = load_args(folder)
        model = cls(args, dtype, device)
        model.load_hf_tensors(W.iter_checkpoint(folder))
        return model


def load_args(folder: str) -> ModelArgs:
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    args = ModelArgs.from_hf_config(cfg)
    args.eos_token_ids = eos_ids(cfg, folder)
    return args


def eos_ids(cfg: dict, folder: str) -> list[int]:
    """config.json's end-of-sequence ids joined with generation_config.json's (chat models often list their
    end-of-turn token only there)."""
    found = set()
    gen_path = os.path.join(folder, "generation_config.json")
    sources = [cfg.get("eos_token_id"), (cfg.get("text_config") or {}).get("eos_token_id")]
    if os.path.exists(gen_path):
        with open(gen_path, encoding="utf-8") as f:
            sources.append(json.load(f).get("eos_token_id"))
    for eos in sources:
        found |= {int(e) for e in ([] if eos is None else eos if isinstance(eos, list) else [eos])}
    return sorted(found)


def init_hf_weights(args: ModelArgs, seed: int = 0, std: float = 0.02) -> dict[str, torch.Tensor]:
    """Random HF-named fp32 tensors for a config (tests, benchmarks, from-scratch pretraining).

    Norm weights and biases are perturbed away from their identity values so a
    wrong name mapping changes the output instead of hiding.
    """
    g = torch.Generator().manual_seed(seed)
    model = Transformer(args, torch.float32, "cpu")
    out: dict[str, torch.Tensor] = {}
    for name, (param, lo, hi) in model.hf_mapping().items():
        shape = (hi - lo,) + tuple(param.shape[1:])
        if "norm" in name:
            out[name] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        elif name.endswith(".bias"):
            out[name] = 0.02 * torch.randn(shape, generator=g)
        else:
            out[name] = std * torch.randn(shape, generator=g)
    return out


def write_hf_checkpoint(
    folder: str, config: dict, tensors: dict[str, torch.Tensor], max_shard_bytes: int | None = None
) -> None:
    os.makedirs(folder, exist_ok=True)
    W.atomic_write_json(os.path.join(folder, "config.json"), config)
    W.save_checkpoint(tensors, folder, max_shard_bytes)
