"""Model loading per family (against a naive float64 reference), KV-cache equivalence, packing, RoPE scaling."""

import math
import os
import tempfile
import unittest

import torch

from engine import model as M
from engine import weights as W
from engine.model import ForwardContext, KVCache, ModelArgs, Transformer, rope_inv_freq
from engine.tests.helpers import make_checkpoint, tiny_config


def reference_logits(cfg: dict, sd: dict, tokens: list) -> torch.Tensor:
    """Straight from the HF formulas, one sequence, float64, no shared code with engine.model."""
    sd = {k: v.double() for k, v in sd.items()}
    fam = cfg["model_type"]
    H, K = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    eps = cfg["rms_norm_eps"]
    T = len(tokens)

    def norm(x, w):
        return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))

    def lin(x, name):
        y = x @ sd[name + ".weight"].T
        return y + sd[name + ".bias"] if name + ".bias" in sd else y

    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)

    def rope(x):  # [T, heads, D]
        rot = torch.cat([-x[..., D // 2 :], x[..., : D // 2]], -1)
        return x * cos[:, None, :] + rot * sin[:, None, :]

    x = sd["model.embed_tokens.weight"][tokens]
    window = cfg.get("sliding_window") if fam == "mistral" else None
    i_idx, j_idx = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = j_idx <= i_idx
    if window:
        allowed &= (i_idx - j_idx) < window
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = norm(x, sd[p + "input_layernorm.weight"])
        q = lin(h, p + "self_attn.q_proj").view(T, H, D)
        k = lin(h, p + "self_attn.k_proj").view(T, K, D)
        v = lin(h, p + "self_attn.v_proj").view(T, K, D)
        if fam == "qwen3":
            q, k = norm(q, sd[p + "self_attn.q_norm.weight"]), norm(k, sd[p + "self_attn.k_norm.weight"])
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(H // K, dim=1), v.repeat_interleave(H // K, dim=1)
        scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(D)
        scores = scores.masked_fill(~allowed, float("-inf"))
        out = torch.einsum("hts,shd->thd", scores.softmax(-1), v).reshape(T, H * D)
        x = x + lin(out, p + "self_attn.o_proj")
        h = norm(x, sd[p + "post_attention_layernorm.weight"])
        x = x + lin(
            torch.nn.functional.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj"
        )
    x = norm(x, sd["model.norm.weight"])
    head = sd["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else sd["lm_head.weight"]
    return x @ head.T


CASES = [
    ("llama", False, False, {}),
    ("llama", True, True, {"attention_bias": True, "mlp_bias": True}),
    ("mistral", False, True, {"sliding_window": 5}),
    ("qwen2", True, False, {}),
    ("qwen2", False, True, {}),
    ("qwen3", True, True, {}),
    ("qwen3", False, False, {"attention_bias": True}),
]


class TestFamilies(unittest.TestCase):
    def test_load_each_family_matches_reference(self):
        tokens = [3, 17, 42, 99, 5, 8, 64, 23, 11, 7, 1]
        for family, tied, sharded, over in CASES:
            with self.subTest(family=family, tied=tied, sharded=sharded, **over), tempfile.TemporaryDirectory() as d:
                make_checkpoint(d, family, tied, sharded, seed=7, std=0.1, **over)
                files = os.listdir(d)
                self.assertEqual(W.INDEX_NAME in files, sharded)
                if sharded:
                    self.assertGreater(len([f for f in files if f.endswith(".safetensors")]), 1)
                cfg = tiny_config(family, tied, **over)
                sd = dict(W.iter_checkpoint(d))
                self.assertEqual("lm_head.weight" in sd, not tied)
                model = Transformer.from_pretrained(d, torch.float32)
                t = torch.tensor([tokens])
                with torch.no_grad():
                    got = model.logits(model(t, ForwardContext.packed(torch.zeros_like(t), model.args.sliding_window)))[
                        0
                    ]
                want = reference_logits(cfg, sd, tokens)
                self.assertLess((got.double() - want).abs().max().item(), 1e-4)

    def test_bf16_checkpoint_loads(self):
        with tempfile.TemporaryDirectory() as d:
            make_checkpoint(d, "qwen2")
            sd = {k: v.to(torch.bfloat16) for k, v in W.iter_checkpoint(d)}
            W.save_file(sd, os.path.join(d, W.SINGLE_NAME))
            model = Transformer.from_pretrained(d, torch.float32)
            self.assertTrue(torch.equal(model.embed_tokens, sd["model.embed_tokens.weight"].float()))

    def test_missing_tensor_is_named(self):
        with tempfile.TemporaryDirectory() as d:
            make_checkpoint(d, "llama")
            sd = dict(W.iter_checkpoint(d))
            del sd["model.layers.1.mlp.up_proj.weight"]
            W.save_file(sd, os.path.join(d, W.SINGLE_NAME))
            with self.assertRaisesRegex(ValueError, "up_proj"):
                Transformer.from_pretrained(d, torch.float32)

    def test_unknown_family_refused(self):
        with self.assertRaisesRegex(ValueError, "model_type"):
            ModelArgs.from_hf_config(tiny_config("gpt2"))


class TestCacheAndPacking(unittest.TestCase):
    def test_cached_decode_equals_full_recompute(self):
        for family, over in (("qwen3", {}), ("mistral", {"sliding_window": 6}), ("llama", {})):
            with self.subTest(family=family), tempfile.TemporaryDirectory() as d:
                make_checkpoint(d, family, std=0.1, **over)
                model = Transformer.from_pretrained(d, torch.float32)
                g = torch.Generator().manual_seed(0)
                toks = torch.randint(0, 101, (1, 30), generator=g)
                w = model.args.sliding_window
                with torch.no_grad():
                    full = model.logits(model(toks, ForwardContext.packed(torch.zeros_like(toks), w)))[0]
                    cache = KVCache(model.args, torch.float32, torch.device("cpu"), slots=1, length=4)
                    cache.ensure(3, 40)  # grows; the sequence lives in slot 2
                    parts = []
                    for lo, hi in ((0, 9), (9, 13)):  # a chunked prefill
                        ctx = ForwardContext.cached(cache, 2, [lo], hi - lo, w)
                        parts.append(model.logits(model(toks[:, lo:hi], ctx))[0])
                    for t in range(13, 30):  # then one token at a time
                        ctx = ForwardContext.cached(cache, 2, [t], 1, w)
                        parts.append(model.logits(model(toks[:, t : t + 1], ctx))[0])
                    cached = torch.cat(parts)
                self.assertLess((cached - full).abs().max().item(), 1e-5)

    def test_batched_decode_rows_at_different_positions(self):
        with tempfile.TemporaryDirectory() as d:
            make_checkpoint(d, "qwen2", std=0.1)
            model = Transformer.from_pretrained(d, torch.float32)
            seqs = [[5, 9, 13, 2, 7], [8, 1, 4], [33, 44, 55, 66, 77, 88, 99]]
            with torch.no_grad():
                cache = KVCache(model.args, torch.float32, torch.device("cpu"), slots=3, length=16)
                for slot, s in enumerate(seqs):
                    model(torch.tensor([s[:-1]]), ForwardContext.cached(cache, slot, [0], len(s) - 1))
                ctx = ForwardContext.cached(cache, 0, [len(s) - 1 for s in seqs], 1)
                batched = model.logits(model(torch.tensor([[s[-1]] for s in seqs]), ctx))[:, 0]
                for b, s in enumerate(seqs):
                    t = torch.tensor([s])
                    alone = model.logits(model(t, ForwardContext.packed(torch.zeros_like(t))))[0, -1]
                    self.assertLess((batched[b] - alone).abs().max().item(), 1e-5)

    def test_packed_segments_equal_separate_rows(self):
        with tempfile.TemporaryDirectory() as d:
            make_checkpoint(d, "qwen3", std=0.1)
            model = Transformer.from_pretrained(d, torch.float32)
            a, b = [4, 8, 15, 16, 23], [42, 7, 9]
            packed = torch.tensor([a + b])
            seg = torch.tensor([[0] * len(a) + [1] * len(b)])
            ctx = ForwardContext.packed(seg)
            self.assertEqual(ctx.positions_BT[0].tolist(), [0, 1, 2, 3, 4, 0, 1, 2])
            with torch.no_grad():
                got = model.logits(model(packed, ctx))[0]
                for part, lo in ((a, 0), (b, len(a))):
                    t = torch.tensor([part])
                    alone = model.logits(model(t, ForwardContext.packed(torch.zeros_like(t))))[0]
                    self.assertLess((got[lo : lo + len(part)] - alone).abs().max().item(), 1e-5)


def reference_sdpa(q, k, v, attn_mask=None, enable_gqa=False):
    """torch >= 2's documented SDPA semantics (bool mask: True attends), for the path torch 1.13 cannot run."""
    if enable_gqa:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    assert k.shape[1] == q.shape[1], "kv heads must match query heads without enable_gqa"
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~attn_mask, float("-inf")).softmax(-1) @ v


class TestSdpaPath(unittest.TestCase):
    def test_sdpa_calls_match_the_manual_path(self):
        with tempfile.TemporaryDirectory() as d:
            make_checkpoint(d, "qwen3", std=0.1)
            model = Transformer.from_pretrained(d, torch.float32)
            toks = torch.tensor([[5, 9, 2, 7, 1, 3, 8, 4]])
            seg = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1]])

            def run():
                with torch.no_grad():
                    full = model.logits(model(toks, ForwardContext.packed(seg)))
                    cache = KVCache(model.args, torch.float32, torch.device("cpu"), slots=1, length=16)
                    model(toks[:, :5], ForwardContext.cached(cache, 0, [0], 5))
                    step = model.logits(model(toks[:, 5:6], ForwardContext.cached(cache, 0, [5], 1)))
                return full, step

            want = run()
            saved = (M.HAS_SDPA, M.SDPA_GQA, getattr(M.F, "scaled_dot_product_attention", None))
            try:
                M.F.scaled_dot_product_attention = reference_sdpa
                for gqa in (False, True):
                    M.HAS_SDPA, M.SDPA_GQA = True, gqa
                    got = run()
                    for g, w in zip(got, want, strict=True):
                        self.assertLess((g - w).abs().max().item(), 1e-5)
            finally:
                M.HAS_SDPA, M.SDPA_GQA = saved[0], saved[1]
                if saved[2] is None:
                    del M.F.scaled_dot_product_attention
                else:
                    M.F.scaled_dot_product_attention = saved[2]


class TestRope(unittest.TestCase):
    def test_llama3_scaling_by_hand(self):
        cfg = tiny_config(
            "llama",
            head_dim=16,
            rope_theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        )
        inv, divisor = rope_inv_freq(ModelArgs.from_hf_config(cfg))
        self.assertEqual(divisor, 1.0)
        base = 1.0 / (500000.0 ** (torch.arange(0, 16, 2).float() / 16))
        for i, f in enumerate(base.tolist()):
            wavelen = 2 * math.pi / f
            if wavelen < 64 / 4:  # high frequency: unchanged
                want = f
            elif wavelen > 64 / 1:  # low frequency: divided by the factor
                want = f / 8
            else:
                s = (64 / wavelen - 1) / (4 - 1)
                want = (1 - s) * f / 8 + s * f
            self.assertAlmostEqual(inv[i].item(), want, places=6)

    def test_unknown_scaling_refused(self):
        cfg = tiny_config("llama", rope_scaling={"rope_type": "yarn", "factor": 4.0})
        with self.assertRaisesRegex(ValueError, "yarn"):
            rope_inv_freq(ModelArgs.from_hf_config(cfg))


class TestWeights(unittest.TestCase):
    def test_round_trip_dtypes_and_atomic_write(self):
        g = torch.Generator().manual_seed(1)
        tensors = {
            "a": torch.randn(3, 4, generator=g),
            "b": torch.randn(5, generator=g).half(),
            "c": torch.randn(2, 3, generator=g).bfloat16(),
            "d": torch.zeros(0, 2),
        }
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.safetensors")
            W.save_file(tensors, path, {"k": "v"})
            self.assertEqual(os.listdir(d), ["x.safetensors"])  # no temp file left behind
            self.assertEqual(os.stat(path).st_mode & 0o777, 0o666 & ~W._umask())  # not mkstemp's 0600
            header, meta, start = W.read_header(path)
            self.assertEqual(start % 8, 0)
            self.assertEqual(meta, {"k": "v"})
            self.assertEqual(header["c"]["dtype"], "BF16")
            back = W.load_file(path)
            for k, t in tensors.items():
                self.assertEqual(back[k].dtype, t.dtype)
                self.assertTrue(torch.equal(back[k], t))

    def test_corrupt_file_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bad.safetensors")
            with open(path, "wb") as f:
                f.write(b"\xff" * 16)
            with self.assertRaises(ValueError):
                W.load_file(path)


if __name__ == "__main__":
    unittest.main()
