"""The trainer on a GPU, one run of a few minutes: prints `FIGURE name = value unit` lines.

For a Qwen3-8B-shaped model with random weights (nothing is downloaded): the GPU's measured bf16 matmul rate; an RL
step through the trainer's own code (a process group of one rank, the base sharded with FSDP2 in bf16, LoRA weights
and AdamW moments in fp32): tokens/s, MFU against that measured rate, peak memory; the same step through
`transformers` + PEFT on the same weights in the same process (tokens/s, peak memory, and the first step's loss,
which must agree with ours: a fresh LoRA is a no-op on both); our sampler's decode at 1 and 32 streams; and a smoke
run of `python -m engine --role trainer` on the device (load, train, stats).

    python bench/gpu_trainer.py                              # on a GPU host (bench/gpu_check.sh runs it)
    python bench/gpu_trainer.py --device cpu --shape tiny    # a dry run anywhere (needs transformers and peft)

Model FLOPs per trained token, for MFU: 4 x the matmul parameters (forward, and the input gradient in backward: a
LoRA step computes no gradient of the base weights) plus attention, 6 x layers x q width x the row's mean context
(forward QK and AV, twice that backward); recomputed blocks are not counted.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from gpu_check import figure, params, prompt_of, rl_rows, run_requests, sync  # noqa: E402

from engine import lora as L  # noqa: E402
from engine import shard, wire  # noqa: E402
from engine.group import open_group  # noqa: E402
from engine.limits import Limits  # noqa: E402
from engine.model import ModelArgs, Transformer, init_hf_weights, write_hf_checkpoint  # noqa: E402
from engine.server import Engine  # noqa: E402
from engine.tests.helpers import INIT, EngineProcess, train_request  # noqa: E402
from engine.tests.helpers import lora as lora_config  # noqa: E402
from engine.train import train_step  # noqa: E402

SHAPES = {
    "qwen3-8b": {  # Qwen/Qwen3-8B's config.json
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": False,
        "eos_token_id": 151645,
        "bos_token_id": 151643,
        "torch_dtype": "bfloat16",
    },
    "tiny": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": 512,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "eos_token_id": 2,
        "bos_token_id": 1,
        "torch_dtype": "bfloat16",
    },
}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def matmul_tflops(device: torch.device, dtype: torch.dtype) -> float:
    """The best of a few timed runs of square products in `dtype`: the rate MFU is measured against."""
    n = 8192 if device.type == "cuda" else 512
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    best = 0.0
    for _ in range(5):
        sync()
        t0, reps = time.perf_counter(), 10
        for _ in range(reps):
            a @ b
        sync()
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t0) / 1e12)
    return best


def trainer_model(cfg: dict, device: torch.device, dtype: torch.dtype, group) -> Transformer:
    """The trainer's model as shard.load_sharded builds it (on meta, sharded, allocated), with random weights."""
    model = shard.shard_model(Transformer.on_meta(ModelArgs.from_hf_config(cfg), dtype, device), group)
    model.to_empty(device=device)
    g = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            if "norm" in name:
                local.fill_(1.0)
            else:
                local.normal_(0.0, 0.02, generator=g)
    return model


def whole(p: torch.Tensor) -> torch.Tensor:
    return p.to_local() if hasattr(p, "to_local") else p


def our_rl_step(model: Transformer, rows_spec: tuple, steps: int, group) -> dict:
    """Our train_step on rows of random tokens (the trainer's path: FSDP, sharded adapter): best step seconds,
    tokens/s, peak memory above the model, and the first step's loss."""
    vocab = model.args.vocab_size
    msg = train_request(rl_rows(vocab, *rows_spec), "rl", optimizer={"learning_rate": 1e-5})
    req = wire.parse_train_step(msg)
    adapter = shard.shard_adapter(L.new_adapter("a", "b", model.args, lora_config(seed=1), model.device), group)
    first = train_step(model, adapter, req.loss, req.rows, req.loss_config, req.optimizer, group=group)
    seconds = []
    for _ in range(steps):
        reset_peak(model.device)
        sync()
        m = train_step(model, adapter, req.loss, req.rows, req.loss_config, req.optimizer, group=group)
        sync()
        seconds.append(m["step_seconds"])
    return {
        "seconds": min(seconds),
        "tokens": first["num_tokens"],
        "peak": peak_bytes(model.device),
        "loss": first["loss"],
        "rows": req.rows,
    }


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_bytes(device: torch.device) -> int:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0


