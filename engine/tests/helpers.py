"""Test fixtures: tiny random HF checkpoints written to temp folders, an engine subprocess client, and
complete wire requests (the engine has no defaults, so tests spell out what the server would send)."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import queue
import struct
import subprocess
import sys
import tempfile
import threading

import torch

from engine import schema, wire
from engine.lora import SUPPORTED_TARGETS, LoraConfig
from engine.model import ModelArgs, Transformer, init_hf_weights, write_hf_checkpoint
from engine.sampling import SamplingParams
from engine.train import AdamW, LossConfig, Row

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# Complete requests for the knobs a test leaves alone. Sampling: what protocol.json says a caller's omission means
# (the server's client fills the same values in), no token limit. The training knobs are test values, chosen to be
# complete, not the server's defaults (those are src/training/defaults.ts's; the engine has none).
SAMPLING = {**copy.deepcopy(schema.GENERATE_DEFAULTS), "max_tokens": None}
LOSS = {
    "ppo": False,
    "epsilon": 1.0,
    "epsilon_high": 4.0,
    "importance_sampling_level": "token",
    "max_negative_advantage_importance_sampling_weight": None,
    "mask_prob_ratio": False,
    "k2_tau": None,
    "truncated_importance_sampling": None,
    "kl_penalty_coef": 0.0,
    "kl_penalty_source": "current_learner",
}
OPTIMIZER = {
    "rl": {"learning_rate": 5e-6, "betas": [0.9, 0.99], "weight_decay": 0.1, "max_grad_norm": 0.1},
    "sft": {"learning_rate": 5e-6, "betas": [0.9, 0.99], "weight_decay": 0.0, "max_grad_norm": 1.0},
}
INIT = {"rank": 8, "alpha": 16, "target_modules": list(SUPPORTED_TARGETS), "seed": 0}


def sampling(vocab: int, **over) -> SamplingParams:
    """SamplingParams as a generate request with these overrides parses (and checks against the vocabulary)."""
    req = wire.parse_generate({"base": "b", "adapter": None, "prompt": [], **SAMPLING, **over})
    wire.check_generate(req, vocab)
    return req.params


def loss_config(**over) -> LossConfig:
    return wire.parse_train_step(
        train_request([{"tokens": [1, 2], "mask": [0, 1], "advantages": [0, 1]}], "rl", loss_config=over)
    ).loss_config


def optimizer(loss: str, **over) -> AdamW:
    """The optimizer a train_step request with these overrides of its `optimizer` parses to."""
    return wire.parse_train_step(
        train_request([{"tokens": [1, 2], "mask": [0, 1]}], "sft", optimizer={**OPTIMIZER[loss], **over})
    ).optimizer


def lora(**over) -> LoraConfig:
    cfg = {**INIT, **over}
    return LoraConfig(
        rank=cfg["rank"], alpha=float(cfg["alpha"]), target_modules=tuple(cfg["target_modules"]), seed=cfg["seed"]
    )


def complete_row(row: dict, loss: str | None) -> dict:
    """A test row with the per-token arrays it leaves out filled as the server fills them (advantages excepted)."""
    T = len(row.get("tokens") or [])
    out = {"segment_ids": [0] * T, **row}
    if loss is not None:
        out = {"weights": [1] * T, **out}
    if loss == "rl":
        out = {"logprobs": [None] * T, **out}
    return out


def train_request(rows: list, loss: str, **over) -> dict:
    """A complete train_step request for `rows` (completed by complete_row)."""
    msg = {
        "base": "b",
        "adapter": "a",
        "loss": loss,
        "rows": [complete_row(r, loss) for r in rows],
        "optimizer": dict(OPTIMIZER[loss]),
    }
    if loss == "rl":
        msg["loss_config"] = dict(LOSS)
    for key, value in over.items():
        msg[key] = {**msg[key], **value} if isinstance(msg.get(key), dict) else value
    return msg


def generate_request(rid: str, **over) -> dict:
    """A complete generate frame on base b without an adapter, with these overrides."""
    return {"id": rid, "op": "generate", "base": "b", "adapter": None, **SAMPLING, **over}


def parse_rows(rows: list, vocab: int, max_len: int, loss: str | None) -> list[Row]:
    """Rows as the engine takes them from a train_step (loss given) or forward (loss None) request."""
    if loss is None:
        parsed = wire.parse_forward({"base": "b", "adapter": None, "rows": [complete_row(r, None) for r in rows]}).rows
    else:
        parsed = wire.parse_train_step(train_request(rows, loss)).rows
    wire.check_rows("test", parsed, vocab, max_len)
    return parsed


def tiny_config(family: str = "qwen2", tied: bool = False, **over) -> dict:
    cfg = {
        "model_type": family,
        "vocab_size": 101,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": 256,
        "tie_word_embeddings": tied,
        "eos_token_id": 2,
        "bos_token_id": 1,
    }
    if family == "qwen3":
        cfg["head_dim"] = 24  # Qwen3 decouples head_dim from hidden/heads
    cfg.update(over)
    return cfg


def make_checkpoint(
    folder: str,
    family: str = "qwen2",
    tied: bool = False,
    sharded: bool = False,
    seed: int = 0,
    std: float = 0.02,
    **over,
) -> str:
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


def launcher(ranks: int) -> list[str]:
    """torch's launcher starting `ranks` processes of the module after it on this machine (as the server does)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"] + [
        "--max-restarts=0",
        "--monitor-interval=0.2",
    ]


