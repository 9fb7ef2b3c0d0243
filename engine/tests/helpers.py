"""Test fixtures: tiny random HF checkpoints written to temp folders, and an engine subprocess client."""

from __future__ import annotations

import json
import os
import queue
import struct
import subprocess
import sys
import tempfile
import threading
from typing import Optional

import torch

from engine.model import ModelArgs, Transformer, init_hf_weights, write_hf_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tiny_config(family: str = "qwen2", tied: bool = False, **over) -> dict:
    cfg = {
        "model_type": family, "vocab_size": 101, "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 256,
        "tie_word_embeddings": tied, "eos_token_id": 2, "bos_token_id": 1,
    }
    if family == "qwen3":
        cfg["head_dim"] = 24  # Qwen3 decouples head_dim from hidden/heads
    cfg.update(over)
    return cfg


def make_checkpoint(folder: str, family: str = "qwen2", tied: bool = False, sharded: bool = False,
                    seed: int = 0, std: float = 0.02, **over) -> str:
    cfg = tiny_config(family, tied, **over)
    args = ModelArgs.from_hf_config(cfg)
    tensors = init_hf_weights(args, seed, std)
    write_hf_checkpoint(folder, cfg, tensors, max_shard_bytes=60_000 if sharded else None)
    return folder


class TempModel:
    """A tiny checkpoint in a temp dir, loaded once per test class."""

    def __init__(self, family: str = "qwen2", tied: bool = False, std: float = 0.02, **over):
        self.dir = tempfile.TemporaryDirectory()
        self.path = make_checkpoint(self.dir.name, family, tied, std=std, **over)
        self.model = Transformer.from_pretrained(self.path, torch.float32, "cpu")
        self.args = self.model.args


class EngineProcess:
    """`python3 -m engine` as a subprocess, with frames read on a background thread."""

    def __init__(self, *extra: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "engine", *extra], cwd=REPO, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.frames: "queue.Queue" = queue.Queue()
        self.stderr_lines = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        self.ready = self.next(timeout=60)

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            head = out.read(4)
            if len(head) < 4:
                self.frames.put(None)
                return
            (n,) = struct.unpack(">I", head)
            self.frames.put(json.loads(out.read(n).decode("utf-8")))

    def _drain_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr_lines.append(line.decode("utf-8", "replace"))

    def send_raw(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, obj: dict) -> None:
        raw = json.dumps(obj).encode("utf-8")
        self.send_raw(struct.pack(">I", len(raw)) + raw)

    def next(self, timeout: float = 30) -> Optional[dict]:
        return self.frames.get(timeout=timeout)

    def until_done(self, rid, timeout: float = 60) -> list:
        """Frames of request rid up to and including its done frame (other ids are kept for later)."""
        got, others = [], []
        while True:
            f = self.next(timeout)
            if f is None:
                raise RuntimeError("engine exited:\n" + "".join(self.stderr_lines))
            if f.get("id") == rid:
                got.append(f)
                if f.get("done"):
                    break
            else:
                others.append(f)
        for f in others:
            self.frames.put(f)
        return got

    def call(self, obj: dict, timeout: float = 60) -> dict:
        self.send(obj)
        return self.until_done(obj["id"], timeout)[-1]

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        while self.frames.get(timeout=10) is not None:  # until the reader thread has seen EOF
            pass
        self.proc.stdout.close()
        self.proc.stderr.close()