def model_flops_per_token(args: ModelArgs, length: int) -> float:
    blocks = args.num_layers * (
        args.hidden_size * (args.q_size + 2 * args.kv_size)
        + args.q_size * args.hidden_size
        + 3 * args.hidden_size * args.intermediate_size
    )
    head = args.vocab_size * args.hidden_size
    attention = 6 * args.num_layers * args.q_size * (length / 2)
    return 4 * (blocks + head) + attention


def hf_model(cfg: dict, ours: Transformer, device: torch.device, dtype: torch.dtype):
    """transformers' Qwen3 with our weights (one copy per HF tensor, through our name mapping)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items() if k != "model_type"})
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
        except TypeError:  # transformers before 4.56 names it torch_dtype
            model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype, attn_implementation="sdpa")
    theirs = dict(model.named_parameters())
    with torch.no_grad():
        for name, (param, lo, hi) in ours.hf_mapping().items():
            theirs[name].copy_(whole(param)[lo:hi])
    return model


def hf_rl_step(model, rows, steps: int, device: torch.device) -> dict:
    """The same rows through transformers + PEFT (LoRA rank 8 on every projection, AdamW): the RL loss of a step
    whose sampler logprobs are missing (ratio 1): -mean over trained tokens of advantage x logprob, per row."""
    from peft import LoraConfig, get_peft_model

    peft = get_peft_model(model, LoraConfig(r=INIT["rank"], lora_alpha=INIT["alpha"], target_modules=TARGETS))
    opt = torch.optim.AdamW([p for p in peft.parameters() if p.requires_grad], lr=1e-5, betas=(0.9, 0.99))
    losses, seconds = [], []
    for step in range(steps + 1):
        reset_peak(device)
        sync()
        t0 = time.perf_counter()
        total = 0.0
        for row in rows:
            tokens = row.tokens_T.to(device)
            logits = peft(input_ids=tokens[None]).logits[0, :-1].float()
            logp = torch.log_softmax(logits, -1).gather(-1, tokens[1:, None])[:, 0]
            mask, adv = row.mask_T[1:].to(device), row.advantages_T[1:].to(device)
            loss = -(adv * logp * mask).sum() / mask.sum().clamp(min=1) / len(rows)
            loss.backward()
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_([p for p in peft.parameters() if p.requires_grad], 0.1)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        losses.append(total)
        if step:
            seconds.append(time.perf_counter() - t0)
    return {"seconds": min(seconds), "peak": peak_bytes(device), "loss": losses[0]}


def sampling(ours: Transformer, device: torch.device, dtype: torch.dtype) -> None:
    """Our sampler's decode on a plain copy of the same weights: tokens/s at 1 and 32 streams (64 new tokens each)."""
    engine = Engine(device, limits=Limits(max_model_len=1024, max_num_seqs=32))
    plain = Transformer(ours.args, dtype, device)
    with torch.no_grad():
        for (_, p), (_, q) in zip(plain.named_parameters(), ours.named_parameters(), strict=True):
            p.copy_(whole(q))
    engine.bases["b"] = base = sampler_base(engine, plain)
    vocab = ours.args.vocab_size
    run_requests(base.scheduler, [(prompt_of(64, 0, vocab), params(8))])  # warm-up
    for streams in (1, 32):
        r = run_requests(base.scheduler, [(prompt_of(128, 10 + i, vocab), params(64, seed=i)) for i in range(streams)])
        figure(f"decode_tokens_per_second_{streams}_streams", streams * 64 / r["seconds"], "tok/s")