class EngineProcess:
    """`python3 -m engine` as a subprocess (`ranks`: a trainer group of that many, through torch's launcher), with
    frames read on a background thread.

    Every reply is held to protocol.json (schema.check_reply) as it arrives: a field the engine sends that the
    schema does not declare the same way fails the test that reads it, so the two cannot drift apart.
    """

    def __init__(self, *extra: str, ranks: int | None = None, env: dict | None = None):
        self.proc = subprocess.Popen(
            (launcher(ranks) if ranks else [sys.executable]) + ["-m", "engine", *extra],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        self.frames: queue.Queue = queue.Queue()
        self.stderr_lines = []
        self.ops: dict = {}  # request id -> its op, for checking its replies
        self.off_schema: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        self.ready = self.next(timeout=60)
        if self.ready is not None:
            ready = {k: v for k, v in self.ready.items() if k != "id"}
            event = "FailedEvent" if ready.get("event") == "failed" else "ReadyEvent"
            schema.Checker(ready.get("event", "ready"), strict=True).check(ready, schema.ref(event), "")

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            head = out.read(4)
            if len(head) < 4:
                self.frames.put(None)
                return
            (n,) = struct.unpack(">I", head)
            frame = json.loads(out.read(n).decode("utf-8"))
            self._check(frame)
            self.frames.put(frame)

    def _check(self, frame) -> None:
        """Records a reply that is not what protocol.json says its op answers."""
        op = self.ops.get(frame.get("id")) if isinstance(frame, dict) else None
        if op not in schema.OPS or "error" in frame:
            return
        payload = {k: v for k, v in frame.items() if k not in ("id", "done")}
        try:
            schema.check_reply(op, payload, done=bool(frame.get("done")))
        except schema.WireError as e:
            self.off_schema.append(f"{e} in {json.dumps(frame)[:300]}")

    def _drain_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr_lines.append(line.decode("utf-8", "replace"))

    def send_raw(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, obj: dict) -> None:
        if isinstance(obj.get("id"), str):
            self.ops[obj["id"]] = obj.get("op")
        raw = json.dumps(obj).encode("utf-8")
        self.send_raw(struct.pack(">I", len(raw)) + raw)

    def next(self, timeout: float = 30) -> dict | None:
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
        if self.off_schema:
            raise AssertionError("replies off protocol.json: " + "; ".join(self.off_schema))
        return got

    def call(self, obj: dict, timeout: float = 60) -> dict:
        self.send(obj)
        return self.until_done(obj["id"], timeout)[-1]

    def close(self) -> int:
        """Closes its input (the engine's signal to stop) and returns its exit code (-9: killed after 10 s)."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        while self.frames.get(timeout=10) is not None:  # until the reader thread has seen EOF
            pass
        self.proc.stdout.close()
        self.proc.stderr.close()
        if self.off_schema:
            raise AssertionError("replies off protocol.json: " + "; ".join(self.off_schema))
        return self.proc.returncode
