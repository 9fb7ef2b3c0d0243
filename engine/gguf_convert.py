"""A llama.cpp GGUF file -> an HF-format model folder the engine and the chat layer load.

Owns: reading a GGUF with the `gguf` package, dequantizing its tensors to fp32,
undoing llama.cpp's rotary row permutation of q/k, the GGUF -> HF tensor names,
`config.json` / `generation_config.json` in HF Llama shape, and rebuilding the
byte-level BPE tokenizer (`tokenizer.json`, `tokenizer_config.json` with the
chat template) from the `tokenizer.*` metadata. Also the conversion's key: a
folder is redone only when the GGUF or this file changed.

A conversion is written into a staging folder beside the destination and
renamed into place, so a reader never sees half a model; a bad file (truncated,
an unsupported quantisation, architecture or tokenizer) fails with a message
naming the file and the reason, and leaves nothing behind.

    python -m engine.gguf_convert [--if-stale] MODEL.gguf OUT_DIR

Refuses to know: which models the server offers (that is configuration).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys

import numpy as np
import torch

from . import weights as W

ARCHITECTURES = ("llama",)
# Plain floats plus the legacy and k-quant block formats `gguf.quants` dequantizes.
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
# llama.cpp's `tokenizer.ggml.pre` names -> HF pre-tokenizers splitting text the same way.
_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
PRE_TOKENIZERS = {
    "gpt-2": _BYTE_LEVEL,
    # SmolLM: every numeric character alone, then GPT-2's split. A regex rather than HF's `Digits`, which
    # tokenizers.js reads as ASCII digits only while Rust takes every numeric character (like "²").
    "smollm": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Isolated", "invert": False},
            _BYTE_LEVEL,
        ],
    },
}
TOKEN_CONTROL, TOKEN_USER_DEFINED = 3, 4
RECORD = "conversion.json"
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


class ConversionError(Exception):
    """A GGUF this converter cannot turn into a model; the message names the file and why."""


def conversion_key(gguf_path: str) -> str:
    """sha256 of the GGUF's bytes and of this converter's source."""
    h = hashlib.sha256()
    for path in (gguf_path, os.path.abspath(__file__)):
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def open_gguf(path: str):
    try:
        import gguf
    except ImportError:
        raise ConversionError(
            f"{path}: this python ({sys.executable}) lacks the gguf package (scripts/python/engine.txt pins it)"
        ) from None

    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ConversionError(f"{path}: cannot read ({e.strerror})") from None
    if magic != b"GGUF":
        raise ConversionError(f"{path}: not a GGUF file (it does not start with the GGUF magic)")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:  # the reader reports a short file as a failed reshape or index
        raise ConversionError(f"{path}: truncated or corrupt GGUF file ({type(e).__name__}: {e})") from None
    size = os.path.getsize(path)
    for t in reader.tensors:
        if t.data_offset + t.n_bytes > size:
            raise ConversionError(f"{path}: truncated GGUF file (tensor {t.name} ends past the file's {size} bytes)")
    return reader


def field(reader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def required(reader, path: str, key: str):
    value = field(reader, key)
    if value is None:
        raise ConversionError(f"{path}: metadata {key} is missing")
    return value


def read_config(reader, path: str) -> dict:
    """The HF Llama config.json this GGUF describes; refuses architectures we do not convert."""
    arch = field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise ConversionError(f"{path}: architecture {arch!r} is not supported (supported: {', '.join(ARCHITECTURES)})")
    if field(reader, f"{arch}.rope.scaling.type") not in (None, "none"):
        raise ConversionError(f"{path}: rope scaling {field(reader, f'{arch}.rope.scaling.type')!r} is not supported")
    tokens = required(reader, path, "tokenizer.ggml.tokens")
    heads = int(required(reader, path, f"{arch}.attention.head_count"))
    hidden = int(required(reader, path, f"{arch}.embedding_length"))
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(required(reader, path, f"{arch}.feed_forward_length")),
        "num_hidden_layers": int(required(reader, path, f"{arch}.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(field(reader, f"{arch}.attention.head_count_kv", heads)),
        "head_dim": int(field(reader, f"{arch}.rope.dimension_count", hidden // heads)),
        # Stored as float32: 1e-5 reads back as 9.99999974e-06, so round to what it was written from.
        "rms_norm_eps": float(
            np.format_float_positional(np.float32(required(reader, path, f"{arch}.attention.layer_norm_rms_epsilon")))
        ),
        "rope_theta": float(field(reader, f"{arch}.rope.freq_base", 10000.0)),
        "rope_scaling": None,
        "max_position_embeddings": int(field(reader, f"{arch}.context_length", 2048)),
        "vocab_size": int(field(reader, f"{arch}.vocab_size", len(tokens))),
        "hidden_act": "silu",
        "attention_bias": any(t.name.endswith(".attn_q.bias") for t in reader.tensors),
        "attention_dropout": 0.0,
        "mlp_bias": False,
        # llama.cpp leaves out `output.weight` exactly when the head is the embedding.
        "tie_word_embeddings": all(t.name != "output.weight" for t in reader.tensors),
        "bos_token_id": field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": field(reader, "tokenizer.ggml.eos_token_id"),
        "pad_token_id": field(reader, "tokenizer.ggml.padding_token_id"),
        "torch_dtype": "float32",
        "use_cache": True,
    }


def hf_name(gguf_name: str, path: str) -> str:
    parts = gguf_name.split(".")
    if parts[0] == "blk" and len(parts) == 4 and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{parts[3]}"
    if len(parts) == 2 and parts[0] in _TOP_NAMES:
        return f"{_TOP_NAMES[parts[0]]}.{parts[1]}"
    raise ConversionError(f"{path}: tensor {gguf_name} has no counterpart in an HF Llama model")


def unpermute_rotary(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's reordering of each head's q/k rows.

    HF Llama rotates the first half of a head's dimensions against the second
    half; llama.cpp rotates adjacent pairs, so its converter interleaves the two
    halves (row 2i <- i, row 2i+1 <- half + i). Reading the rows as [head, i, pair]
    and swapping the last two axes restores [head, half, i].
    """
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def read_tensors(reader, path: str, config: dict) -> dict[str, torch.Tensor]:
    """Every tensor dequantized to fp32 under its HF name, q/k rows back in HF order."""
    from gguf.quants import dequantize

    out: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        kind = t.tensor_type.name
        if kind not in SUPPORTED_TYPES:
            raise ConversionError(
                f"{path}: tensor {t.name} is quantized as {kind}, which is not supported "
                f"(supported: {', '.join(SUPPORTED_TYPES)})"
            )
        name = hf_name(t.name, path)
        # GGUF lists dimensions fastest-first; HF shapes are the reverse.
        # astype copies: the reader's arrays are read-only views of the file.
        w = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(tuple(reversed(t.shape.tolist())))
        if ".attn_q." in t.name:
            w = unpermute_rotary(w, config["num_attention_heads"])
        elif ".attn_k." in t.name:
            w = unpermute_rotary(w, config["num_key_value_heads"])
        out[name] = torch.from_numpy(np.ascontiguousarray(w))
    return out


