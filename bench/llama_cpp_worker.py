"""The llama.cpp column of bench/torch_stack.py: writes an HF folder as an f32 GGUF, and times llama.cpp on it.

    .venv-bench/bin/python bench/llama_cpp_worker.py write-gguf --model FOLDER --out FILE.gguf
    .venv-bench/bin/python bench/llama_cpp_worker.py bench --gguf FILE.gguf --threads 2 [--quick]

Runs in .venv-bench (numpy, gguf, llama-cpp-python; no torch), so safetensors are read here by hand (F32, F16, BF16).
The GGUF carries the same weights in f32 with q/k rows permuted into llama.cpp's interleaved rotary layout, and a
placeholder SentencePiece vocabulary of the model's size: the benchmark feeds token ids, never text. Timing uses
llama.cpp's C API through llama-cpp-python's ctypes bindings: a llama_batch per step, 32 streams as 32 sequences of
one context decoded together, greedy argmax over the returned logits in numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys

import numpy as np
from bench_common import Clock, best

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}


def read_safetensors(path: str):
    """(name, float32 array) for every tensor of one file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        for name, e in header.items():
            if name == "__metadata__":
                continue
            lo, hi = e["data_offsets"]
            f.seek(base + lo)
            raw = np.frombuffer(f.read(hi - lo), dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
            # bf16 is the top half of an f32.
            yield (
                name,
                (raw.astype(np.uint32) << 16).view(np.float32) if e["dtype"] == "BF16" else raw.astype(np.float32),
            )


def checkpoint_tensors(folder: str):
    index = os.path.join(folder, "model.safetensors.index.json")
    files = ["model.safetensors"]
    if os.path.exists(index):
        with open(index) as handle:
            files = sorted(set(json.load(handle)["weight_map"].values()))
    for file in files:
        yield from read_safetensors(os.path.join(folder, file))


def rotary_interleaved(w: np.ndarray, heads: int) -> np.ndarray:
    """HF rotates dimension i with i + D/2; llama.cpp's llama graph rotates 2i with 2i+1: reorder each head's rows."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def gguf_name(name: str, cfg: dict):
    if name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if name == "model.norm.weight":
        return "output_norm.weight"
    if name == "lm_head.weight":
        return None if cfg.get("tie_word_embeddings") else "output.weight"
    parts = name.split(".")  # model.layers.N.<module>.weight
    return f"blk.{parts[2]}.{GGUF_NAMES['.'.join(parts[3:-1])]}.weight"


def write_gguf(folder: str, out: str) -> None:
    import gguf

    if os.path.exists(out) and os.path.getmtime(out) >= max(
        os.path.getmtime(os.path.join(folder, f)) for f in os.listdir(folder)
    ):
        return
    with open(os.path.join(folder, "config.json")) as handle:
        cfg = json.load(handle)
    if cfg.get("model_type") != "llama":
        sys.exit(f"{folder}: llama.cpp column supports model_type llama only, not {cfg.get('model_type')!r}")
    H, K, V = (
        cfg["num_attention_heads"],
        cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
        cfg["vocab_size"],
    )
    tmp = out + ".tmp"
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_context_length(cfg.get("max_position_embeddings", 2048))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(H)
    w.add_head_count_kv(K)
    w.add_rope_dimension_count(cfg.get("head_dim") or cfg["hidden_size"] // H)
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-6))
    w.add_vocab_size(V)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    # Placeholder SentencePiece vocabulary: unk, bos, eos, the 256 byte tokens llama.cpp looks up, then fillers.
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"tok{i}" for i in range(len(tokens), V)]
    w.add_token_list(tokens[:V])
    w.add_token_scores([0.0] * V)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (V - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    for name, t in checkpoint_tensors(folder):
        target = gguf_name(name, cfg)
        if target is None:
            continue
        if name.endswith("q_proj.weight"):
            t = rotary_interleaved(t, H)
        elif name.endswith("k_proj.weight"):
            t = rotary_interleaved(t, K)
        w.add_tensor(target, np.ascontiguousarray(t, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out)


def prompt(i: int, length: int, vocab: int) -> list:
    return [(i * 131 + j * 17) % (vocab - 3) + 3 for j in range(length)]


class Runner:
    """One llama.cpp context over the model, fed token ids through a reusable llama_batch."""

    def __init__(self, lib, model, threads: int, seqs: int, n_ctx: int, n_batch: int):
        self.lib = lib
        p = lib.llama_context_default_params()
        p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = n_ctx, n_batch, n_batch, seqs
        p.n_threads = p.n_threads_batch = threads
        self.ctx = lib.llama_init_from_model(model, p)
        self.vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
        self.batch = lib.llama_batch_init(n_batch, 0, seqs)

    def decode(self, entries) -> np.ndarray:
        """entries: (token, position, sequence, wants logits); returns the logits rows asked for."""
        b = self.batch
        for i, (tok, pos, seq, out) in enumerate(entries):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, pos, 1, out
            b.seq_id[i][0] = seq
        b.n_tokens = len(entries)
        if self.lib.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")
        rows = sum(1 for e in entries if e[3])
        return np.ctypeslib.as_array(self.lib.llama_get_logits(self.ctx), shape=(rows * self.vocab,)).reshape(rows, -1)

    def clear(self) -> None:
        self.lib.llama_memory_clear(self.lib.llama_get_memory(self.ctx), True)

    def close(self) -> None:
        self.lib.llama_batch_free(self.batch)
        self.lib.llama_free(self.ctx)


def decode_rate(r: Runner, streams: int, new_tokens: int) -> tuple:
    """Greedy tokens/s of `streams` sequences decoded together, timed after their prefill."""
    r.clear()
    last = []
    for s in range(streams):
        p = prompt(s, 32, r.vocab)
        logits = r.decode([(t, j, s, j == len(p) - 1) for j, t in enumerate(p)])
        last.append(int(logits[0].argmax()))
    clock = Clock()
    for step in range(new_tokens):
        logits = r.decode([(last[s], 32 + step, s, True) for s in range(streams)])
        last = [int(i) for i in logits.argmax(axis=1)]
    return clock.rates(streams * new_tokens)


def prefill_rate(r: Runner, length: int) -> tuple:
    r.clear()
    p = prompt(0, length, r.vocab)
    clock = Clock()
    logits = r.decode([(t, j, 0, j == length - 1) for j, t in enumerate(p)])
    int(logits[0].argmax())
    return clock.rates(length)


def bench(gguf_path: str, threads: int, quick: bool, probe: str) -> dict:
    import llama_cpp as lib

    lib.llama_backend_init()
    quiet = lib.llama_log_callback(lambda level, text, data: None)  # kept referenced while llama.cpp may call it
    lib.llama_log_set(quiet, None)
    model = lib.llama_model_load_from_file(gguf_path.encode(), lib.llama_model_default_params())
    reps, new_tokens = (1, 16) if quick else (3, 48)
    out = {"llama_cpp_python": lib.__version__, "threads": threads}
    one = Runner(lib, model, threads, 1, 1024, 512)
    if probe:  # last-position logits of a fixed prompt, to check these are the engine's weights
        p = prompt(0, 32, one.vocab)
        one.decode([(t, j, 0, j == 31) for j, t in enumerate(p)])[0].astype(np.float32).tofile(probe)
    figures = {
        "decode_1": best(decode_rate(one, 1, new_tokens) for _ in range(reps)),
        "prefill": best(prefill_rate(one, 512) for _ in range(reps)),
    }
    one.close()
    many = Runner(lib, model, threads, 32, 32 * 128, 1024)
    figures["decode_32"] = best(decode_rate(many, 32, new_tokens) for _ in range(reps))
    many.close()
    for key, (wall, cpu) in figures.items():
        out[key], out[key + "_cpu"] = wall, cpu
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["write-gguf", "bench"])
    ap.add_argument("--model")
    ap.add_argument("--out")
    ap.add_argument("--gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--probe", default="", help="write the last-position logits of a fixed prompt here (f32)")
    a = ap.parse_args()
    if a.command == "write-gguf":
        write_gguf(a.model, a.out)
    else:
        print(json.dumps(bench(a.gguf, a.threads, a.quick, a.probe)))


if __name__ == "__main__":
    main()
