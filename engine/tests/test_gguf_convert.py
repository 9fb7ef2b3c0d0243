"""GGUF -> HF conversion on small GGUFs written here with the gguf writer, in llama.cpp's layout.

A random Llama checkpoint goes out as GGUF (q/k rows permuted the way llama.cpp's
converter does) and must come back tensor for tensor, with the engine computing
the same logits from both folders. Truncated files and unsupported quantisations
or architectures must fail naming the file and the reason, leaving no folder.
"""

from __future__ import annotations

import json
import os
import tempfile
import unittest

import gguf
import numpy as np
import torch

from engine import gguf_convert as G
from engine import weights as W
from engine.model import ForwardContext, Transformer
from engine.tests.helpers import make_checkpoint

# Byte-level tokens for the printable ASCII bytes, one merge, and two control tokens.
TOKENS = ["<|endoftext|>", "<|im_start|>"] + [chr(b) for b in range(0x21, 0x7F)] + ["he"]
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['content'] }}{% endfor %}"
GGUF_NAMES = {v: k for k, v in G._LAYER_NAMES.items()}


def llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """What llama.cpp's HF -> GGUF converter does to q/k rows (the inverse of unpermute_rotary)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(hf: str) -> str:
    if hf.startswith("model.layers."):
        _, _, layer, module = hf.split(".", 3)
        module, suffix = module.rsplit(".", 1)
        return f"blk.{layer}.{GGUF_NAMES[module]}.{suffix}"
    top = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    return top[hf]


def write_gguf(path: str, folder: str, arch: str = "llama", raw: dict = None) -> None:
    """The HF checkpoint in `folder` as a GGUF; `raw` replaces named tensors by (bytes [rows, row bytes], type)."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(TOKENS + [f"x{i}" for i in range(cfg["vocab_size"] - len(TOKENS))])
    w.add_token_types([3, 3] + [1] * (cfg["vocab_size"] - 2))
    w.add_token_merges(["h e"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(0)
    w.add_chat_template(TEMPLATE)
    for name, t in W.iter_checkpoint(folder):
        array = t.numpy()
        if ".q_proj." in name:
            array = llama_cpp_permute(array, cfg["num_attention_heads"])
        elif ".k_proj." in name:
            array = llama_cpp_permute(array, cfg["num_key_value_heads"])
        if raw and gguf_name(name) in raw:
            data, kind = raw[gguf_name(name)]
            w.add_tensor(gguf_name(name), data, raw_dtype=kind)
        else:
            w.add_tensor(gguf_name(name), np.ascontiguousarray(array, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


class GgufConvertTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        # vocab past the 97 tokens above; hidden/heads give head_dim 16 so the permutation has pairs to swap.
        self.hf = make_checkpoint(
            os.path.join(self.dir, "hf"),
            family="llama",
            tied=False,
            vocab_size=128,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
        self.gguf = os.path.join(self.dir, "model.gguf")
        self.out = os.path.join(self.dir, "models", "converted")

    def tearDown(self):
        self.tmp.cleanup()

    def assert_fails(self, path: str, *reason: str):
        with self.assertRaises(G.ConversionError) as caught:
            G.convert(path, self.out)
        message = str(caught.exception)
        self.assertIn(path, message)
        for part in reason:
            self.assertIn(part, message)
        self.assertFalse(os.path.exists(self.out))
        self.assertEqual(os.listdir(os.path.dirname(self.out)) if os.path.exists(os.path.dirname(self.out)) else [], [])
        return message

    def test_round_trip_gives_back_the_checkpoint_and_its_logits(self):
        write_gguf(self.gguf, self.hf)
        self.assertTrue(G.convert(self.gguf, self.out))
        original, converted = dict(W.iter_checkpoint(self.hf)), dict(W.iter_checkpoint(self.out))
        self.assertEqual(sorted(original), sorted(converted))
        for name, t in original.items():
            self.assertTrue(torch.equal(t, converted[name]), name)
        tokens = torch.tensor([[5, 17, 3, 99, 42, 8, 64, 1]])
        ctx = ForwardContext.packed(torch.zeros_like(tokens))
        logits = [
            m.logits(m(tokens, ctx))
            for m in (Transformer.from_pretrained(f, torch.float32) for f in (self.hf, self.out))
        ]
        self.assertTrue(torch.equal(logits[0], logits[1]))
        with open(os.path.join(self.out, "tokenizer_config.json")) as f:
            tok_config = json.load(f)
        self.assertEqual(
            (tok_config["chat_template"], tok_config["bos_token"], tok_config["eos_token"]),
            (TEMPLATE, "<|im_start|>", "<|endoftext|>"),
        )
        with open(os.path.join(self.out, "tokenizer.json")) as f:
            tokenizer = json.load(f)
        self.assertEqual(
            [(t["id"], t["content"], t["special"]) for t in tokenizer["added_tokens"]],
            [(0, "<|endoftext|>", True), (1, "<|im_start|>", True)],
        )
        self.assertEqual(tokenizer["model"]["merges"], ["h e"])

    def test_a_second_conversion_is_skipped_until_the_gguf_changes(self):
        write_gguf(self.gguf, self.hf)
        self.assertTrue(G.convert(self.gguf, self.out, if_stale=True))
        self.assertFalse(G.convert(self.gguf, self.out, if_stale=True))
        with open(self.gguf, "ab") as f:
            f.write(b"\0" * 32)  # still a valid file: tensor data is addressed from the header
        self.assertTrue(G.convert(self.gguf, self.out, if_stale=True))

    def test_q8_0_tensors_are_dequantized(self):
        embed = dict(W.iter_checkpoint(self.hf))["model.embed_tokens.weight"].numpy()
        quantized = gguf.quants.quantize(embed, gguf.GGMLQuantizationType.Q8_0)
        write_gguf(self.gguf, self.hf, raw={"token_embd.weight": (quantized, gguf.GGMLQuantizationType.Q8_0)})
        G.convert(self.gguf, self.out)
        back = dict(W.iter_checkpoint(self.out))["model.embed_tokens.weight"].numpy()
        # Q8_0 keeps one scale per 32 values: errors are at most half a step of each block's scale.
        self.assertLess(np.abs(back - embed).max(), np.abs(embed).max() / 127)
        self.assertGreater(np.abs(back - embed).max(), 0)

    def test_a_truncated_file_fails_and_leaves_no_folder_or_staging(self):
        write_gguf(self.gguf, self.hf)
        with open(self.gguf, "rb") as f:
            data = f.read()
        for size in (len(data) // 2, 200):
            with open(self.gguf, "wb") as f:
                f.write(data[:size])
            self.assert_fails(self.gguf, "truncated")

    def test_a_failed_conversion_keeps_the_complete_folder_already_there(self):
        write_gguf(self.gguf, self.hf)
        G.convert(self.gguf, self.out)
        with open(self.gguf, "r+b") as f:
            f.truncate(os.path.getsize(self.gguf) // 2)
        with self.assertRaises(G.ConversionError):
            G.convert(self.gguf, self.out)
        self.assertEqual(sorted(os.listdir(os.path.dirname(self.out))), ["converted"])
        self.assertIsNotNone(G.recorded_key(self.out))

    def test_an_unsupported_quantisation_fails_naming_the_tensor_and_type(self):
        kind = gguf.GGMLQuantizationType.IQ2_XXS
        _, size = gguf.GGML_QUANT_SIZES[kind]
        # The type is refused before any shape is looked at, so one block per row will do.
        raw = np.zeros((96, size), dtype=np.uint8)
        write_gguf(self.gguf, self.hf, raw={"blk.0.ffn_up.weight": (raw, kind)})
        self.assert_fails(self.gguf, "blk.0.ffn_up.weight", "IQ2_XXS", "not supported")

    def test_an_unsupported_architecture_fails(self):
        write_gguf(self.gguf, self.hf, arch="mamba")
        self.assert_fails(self.gguf, "architecture 'mamba' is not supported")

    def test_not_a_gguf_and_the_command_line_exit_code(self):
        with open(self.gguf, "wb") as f:
            f.write(b"PK\x03\x04 a zip, not a gguf")
        self.assert_fails(self.gguf, "not a GGUF file")
        self.assertEqual(G.main([self.gguf, self.out]), 1)
        self.assertFalse(os.path.exists(self.out))


if __name__ == "__main__":
    unittest.main()
