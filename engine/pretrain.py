"""Full-weight pretraining of a small HF-format model on packed token sequences, then evaluation.

`python3 -m engine.pretrain --model DIR --data FILE --steps N [--seed S] [--eval FILE --eval-out FILE]`

This is how the tiny built-in chat model (models/make-tiny.ts) gets its weights: the folder's
current `model.safetensors` (a random init) is loaded with the engine's own loader, every weight
is trained in fp32 with AdamW on masked next-token cross-entropy, and the result is written back
as `model.safetensors` (HF names, fp32, atomic). Then, on request, the prompts of an eval file
are decoded with the engine's own scheduler: greedily and at temperature 1 with fixed seeds.

Files, one JSON object per line:
  --data:      {"ids": [int...], "mask": [0|1...]}  mask[t] = 1 when token t is a loss target
  --eval:      {"prompt": [int...], "max_tokens": int}
  --eval-out:  one JSON document {"greedy": [[ids]...], "sampled": [[[ids] * K]...]}

Deterministic on a given machine and torch build: fixed seeds, a fixed data order (sequences are
shuffled per epoch by a seeded generator and packed first-fit into rows), a fixed thread count and
torch's deterministic algorithms. Progress goes to stderr; one JSON summary line to stdout.

Owns: packing sequences into rows, the schedule (linear warmup, cosine decay), the pretraining
loop and its progress bar, writing full weights back under HF names.
Refuses to know: tokenizers, chat templates, what the sequences say (the caller builds them).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from . import weights as W
from .generate import GenRequest, Scheduler, SchedulerConfig
from .model import ForwardContext, Transformer, load_args
from .sampling import SamplingParams

Example = Tuple[List[int], List[int]]  # (ids, mask)


def read_jsonl(path: str) -> List[dict]:
    with open(path, "r", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_examples(path: str, vocab: int, max_tokens: int) -> List[Example]:
    out = []
    for i, r in enumerate(read_jsonl(path)):
        ids, mask = r["ids"], r["mask"]
        if len(ids) != len(mask) or not ids:
            raise ValueError(f"{path}:{i + 1}: ids and mask must be non-empty and of equal length")
        if len(ids) > max_tokens:
            raise ValueError(f"{path}:{i + 1}: {len(ids)} tokens do not fit the longest row ({max_tokens})")
        if mask[0]:
            raise ValueError(f"{path}:{i + 1}: the first token has no prediction and cannot be a target")
        if any(not 0 <= t < vocab for t in ids):
            raise ValueError(f"{path}:{i + 1}: token id outside the vocabulary ({vocab})")
        out.append((ids, mask))
    if not out:
        raise ValueError(f"{path}: no sequences")
    return out


def pack(examples: Sequence[Example], order: Sequence[int], row_tokens: int, pad_id: int):
    """First-fit in the given order: rows [R, T] of tokens, segment ids and mask (padding: own segment, mask 0)."""
    rows: List[Tuple[List[int], List[int], List[int]]] = []
    ids: List[int] = []
    seg: List[int] = []
    mask: List[int] = []
    segments = 0

    def flush():
        pad = row_tokens - len(ids)
        rows.append((ids + [pad_id] * pad, seg + [-1] * pad, mask + [0] * pad))

    for i in order:
        e_ids, e_mask = examples[i]
        if len(ids) + len(e_ids) > row_tokens:
            flush()
            ids, seg, mask, segments = [], [], [], 0
        seg += [segments] * len(e_ids)
        segments += 1
        ids += e_ids
        mask += e_mask
    if ids:
        flush()
    t = lambda k: torch.tensor([r[k] for r in rows], dtype=torch.long)  # noqa: E731
    return t(0), t(1), t(2)


Batch = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # tokens, segment ids, mask: [rows, row length]


def batches(examples: Sequence[Example], seed: int, batch_tokens: int, row_lengths: Sequence[int],
            pad_id: int) -> Iterator[Batch]:
    """Endless batches, epoch after epoch.

    Each epoch is a seeded permutation of the examples. An example goes to the shortest row length
    that holds it (short chats do not pay for the attention span of long tool conversations); each
    length's examples are packed into rows, cut into batches of about `batch_tokens`, and the batches
    of all lengths are shuffled together.
    """
    lengths = sorted(row_lengths)
    bucket = [next(L for L in lengths if len(ids) <= L) for ids, _ in examples]
    epoch = 0
    while True:
        g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        order = torch.randperm(len(examples), generator=g).tolist()
        out: List[Batch] = []
        for L in lengths:
            mine = [i for i in order if bucket[i] == L]
            if not mine:
                continue
            tokens, seg, mask = pack(examples, mine, L, pad_id)
            rows = max(1, batch_tokens // L)
            out += [(tokens[s:s + rows], seg[s:s + rows], mask[s:s + rows]) for s in range(0, tokens.shape[0], rows)]
        for i in torch.randperm(len(out), generator=g).tolist():
            yield out[i]
        epoch += 1


def lr_at(step: int, steps: int, lr: float, warmup: int, min_ratio: float) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def masked_loss(model: Transformer, tokens_BT: torch.Tensor, seg_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the target tokens; logits only where there is a target."""
    h_BTD = model(tokens_BT, ForwardContext.packed(seg_BT, model.args.sliding_window))
    want_BT = mask_BT[:, 1:] > 0
    if not bool(want_BT.any()):
        return h_BTD.sum() * 0.0  # nothing to learn here: zero gradients, not NaN
    logits = model.logits(h_BTD[:, :-1][want_BT])
    return F.cross_entropy(logits, tokens_BT[:, 1:][want_BT])


