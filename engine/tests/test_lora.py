"""LoRA: exact no-op at init, PEFT layout and bit-exact round trip, batched mixed adapters, LRU residency."""

import json
import os
import tempfile
import unittest

import torch

from engine import lora as L
from engine import peft
from engine import weights as W
from engine.model import ForwardContext
from engine.peft import load_peft
from engine.tests.helpers import TempModel, lora, optimizer, parse_rows
from engine.train import train_step


def randomize(adapter: L.Adapter, seed: int, scale: float = 0.05) -> L.Adapter:
    """Give B non-zero values so the adapter changes the output."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in adapter.B:
            adapter.B[m].copy_(scale * torch.randn(adapter.B[m].shape, generator=g))
    return adapter


class TestLora(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tm = TempModel("qwen2", std=0.1)
        cls.model, cls.args = cls.tm.model, cls.tm.args

    @classmethod
    def tearDownClass(cls):
        cls.tm.dir.cleanup()

    def logits(self, tokens, lora):
        t = torch.tensor(tokens)
        with torch.no_grad():
            return self.model.logits(self.model(t, ForwardContext.packed(torch.zeros_like(t)), lora))

    def test_fresh_adapter_is_exact_noop(self):
        a = L.new_adapter("a", "b", self.args, lora(seed=3), "cpu")
        self.assertTrue(all(bool((t != 0).any()) for t in a.A.values()))
        self.assertTrue(all(bool((t == 0).all()) for t in a.B.values()))
        tokens = [[5, 6, 7, 8, 9, 10]]
        self.assertTrue(
            torch.equal(self.logits(tokens, None), self.logits(tokens, L.LoraBatch([a], torch.float32, "cpu")))
        )

    def test_scale_targets_and_seed(self):
        c = lora()
        self.assertEqual((c.rank, c.alpha, c.scale), (8, 16.0, 2.0))
        self.assertEqual(
            set(c.target_modules), {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
        )
        a1 = L.new_adapter("a", "b", self.args, lora(seed=5), "cpu")
        a2 = L.new_adapter("a", "b", self.args, lora(seed=5), "cpu")
        a3 = L.new_adapter("a", "b", self.args, lora(seed=6), "cpu")
        m = "model.layers.0.self_attn.q_proj"
        self.assertTrue(torch.equal(a1.A[m], a2.A[m]))
        self.assertFalse(torch.equal(a1.A[m], a3.A[m]))
        self.assertTrue(all(not p.requires_grad for p in self.model.parameters()))
        self.assertTrue(all(p.requires_grad for p in a1.parameters()))

    def test_peft_round_trip_bit_exact_with_optimizer(self):
        a = L.new_adapter(
            "a", "b", self.args, lora(rank=4, alpha=8, seed=1, target_modules=("q_proj", "v_proj", "down_proj")), "cpu"
        )
        rows = parse_rows([{"tokens": [1, 5, 9, 13, 17], "mask": [0, 1, 1, 1, 1]}], 101, 256, "sft")
        train_step(self.model, a, "sft", rows, None, optimizer("sft", learning_rate=1e-2))
        with tempfile.TemporaryDirectory() as d:
            files = L.save_peft(a, d, "/models/base")
            self.assertEqual(sorted(files), ["adapter_config.json", "adapter_model.safetensors", "optimizer.pt"])
            self.assertEqual(sorted(os.listdir(d)), sorted(files))
            with open(os.path.join(d, "adapter_config.json")) as f:
                cfg = json.load(f)
            self.assertEqual((cfg["peft_type"], cfg["r"], cfg["lora_alpha"]), ("LORA", 4, 8))
            self.assertEqual(cfg["target_modules"], ["down_proj", "q_proj", "v_proj"])
            self.assertEqual(cfg["base_model_name_or_path"], "/models/base")
            keys = set(W.load_file(os.path.join(d, "adapter_model.safetensors")))
            self.assertIn("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", keys)
            self.assertIn("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight", keys)
            self.assertEqual(len(keys), 2 * 3 * self.args.num_layers)
            b = load_peft("a2", "b", d, self.args, "cpu")
        for m in a.A:
            self.assertTrue(torch.equal(a.A[m], b.A[m]))
            self.assertTrue(torch.equal(a.B[m], b.B[m]))
        self.assertEqual(b.config.scale, a.config.scale)
        sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
        self.assertEqual(sorted(sa), sorted(sb))
        for i in sa:
            for k in ("exp_avg", "exp_avg_sq"):
                self.assertTrue(torch.equal(sa[i][k], sb[i][k]))
        # Both continue identically.
        for x in (a, b):
            train_step(self.model, x, "sft", rows, None, optimizer("sft", learning_rate=1e-2))
        for m in a.A:
            self.assertTrue(torch.equal(a.A[m], b.A[m]))

    def test_bad_adapter_files_are_refused(self):
        a = L.new_adapter("a", "b", self.args, lora(), "cpu")
        with tempfile.TemporaryDirectory() as d:
            L.save_peft(a, d, "x")
            self.assertEqual(peft.problems(d, self.args), [])
            other = TempModel("qwen2", hidden_size=32, intermediate_size=48)
            with self.assertRaisesRegex(ValueError, r"the base model and rank 8 need \[8,48\]"):
                load_peft("a", "b", d, other.args, "cpu")
            other.dir.cleanup()

    def test_every_problem_of_a_folder_is_named_by_file_and_field(self):
        """What the server's import shows (check_adapter): every problem at once, each where it is."""
        a = L.new_adapter("a", "b", self.args, lora(rank=4, target_modules=("q_proj", "v_proj")), "cpu")
        with tempfile.TemporaryDirectory() as d:
            L.save_peft(a, d, "x")
            config_path = os.path.join(d, L.CONFIG_NAME)
            with open(config_path) as f:
                good = json.load(f)

            def found(config: dict, tensors: dict | None = None) -> list[tuple]:
                with open(config_path, "w") as f:
                    json.dump(config, f)
                if tensors is not None:
                    W.save_file(tensors, os.path.join(d, L.WEIGHTS_NAME), {"format": "pt"})
                return sorted((tuple(p.loc), p.msg) for p in peft.problems(d, self.args))

            bad_config = {**good, "use_dora": True, "target_modules": ["q_proj", "lm_head"], "lora_alpha": "x"}
            self.assertEqual({loc[1] for loc, _ in found(bad_config)}, {"use_dora", "target_modules", "lora_alpha"})
            tensors = W.load_file(os.path.join(d, L.WEIGHTS_NAME))
            q_a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
            v_b = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"
            broken = {**tensors, q_a: torch.zeros(8, self.args.hidden_size)}
            del broken[v_b]
            self.assertEqual(
                found({**good, "target_modules": ["q_proj"]}, broken),
                sorted(
                    [
                        (
                            (L.WEIGHTS_NAME, q_a),
                            f"shape [8,{self.args.hidden_size}]; the base model and rank 4 need "
                            f"[4,{self.args.hidden_size}]",
                        ),
                        (
                            (L.WEIGHTS_NAME, "base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight"),
                            "module v_proj is not among target_modules",
                        ),
                        (
                            (L.WEIGHTS_NAME, "base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight"),
                            "module v_proj is not among target_modules",
                        ),
                        (
                            (L.WEIGHTS_NAME, "base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight"),
                            "module v_proj is not among target_modules",
                        ),
                        ((L.WEIGHTS_NAME,), "layer 1 v_proj has lora_A without its lora_B"),
                    ]
                ),
            )
            poisoned = dict(tensors)
            poisoned[q_a] = tensors[q_a].clone()
            poisoned[q_a].view(-1)[7] = float("nan")
            self.assertEqual(
                found(good, poisoned),
                [((L.WEIGHTS_NAME, q_a), "value NaN at index [0,7]: adapter values must be finite and within ±65504")],
            )
            with self.assertRaisesRegex(L.NonFinite, "value NaN at index"):
                load_peft("a", "b", d, self.args, "cpu")

    def test_mixed_batch_equals_each_row_alone(self):
        a1 = randomize(L.new_adapter("a1", "b", self.args, lora(seed=1), "cpu"), 1)
        a2 = randomize(
            L.new_adapter(
                "a2", "b", self.args, lora(rank=4, alpha=32, seed=2, target_modules=("q_proj", "up_proj")), "cpu"
            ),
            2,
        )
        rows = [[3, 4, 5, 6], [7, 8, 9, 10], [11, 12, 13, 14], [15, 16, 17, 18]]
        per_row = [a1, None, a2, a1]
        mixed = self.logits(rows, L.LoraBatch(per_row, torch.float32, "cpu"))
        for b, (row, ad) in enumerate(zip(rows, per_row, strict=True)):
            alone = self.logits([row], L.LoraBatch([ad], torch.float32, "cpu") if ad else None)[0]
            self.assertLess((mixed[b] - alone).abs().max().item(), 1e-5)
        self.assertGreater((self.logits([rows[0]], None)[0] - mixed[0]).abs().max().item(), 1e-3)

    def test_bf16_weights_take_the_adapter_delta_in_fp32_with_one_rounding(self):
        a = randomize(L.new_adapter("a", "b", self.args, lora(seed=4), "cpu"), 4)
        block = self.model.layers[0]
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2, 3, self.args.hidden_size, generator=g).bfloat16()
        y = torch.randn(2, 3, self.args.q_size + 2 * self.args.kv_size, generator=g).bfloat16()
        for grad in (False, True):
            with torch.set_grad_enabled(grad):
                out = block._lora(
                    L.LoraBatch([a], torch.bfloat16, "cpu"),
                    block.g_qkv,
                    (self.args.q_size, self.args.kv_size, self.args.kv_size),
                    x,
                    y,
                )
            deltas = [x.float() @ a.A[m].t() @ a.B[m].t() * a.config.scale for m in block.g_qkv]
            want = (y.float() + torch.cat(deltas, dim=-1)).bfloat16()
            self.assertEqual(out.dtype, torch.bfloat16)
            self.assertLessEqual(
                (out.float() - want.float()).abs().max().item(), 1e-2 * want.float().abs().max().item()
            )
            self.assertGreater((out == want).float().mean().item(), 0.99)  # the same single rounding, up to fp32 order
        out.float().sum().backward()
        self.assertEqual(a.B[block.g_qkv[0]].grad.dtype, torch.float32)  # the fp32 parameters get the gradient

    def test_stack_cache_is_shared_across_orders_and_bounded(self):
        a1 = randomize(L.new_adapter("a1", "b", self.args, lora(seed=1), "cpu"), 1)
        a2 = randomize(L.new_adapter("a2", "b", self.args, lora(seed=2), "cpu"), 2)
        cache = L.StackCache()
        first = self.logits([[3, 4], [5, 6]], L.LoraBatch([a1, a2], torch.float32, "cpu", cache))
        entries = len(cache._items)
        swapped = self.logits([[5, 6], [3, 4]], L.LoraBatch([a2, a1], torch.float32, "cpu", cache))
        self.assertEqual(len(cache._items), entries)  # the same stacks serve both orders
        self.assertTrue(torch.allclose(first, swapped.flip(0), atol=1e-6))
        alone = self.logits([[3, 4]], L.LoraBatch([a1], torch.float32, "cpu", cache))
        self.assertEqual(len(cache._items), entries)  # stacks are per adapter: a1 alone reuses its own
        self.assertTrue(torch.allclose(first[:1], alone, atol=1e-6))
        small = L.StackCache(max_bytes=1)
        again = self.logits([[3, 4], [5, 6]], L.LoraBatch([a1, a2], torch.float32, "cpu", small))
        self.assertEqual(len(small._items), 1)  # over budget: only the latest stack stays
        self.assertTrue(torch.allclose(first, again, atol=1e-6))
        cache.forget(a1)
        self.assertEqual(len(cache._items), entries // 2)
        cache.forget(a2)
        self.assertEqual((len(cache._items), cache.bytes), (0, 0))

    def test_lru_bound_respects_pins(self):
        store = L.AdapterStore(max_adapters=2)
        ads = [
            L.new_adapter(f"k{i}", "b", self.args, lora(rank=1, target_modules=("q_proj",)), "cpu") for i in range(4)
        ]
        store.put(ads[0])
        store.put(ads[1])
        store.get("k0")  # k1 is now least recently used
        evicted = store.put(ads[2])
        self.assertEqual([a.key for a in evicted], ["k1"])
        ads[0].pins = ads[2].pins = 1
        self.assertEqual(store.put(ads[3]), [])  # everything else pinned: over the bound for now
        self.assertEqual(len(store.keys()), 3)
        ads[0].pins = 0
        self.assertEqual([a.key for a in store.put(ads[1])], ["k0", "k3"])


if __name__ == "__main__":
    unittest.main()