def byte_level_alphabet() -> set:
    """The 256 printable characters GPT-2's byte-level BPE spells bytes with."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    return {chr(b) for b in printable} | {chr(256 + i) for i in range(256 - len(printable))}


def read_tokenizer(reader, path: str) -> tuple[dict, list[dict]]:
    """tokenizer.json for the GGUF's byte-level BPE, and its added tokens."""
    model, pre = field(reader, "tokenizer.ggml.model"), field(reader, "tokenizer.ggml.pre", "gpt-2")
    if model != "gpt2":
        raise ConversionError(f"{path}: tokenizer model {model!r} is not supported (supported: gpt2, byte-level BPE)")
    if pre not in PRE_TOKENIZERS:
        raise ConversionError(
            f"{path}: pre-tokenizer {pre!r} is not supported (supported: {', '.join(PRE_TOKENIZERS)})"
        )
    tokens = list(required(reader, path, "tokenizer.ggml.tokens"))
    types = list(field(reader, "tokenizer.ggml.token_type", [1] * len(tokens)))
    merges = list(required(reader, path, "tokenizer.ggml.merges"))
    alphabet = byte_level_alphabet()
    added = [
        {
            "id": i,
            "content": tok,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": kind == TOKEN_CONTROL,
        }
        for i, (tok, kind) in enumerate(zip(tokens, types))
        if kind in (TOKEN_CONTROL, TOKEN_USER_DEFINED)
    ]
    for i, tok in enumerate(tokens):
        if types[i] not in (TOKEN_CONTROL, TOKEN_USER_DEFINED) and not set(tok) <= alphabet:
            raise ConversionError(f"{path}: token {i} ({tok!r}) is not spelled in the byte-level alphabet")
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": PRE_TOKENIZERS[pre],
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {tok: i for i, tok in enumerate(tokens)},
            "merges": merges,
        },
    }
    return tokenizer, added