class Progress:
    """A bar redrawn in place on a terminal; a line every 10% otherwise (logs, CI)."""

    def __init__(self, total: int, label: str, stream=sys.stderr):
        self.total, self.label, self.stream = total, label, stream
        self.tty = stream.isatty()
        self.start = time.monotonic()
        self.shown = -1

    def update(self, done: int, note: str) -> None:
        elapsed = time.monotonic() - self.start
        eta = elapsed / done * (self.total - done) if done else 0.0
        width = 30
        fill = width * done // self.total
        line = (f"{self.label} [{'#' * fill}{'.' * (width - fill)}] {done}/{self.total} {note} "
                f"{elapsed:.0f}s elapsed, ~{eta:.0f}s left")
        if self.tty:
            self.stream.write("\r" + line + ("\n" if done == self.total else ""))
            self.stream.flush()
        elif done * 10 // self.total > self.shown or done == self.total:
            self.shown = done * 10 // self.total
            self.stream.write(line + "\n")
            self.stream.flush()


def train(model: Transformer, examples: Sequence[Example], steps: int, seed: int, lr: float, warmup: int,
          min_lr_ratio: float, weight_decay: float, batch_tokens: int, row_lengths: Sequence[int], pad_id: int,
          max_grad_norm: float = 1.0, label: str = "pretraining", quiet: bool = False) -> Dict[str, float]:
    torch.manual_seed(seed)
    params = [p for p in model.parameters()]
    for p in params:
        p.requires_grad_(True)
    # Matrices decay; norm weights (1-D) do not.
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.98), eps=1e-8)
    progress = None if quiet else Progress(steps, label)
    data = batches(examples, seed, batch_tokens, row_lengths, pad_id)
    losses: List[float] = []
    targets = seen = 0
    t0 = time.monotonic()
    for step in range(steps):
        tokens, seg, mask = next(data)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup, min_lr_ratio)
        loss = masked_loss(model, tokens, seg, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        opt.step()
        losses.append(float(loss))
        targets += int(mask[:, 1:].sum())
        seen += tokens.numel()
        if progress is not None:
            recent = losses[-20:]
            progress.update(step + 1, f"loss {sum(recent) / len(recent):.3f}")
    for p in params:
        p.requires_grad_(False)
    tail = losses[-max(1, steps // 10):]
    return {"steps": steps, "first_loss": losses[0], "final_loss": sum(tail) / len(tail),
            "target_tokens": targets, "row_tokens": seen,
            "seconds": time.monotonic() - t0}


SAVE_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def round_to(model: Transformer, dtype: torch.dtype) -> None:
    """Rounds every weight to `dtype` in place, so the evaluation measures the weights as saved."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).to(p.dtype))


def hf_tensors(model: Transformer, dtype: torch.dtype) -> Dict[str, torch.Tensor]:
    """The model's weights under HF names (fused tensors split back), in `dtype`, contiguous."""
    return {name: param[lo:hi].detach().to(dtype).contiguous().clone()
            for name, (param, lo, hi) in model.hf_mapping().items()}


def generate(model: Transformer, prompts: Sequence[List[int]], max_tokens: Sequence[int], temperature: float,
             n: int, seed: int) -> List[List[List[int]]]:
    """Decode every prompt with the engine's continuous-batching scheduler: outputs[prompt][sample] = ids."""
    max_len = max(len(p) + m for p, m in zip(prompts, max_tokens)) + 1
    sched = Scheduler(model, model.args.eos_token_ids, SchedulerConfig(max_batch=64, max_len=max_len))
    outputs = [[[] for _ in range(n)] for _ in prompts]
    errors: List[Exception] = []

    def emit(i: int, m: dict) -> None:
        if m.get("type") == "tokens":
            outputs[i][m["seq"]].extend(m["tokens"])

    def finish(m: dict) -> None:
        if "error" in m:
            errors.append(m["error"])

    for i, (prompt, limit) in enumerate(zip(prompts, max_tokens)):
        params = SamplingParams(max_tokens=limit, temperature=temperature, seed=seed + i, n=n)
        sched.submit(GenRequest(id=str(i), prompt=list(prompt), params=params,
                                emit=lambda m, i=i: emit(i, m), finish=finish))
    while sched.has_work():
        sched.step()
    if errors:
        raise errors[0]
    return outputs


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m engine.pretrain", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="HF folder: config.json + model.safetensors (the init)")
    ap.add_argument("--data", required=True, help="JSON lines of {ids, mask}")
    ap.add_argument("--out", help="folder for the trained model.safetensors (default: --model)")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--batch-tokens", type=int, default=1024, help="tokens per step (rows of one length)")
    ap.add_argument("--row-tokens", default="128,384", help="row lengths, comma-separated")
    ap.add_argument("--save-dtype", choices=sorted(SAVE_DTYPES), default="f32",
                    help="dtype of the saved weights; the evaluation runs on the rounded weights")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads, fixed so results do not depend on the machine's cores; with "
                         "Debian's OpenBLAS build matmuls use OpenBLAS's own threads, and a second torch thread "
                         "only oversubscribes two cores (a step takes twice as long)")
    ap.add_argument("--eval", help="JSON lines of {prompt, max_tokens}")
    ap.add_argument("--eval-out", help="where the eval generations go (JSON)")
    ap.add_argument("--eval-samples", type=int, default=4, help="samples per prompt at temperature 1")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    a = ap.parse_args(argv)
    try:
        row_lengths = sorted({int(x) for x in a.row_tokens.split(",")})
    except ValueError:
        ap.error("--row-tokens must be integers separated by commas")
    if a.steps < 1 or a.batch_tokens < 1 or row_lengths[0] < 2:
        ap.error("--steps and --batch-tokens must be >= 1, row lengths >= 2")
    if bool(a.eval) != bool(a.eval_out):
        ap.error("--eval and --eval-out go together")

    torch.set_num_threads(a.threads)
    torch.use_deterministic_algorithms(True)
    args = load_args(a.model)
    model = Transformer.from_pretrained(a.model, torch.float32, "cpu")
    examples = read_examples(a.data, args.vocab_size, row_lengths[-1])
    pad_id = args.eos_token_ids[0] if args.eos_token_ids else 0
    summary = train(model, examples, a.steps, a.seed, a.lr, a.warmup, a.min_lr_ratio, a.weight_decay,
                    a.batch_tokens, row_lengths, pad_id, label=f"pretraining {os.path.basename(a.model.rstrip('/'))}",
                    quiet=a.quiet)
    summary["sequences"] = len(examples)
    save_dtype = SAVE_DTYPES[a.save_dtype]
    round_to(model, save_dtype)
    W.save_checkpoint(hf_tensors(model, save_dtype), a.out or a.model)

    if a.eval:
        items = read_jsonl(a.eval)
        prompts = [r["prompt"] for r in items]
        limits = [int(r.get("max_tokens", 32)) for r in items]
        t0 = time.monotonic()
        greedy = generate(model, prompts, limits, 0.0, 1, a.seed)
        sampled = generate(model, prompts, limits, 1.0, a.eval_samples, a.seed) if a.eval_samples > 0 else []
        W.atomic_write_json(a.eval_out, {"greedy": [o[0] for o in greedy], "sampled": sampled})
        summary["eval_seconds"] = time.monotonic() - t0
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
