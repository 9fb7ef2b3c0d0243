"""One run of the GPU checks of our engine's CUDA path, and of vLLM serving the same model beside it.

Run by bench/gpu_check.sh on a GPU host (or by hand: `python bench/gpu_check.py --help`). It builds a model
folder (the real SmolLM2 when `models/smollm2-135m-instruct` exists, else random weights of the SmolLM2-135M or
Qwen3-0.6B shape), loads it through the engine's own `Engine._load` in bf16 on the device, and prints:
- sampling: decode tokens/s at 1 and 32 streams, time to first token of a long prompt, and the warm-prefix group
  (16 identical requests whose prompt is mostly cached ÷ one such request);
- training: RL train steps on a LoRA adapter (tokens/s, step seconds);
- the sampler–trainer logprob gap: |sampled logprob − the trainer's logprob of the same token| per token,
  bf16 on the device (and against an fp32 copy of the same weights);
- memory: the engine's `stats` memory report and the allocator's peak.
A marked section at the end runs the vLLM-kind checks (vLLM serving the same folder with our adapter hot-loaded)
when VLLM_PYTHON names a Python with vLLM.
Prints figures and asserts only that each path runs; `--device cpu --shape tiny` is a quick dry run anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import torch  # noqa: E402
from bench_common import SMOLLM2_135M  # noqa: E402

from engine import lora as L  # noqa: E402
from engine import wire  # noqa: E402
from engine.generate import GenRequest  # noqa: E402
from engine.limits import Limits  # noqa: E402
from engine.model import ModelArgs, init_hf_weights, write_hf_checkpoint  # noqa: E402
from engine.peft import load_peft  # noqa: E402
from engine.sampling import SamplingParams  # noqa: E402
from engine.server import Engine  # noqa: E402
from engine.tests.helpers import lora as lora_config  # noqa: E402
from engine.tests.helpers import parse_rows, train_request  # noqa: E402
from engine.train import forward_logprobs, train_step  # noqa: E402

SMOLLM2 = os.path.join(REPO, "models", "smollm2-135m-instruct")
# config.json of each shape (random weights); `architectures` and `torch_dtype` are for vLLM.
SHAPES = {
    "smollm2-135m": {"architectures": ["LlamaForCausalLM"], **SMOLLM2_135M, "torch_dtype": "bfloat16"},
    "qwen3-0.6b": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": True,
        "eos_token_id": 151645,
        "bos_token_id": 151643,
        "torch_dtype": "bfloat16",
    },
    # A dry run anywhere (head_dim 64: vLLM's CPU attention has no kernel for small ones).
    "tiny": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": 512,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 64,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    },
}


def figure(name: str, value, unit: str = "") -> None:
    """One result line, greppable: `FIGURE name = value unit`."""
    shown = f"{value:.4g}" if isinstance(value, float) else str(value)
    print(f"FIGURE {name} = {shown} {unit}".rstrip(), flush=True)


def model_folder(args, scratch: str) -> str:
    if args.model:
        return args.model
    if args.shape == "auto" and os.path.exists(os.path.join(SMOLLM2, "config.json")):
        print(f"model: the real SmolLM2-135M-Instruct ({SMOLLM2})")
        return SMOLLM2
    shape = "smollm2-135m" if args.shape == "auto" else args.shape
    folder = os.path.join(scratch, shape)
    config = SHAPES[shape]
    t0 = time.perf_counter()
    # std 0.05 (HF's init is 0.02): peakier next-token distributions, so the logprob gap is measured on tokens
    # that carry probability, not on a flat distribution where every logprob is about -log(vocab).
    write_hf_checkpoint(folder, config, init_hf_weights(ModelArgs.from_hf_config(config), seed=0, std=0.05))
    print(f"model: random weights of the {shape} shape, written in {time.perf_counter() - t0:.1f}s")
    return folder


def params(max_tokens: int, temperature: float = 1.0, seed=None, n: int = 1, logprobs=None) -> SamplingParams:
    return SamplingParams(
        max_tokens=max_tokens, temperature=temperature, seed=seed, n=n, ignore_eos=True, logprobs=logprobs
    )


def run_requests(scheduler, specs, adapter=None) -> dict:
    """Submits (prompt, SamplingParams) pairs at once and steps until all finish: wall seconds, the time to each
    request's first token, and each request's tokens and logprobs (sequence 0)."""
    out = {"first": [None] * len(specs), "tokens": [[] for _ in specs], "logprobs": [[] for _ in specs]}
    t0 = time.perf_counter()

    def emitter(i):
        def emit(m):
            if m.get("type") == "tokens" and m["seq"] == 0:
                if out["first"][i] is None:
                    out["first"][i] = time.perf_counter() - t0
                out["tokens"][i] += m["tokens"]
                out["logprobs"][i] += m.get("logprobs", [])

        return emit

    errors = []
    for i, (prompt, p) in enumerate(specs):
        scheduler.submit(
            GenRequest(
                id=str(i),
                prompt=list(prompt),
                params=p,
                emit=emitter(i),
                finish=lambda m: errors.append(m["error"]) if "error" in m else None,
                adapter=adapter,
            )
        )
    while scheduler.has_work():
        scheduler.step()
    sync()
    if errors:
        raise RuntimeError(f"generation failed: {errors[0]!r}")
    out["seconds"] = time.perf_counter() - t0
    return out


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def prompt_of(length: int, seed: int, vocab: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (length,), generator=g).tolist()


def check_sampling(base, vocab: int) -> None:
    sched = base.scheduler
    run_requests(sched, [(prompt_of(64, 0, vocab), params(8))])  # warm-up: kernels, rope tables, allocator
    for streams in (1, 32):
        r = run_requests(sched, [(prompt_of(128, 10 + i, vocab), params(64, seed=i)) for i in range(streams)])
        figure(f"decode_tokens_per_second_{streams}_streams", streams * 64 / r["seconds"], "tok/s")
    ttft = [run_requests(sched, [(prompt_of(1024, 100 + i, vocab), params(1))])["first"][0] for i in range(3)]
    figure("ttft_1024_token_prompt", statistics.median(ttft) * 1000, "ms")
    shared = prompt_of(1400, 200, vocab)
    run_requests(sched, [(shared + prompt_of(14, 201, vocab), params(1))])  # caches the shared prefix
    one = run_requests(sched, [(shared + prompt_of(14, 202, vocab), params(1))])["seconds"]
    group = run_requests(sched, [(shared + prompt_of(14, 203, vocab), params(1))] * 16)["seconds"]
    figure("warm_prefix_group_of_16_vs_one", group / one, "x")


def rl_rows(vocab: int, rows: int, length: int) -> list:
    prompt = 64
    return [
        {
            "tokens": prompt_of(length, 300 + r, vocab),
            "mask": [0] * prompt + [1] * (length - prompt),
            "advantages": [0.0] * prompt + [1.0 if r % 2 else -1.0] * (length - prompt),
        }
        for r in range(rows)
    ]


def check_training(engine: Engine, base, adapter, vocab: int, steps: int) -> None:
    msg = train_request(rl_rows(vocab, 8, 1024), "rl", optimizer={"learning_rate": 1e-4})
    req = wire.parse_train_step(msg)
    train_step(base.model, adapter, req.loss, req.rows, req.loss_config, req.optimizer)  # warm-up
    seconds, tokens = [], 0
    for _ in range(steps):
        m = train_step(base.model, adapter, req.loss, req.rows, req.loss_config, req.optimizer)
        sync()
        seconds.append(m["step_seconds"])
        tokens = m["num_tokens"]
    figure("train_step_seconds_8x1024_tokens", statistics.median(seconds), "s")
    figure("train_tokens_per_second", tokens / statistics.median(seconds), "tok/s")
    for base_key in list(engine.bases.values()):
        base_key.scheduler.stacks.forget(adapter)  # trained: its cached stacks are stale (as op__trained does)


def logprob_gap(model, scheduler, adapter, vocab: int, name: str) -> None:
    """Samples with the adapter, then scores the same tokens as the trainer does; prints |Δ| per token."""
    specs = [(prompt_of(96, 400 + i, vocab), params(128, seed=i, logprobs=0)) for i in range(8)]
    r = run_requests(scheduler, specs, adapter)
    seqs = [list(p) + toks for (p, _), toks in zip(specs, r["tokens"])]
    trainer = forward_logprobs(model, parse_rows([{"tokens": s} for s in seqs], vocab, 4096, None), adapter)
    gaps = []
    for (p, _), sampled, scored in zip(specs, r["logprobs"], trainer):
        gaps += [abs(a - b) for a, b in zip(sampled, scored[len(p) :])]
    gaps.sort()
    figure(f"{name}_mean", sum(gaps) / len(gaps), "nats")
    figure(f"{name}_p99", gaps[int(0.99 * (len(gaps) - 1))], "nats")
    figure(f"{name}_max", gaps[-1], "nats")
    figure(
        f"{name}_mean_sampled_logprob", sum(sum(x) for x in r["logprobs"]) / sum(len(x) for x in r["logprobs"]), "nats"
    )


def memory_report(engine: Engine) -> None:
    for key, value in engine.memory().items():
        figure(f"memory_{key}", value / 2**20, "MiB")


def load(engine: Engine, name: str, folder: str, dtype: torch.dtype):
    t0 = time.perf_counter()
    base = engine._load(name, folder, dtype)
    sync()
    figure(f"load_seconds_{name}", time.perf_counter() - t0, "s")
    return base


def our_engine_checks(args, folder: str, scratch: str) -> dict:
    device = torch.device(args.device)
    engine = Engine(device, limits=Limits(max_model_len=4096, max_num_seqs=32))
    base = load(engine, "bf16", folder, torch.bfloat16)
    vocab = base.model.args.vocab_size
    check_sampling(base, vocab)
    adapter = L.new_adapter("a", "bf16", base.model.args, lora_config(seed=1), device)
    engine.adapters.put(adapter)
    check_training(engine, base, adapter, vocab, args.train_steps)
    logprob_gap(base.model, base.scheduler, adapter, vocab, "logprob_gap_bf16_sampler_vs_bf16_trainer")
    memory_report(engine)
    figure("device_peak_allocated", torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else 0, "MiB")
    adapter_dir = os.path.join(scratch, "adapter")
    L.save_peft(adapter, adapter_dir, "base")
    reference = Engine(device, limits=Limits(max_model_len=4096, max_num_seqs=32))
    fp32 = load(reference, "fp32", folder, torch.float32)
    copy = load_peft("a", "fp32", adapter_dir, fp32.model.args, device)
    logprob_gap(fp32.model, fp32.scheduler, copy, vocab, "logprob_gap_fp32_sampler_vs_fp32_trainer")
    # bf16 sampling against the fp32 trainer: what bf16 itself costs.
    specs = [(prompt_of(96, 500 + i, vocab), params(64, seed=i, logprobs=0)) for i in range(4)]
    r = run_requests(base.scheduler, specs, adapter)
    seqs = [list(p) + t for (p, _), t in zip(specs, r["tokens"])]
    exact = forward_logprobs(fp32.model, parse_rows([{"tokens": s} for s in seqs], vocab, 4096, None), copy)
    gaps = sorted(abs(a - b) for (p, _), s, e in zip(specs, r["logprobs"], exact) for a, b in zip(s, e[len(p) :]))
    figure("logprob_gap_bf16_sampler_vs_fp32_trainer_mean", sum(gaps) / len(gaps), "nats")
    figure("logprob_gap_bf16_sampler_vs_fp32_trainer_max", gaps[-1], "nats")
    return {"adapter_dir": adapter_dir, "vocab": vocab, "engine": engine, "base": base, "adapter": adapter}


# ==== vLLM-kind checks =========================================================================================
# vLLM alone (when VLLM_PYTHON names a Python with vLLM): its own OpenAI server on the same folder, our adapter
# hot-loaded, greedy tokens compared with our engine's, and vLLM's sampled logprobs against our bf16 trainer. The
# vLLM sampler engine behind our HTTP API (SAMPLER_ENGINES, the same figures ours vs vLLM, and the step-0 gap as
# the RL job reports it) is bench/vllm-sampler.ts, which gpu_check.sh runs after this script.


def http_json(url: str, body=None, timeout: float = 600.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as response:
        text = response.read().decode()
    return json.loads(text) if text.strip().startswith(("{", "[")) else text


def start_vllm(python: str, folder: str, port: int, args) -> subprocess.Popen:
    env = {
        **os.environ,
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    cmd = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        folder,
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--dtype",
        "bfloat16" if args.device != "cpu" else "float32",
        "--enable-lora",
        "--max-lora-rank",
        "8",
        "--max-model-len",
        "4096",
        "--seed",
        "0",
        "--served-model-name",
        "base",
        "--enable-prefix-caching",
    ]
    if args.device != "cpu":
        cmd += ["--gpu-memory-utilization", "0.5"]
    if not os.path.exists(os.path.join(folder, "tokenizer.json")):
        cmd.append("--skip-tokenizer-init")  # random weights come without a tokenizer: token ids in and out
    log = open(os.path.join(tempfile.gettempdir(), "gpu_check_vllm.log"), "w")  # noqa: SIM115 (vLLM's log while it runs)
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM exited ({proc.returncode}); see {log.name}")
        try:
            http_json(f"http://127.0.0.1:{port}/health", timeout=2)
            return proc
        except OSError:
            time.sleep(2)
    proc.kill()
    raise RuntimeError("vLLM did not become healthy in 600 s")


def vllm_checks(args, folder: str, ours: dict) -> None:
    python = os.environ.get("VLLM_PYTHON")
    if not python:
        print("vLLM checks: SKIPPED (VLLM_PYTHON is not set; bench/gpu_check.sh sets it when vLLM installed)")
        return
    port = 18000 + os.getpid() % 1000
    t0 = time.perf_counter()
    proc = start_vllm(python, folder, port, args)
    figure("vllm_start_seconds", time.perf_counter() - t0, "s")
    try:
        url = f"http://127.0.0.1:{port}"
        http_json(f"{url}/v1/load_lora_adapter", {"lora_name": "ours", "lora_path": ours["adapter_dir"]})
        vocab, adapter = ours["vocab"], ours["adapter"]
        prompts = [prompt_of(96, 600 + i, vocab) for i in range(4)]
        mine = run_requests(
            ours["base"].scheduler, [(p, params(32, temperature=0.0, logprobs=0)) for p in prompts], adapter
        )
        same, gaps = 0, []
        for p, tokens in zip(prompts, mine["tokens"]):
            body = {
                "model": "ours",
                "prompt": p,
                "max_tokens": 32,
                "temperature": 0,
                "logprobs": 0,
                "return_token_ids": True,
                "return_tokens_as_token_ids": True,
                "ignore_eos": True,
            }
            choice = http_json(f"{url}/v1/completions", body)["choices"][0]
            theirs = choice["token_ids"]
            same += int(theirs == tokens)
            scored = forward_logprobs(
                ours["base"].model, parse_rows([{"tokens": p + theirs}], vocab, 4096, None), adapter
            )[0]
            gaps += [abs(a - b) for a, b in zip(choice["logprobs"]["token_logprobs"], scored[len(p) :])]
        figure("vllm_greedy_equal_to_ours", f"{same}/{len(prompts)}", "prompts")
        figure("vllm_logprob_gap_vs_our_bf16_trainer_mean", sum(gaps) / len(gaps), "nats")
        figure("vllm_logprob_gap_vs_our_bf16_trainer_max", max(gaps), "nats")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


# ==== end of the vLLM-kind checks ==============================================================================


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument(
        "--shape",
        choices=["auto", *SHAPES],
        default="auto",
        help="random weights of this shape (auto: the real SmolLM2 when installed, else smollm2-135m)",
    )
    ap.add_argument("--model", help="an HF model folder to use instead")
    ap.add_argument("--train-steps", type=int, default=3)
    args = ap.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    print(
        f"torch {torch.__version__}, device {args.device}"
        + (
            f" ({torch.cuda.get_device_name()}, {torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB)"
            if args.device.startswith("cuda")
            else ""
        ),
        flush=True,
    )
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        folder = model_folder(args, scratch)
        ours = our_engine_checks(args, folder, scratch)
        vllm_checks(args, folder, ours)
    figure("gpu_check_seconds", time.perf_counter() - t0, "s")


if __name__ == "__main__":
    main()