def tokenizer_config(reader, path: str, added: list[dict], config: dict) -> dict:
    tokens = field(reader, "tokenizer.ggml.tokens")

    def token(key: str):
        index = field(reader, f"tokenizer.ggml.{key}")
        return None if index is None else tokens[index]

    return {
        "tokenizer_class": "GPT2Tokenizer",
        "add_bos_token": bool(field(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(field(reader, "tokenizer.ggml.add_eos_token", False)),
        "add_prefix_space": False,
        "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added},
        "additional_special_tokens": [t["content"] for t in added if t["special"]],
        "bos_token": token("bos_token_id"),
        "eos_token": token("eos_token_id"),
        "pad_token": token("padding_token_id"),
        "unk_token": token("unknown_token_id"),
        "chat_template": required(reader, path, "tokenizer.chat_template"),
        "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"],
    }


def write_folder(gguf_path: str, folder: str, key: str) -> dict:
    """Converts into `folder` (made here); the record is written last, so its presence means complete."""
    reader = open_gguf(gguf_path)
    config = read_config(reader, gguf_path)
    tokenizer, added = read_tokenizer(reader, gguf_path)
    tok_config = tokenizer_config(reader, gguf_path, added, config)
    tensors = read_tensors(reader, gguf_path, config)
    os.makedirs(folder)
    W.save_checkpoint(tensors, folder)
    W.atomic_write_json(os.path.join(folder, "config.json"), config)
    W.atomic_write_json(
        os.path.join(folder, "generation_config.json"),
        {
            "bos_token_id": config["bos_token_id"],
            "eos_token_id": config["eos_token_id"],
            "pad_token_id": config["pad_token_id"],
        },
    )
    W.atomic_write_json(os.path.join(folder, "tokenizer.json"), tokenizer)
    W.atomic_write_json(os.path.join(folder, "tokenizer_config.json"), tok_config)
    kinds: dict[str, int] = {}
    for t in reader.tensors:
        kinds[t.tensor_type.name] = kinds.get(t.tensor_type.name, 0) + 1
    record = {
        "key": key,
        "source": os.path.basename(gguf_path),
        "name": field(reader, "general.name"),
        "license": field(reader, "general.license"),
        "tensor_types": kinds,
        "num_parameters": sum(t.numel() for t in tensors.values()),
    }
    W.atomic_write_json(os.path.join(folder, RECORD), record)
    return record


def recorded_key(folder: str):
    try:
        with open(os.path.join(folder, RECORD), encoding="utf-8") as f:
            return json.load(f).get("key")
    except (OSError, ValueError):
        return None


def convert(gguf_path: str, out_dir: str, if_stale: bool = False) -> bool:
    """Puts the conversion of `gguf_path` at `out_dir`; False when an up-to-date one was already there."""
    out_dir = os.path.abspath(out_dir)
    if not os.path.isfile(gguf_path):
        raise ConversionError(f"{gguf_path}: no such file")
    key = conversion_key(gguf_path)
    if if_stale and recorded_key(out_dir) == key:
        return False
    staging = f"{out_dir}.staging-{os.getpid()}"
    retired = f"{out_dir}.staging-{os.getpid()}-old"
    try:
        write_folder(gguf_path, staging, key)
        # A folder cannot be renamed over a non-empty one: move the old aside first.
        if os.path.exists(out_dir):
            os.rename(out_dir, retired)
        os.rename(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(retired, ignore_errors=True)
    return True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.gguf_convert", description="GGUF -> HF model folder")
    parser.add_argument("gguf")
    parser.add_argument("out_dir")
    parser.add_argument("--if-stale", action="store_true", help="skip when out_dir holds this GGUF's conversion")
    args = parser.parse_args(argv)
    try:
        built = convert(args.gguf, args.out_dir, if_stale=args.if_stale)
    except ConversionError as e:
        print(f"gguf_convert: {e}", file=sys.stderr)
        return 1
    print(f"{args.out_dir}: {'converted from ' + args.gguf if built else 'up to date'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