def sampler_base(engine: Engine, model: Transformer):
    """The Base an engine's load_base makes, around a model already on the device."""
    from engine.generate import Scheduler, SchedulerConfig
    from engine.server import Base

    max_len, max_batch, prefix = engine.limits.sized(model.args, model.dtype)
    config = SchedulerConfig(
        max_batch=max_batch, max_len=max_len, prefill_budget=2048, prefill_chunk=512, prefix_cache_tokens=prefix
    )
    return Base("b", "", model, Scheduler(model, model.args.eos_token_ids, config), max_len, [])


def engine_smoke(device: torch.device, scratch: str) -> None:
    """`python -m engine --role trainer` on the device: the process group, load, train, save and stats."""
    folder = os.path.join(scratch, "tiny")
    write_hf_checkpoint(folder, SHAPES["tiny"], init_hf_weights(ModelArgs.from_hf_config(SHAPES["tiny"]), seed=0))
    engine = EngineProcess("--role", "trainer", "--device", device.type)
    try:
        assert engine.ready["event"] == "ready", engine.ready
        engine.call({"id": "l", "op": "load_base", "base": "b", "path": folder})
        engine.call({"id": "a", "op": "ensure_adapter", "adapter": "a", "base": "b", "init": INIT})
        rows = rl_rows(SHAPES["tiny"]["vocab_size"], 2, 256)
        step = engine.call({"id": "t", "op": "train_step", **train_request(rows, "rl"), "adapter": "a"}, timeout=300)
        assert "metrics" in step, step
        saved = engine.call({"id": "s", "op": "save_adapter", "adapter": "a", "path": os.path.join(scratch, "ad")})
        assert "files" in saved, saved
        memory = engine.call({"id": "m", "op": "stats"})["ranks"][0]["memory"]
        figure("engine_process_trainer_step_seconds", step["metrics"]["step_seconds"], "s")
        figure("engine_process_weights_bytes", memory["weights_bytes"], "B")
        figure("engine_process_device_peak", memory.get("device_peak_bytes", 0) / 2**20, "MiB")
    finally:
        engine.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--shape", choices=list(SHAPES), default="qwen3-8b")
    ap.add_argument("--rows", type=int, default=8, help="rows per RL step")
    ap.add_argument("--length", type=int, default=2048, help="tokens per row")
    ap.add_argument("--steps", type=int, default=3, help="timed steps (after one warm-up)")
    args = ap.parse_args()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    t0 = time.perf_counter()
    peak = matmul_tflops(device, dtype)
    figure(f"matmul_{str(dtype).replace('torch.', '')}_tflops_measured", peak, "TFLOP/s")
    group = open_group(device, 600)
    cfg = SHAPES[args.shape]
    ours = trainer_model(cfg, device, dtype, group)
    figure("model_parameters", ours.num_parameters() / 1e9, "B")
    step = our_rl_step(ours, (args.rows, args.length), args.steps, group)
    tps = step["tokens"] / step["seconds"]
    figure("rl_step_seconds", step["seconds"], f"s ({args.rows} rows x {args.length} tokens)")
    figure("rl_step_tokens_per_second", tps, "tok/s")
    figure("rl_step_mfu", tps * model_flops_per_token(ours.args, args.length) / (peak * 1e12), "of measured peak")
    figure("rl_step_peak_memory", step["peak"] / 2**30, "GiB")
    sampling(ours, device, dtype)
    hf = hf_rl_step(hf_model(cfg, ours, device, dtype), step["rows"], args.steps, device)
    figure("hf_peft_rl_step_seconds", hf["seconds"], "s")
    figure("hf_peft_rl_step_tokens_per_second", step["tokens"] / hf["seconds"], "tok/s")
    figure("hf_peft_rl_step_peak_memory", hf["peak"] / 2**30, "GiB")
    figure("ours_vs_hf_peft_step_speed", hf["seconds"] / step["seconds"], "x")
    figure("first_step_loss_ours_vs_hf_peft", f"{step['loss']:.6g} vs {hf['loss']:.6g}")
    with tempfile.TemporaryDirectory() as scratch:
        engine_smoke(device, scratch)
    figure("gpu_trainer_seconds", time.perf_counter() - t0, "s")
    group.close()


if __name__ == "__main__":
    main()
