#!/usr/bin/env bash
# Every GPU check (the trainer, our engine's CUDA path, vLLM as the sampler), run once on a GPU host from the
# repository root: `bash bench/gpu_check.sh`.
# Installs what it can (each step optional, each failure said and skipped), then runs bench/gpu_trainer.py (the
# trainer on a Qwen3-8B-shaped model: an RL step's tokens/s, MFU against the measured bf16 matmul rate and peak
# memory, the same step through transformers + PEFT, decode at 1 and 32 streams, the trainer engine process on the
# device), then bench/gpu_check.py for each model shape in GPU_CHECK_SHAPES (default: SmolLM2-135M; random weights
# unless the real SmolLM2 is installed), and prints their `FIGURE name = value` lines. The whole run stops within
# GPU_CHECK_BUDGET_S seconds (default 590: ten minutes), each step cut off where the budget ends.
#
# What it installs, where a package registry answers:
# - the engine's packages (scripts/python/engine.txt: on a GPU host its torch pin resolves to the CUDA build) into
#   .venv-gpu; without a registry, the first python3 whose torch sees a GPU serves instead;
# - the official vLLM (scripts/python/vllm-gpu.txt) into .venv-vllm-gpu, for the vLLM-kind checks; without a
#   registry they are skipped (its wheels, torch's CUDA build among them, are GBs).
# Set ENGINE_GPU_PYTHON / VLLM_PYTHON to use Pythons of your own instead, GPU_CHECK_VLLM=0 to skip vLLM altogether,
# and GPU_TRAINER_ARGS to pass bench/gpu_trainer.py arguments (a dry run on CPU: ENGINE_GPU_PYTHON=<a Python with
# torch, transformers and peft> GPU_CHECK_VLLM=0 GPU_CHECK_SHAPES=tiny GPU_TRAINER_ARGS="--device cpu --shape tiny
# --rows 2 --length 256" bash bench/gpu_check.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
source scripts/python/venv.sh
started=$(date +%s)
# An offline host must fail fast, not wait out pip's retries.
export PIP_RETRIES=${PIP_RETRIES:-1} PIP_DEFAULT_TIMEOUT=${PIP_DEFAULT_TIMEOUT:-20}

has_cuda_torch() { "$1" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; }

engine_python() {
  if [ -n "${ENGINE_GPU_PYTHON:-}" ]; then echo "$ENGINE_GPU_PYTHON"; return; fi
  if make_venv .venv-gpu scripts/python/engine.txt && has_cuda_torch .venv-gpu/bin/python; then
    echo "$PWD/.venv-gpu/bin/python"; return
  fi
  echo "gpu_check: .venv-gpu could not be built with a CUDA torch; looking for an installed one" >&2
  for candidate in python3 python; do
    if command -v "$candidate" >/dev/null && has_cuda_torch "$candidate"; then command -v "$candidate"; return; fi
  done
  return 1
}

vllm_python() {
  if [ "${GPU_CHECK_VLLM:-1}" = 0 ]; then return 1; fi
  if [ -n "${VLLM_PYTHON:-}" ]; then echo "$VLLM_PYTHON"; return; fi
  # vLLM's own start-up checks (CUDA, its kernels) are the test that the install works.
  if make_venv .venv-vllm-gpu scripts/python/vllm-gpu.txt && .venv-vllm-gpu/bin/python -c 'import vllm' 2>/dev/null; then
    echo "$PWD/.venv-vllm-gpu/bin/python"; return
  fi
  return 1
}

echo "== install ($(date -u +%H:%M:%S))"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "gpu_check: nvidia-smi is not available"
if ! python=$(engine_python); then
  echo "gpu_check: no Python with a CUDA torch: nothing to check" >&2
  exit 1
fi
echo "engine Python: $python ($("$python" -c 'import torch; print(torch.__version__)'))"
if vllm=$(vllm_python); then
  export VLLM_PYTHON=$vllm
  echo "vLLM Python: $vllm ($("$vllm" -c 'import vllm; print(vllm.__version__)' 2>/dev/null))"
else
  unset VLLM_PYTHON
  echo "gpu_check: vLLM could not be installed (no package registry?): the vLLM-kind checks are skipped"
fi
echo "install took $(( $(date +%s) - started ))s"

status=0
budget=${GPU_CHECK_BUDGET_S:-590}
left() { local s=$(( budget - ($(date +%s) - started) )); echo $(( s > 1 ? s : 1 )); }  # timeout 0 would mean none
echo "== the trainer on CUDA, Qwen3-8B shape, vs transformers + PEFT (bench/gpu_trainer.py) ($(date -u +%H:%M:%S))"
# shellcheck disable=SC2086 (GPU_TRAINER_ARGS is a list of arguments)
PYTHONUNBUFFERED=1 timeout "$(left)" "$python" bench/gpu_trainer.py ${GPU_TRAINER_ARGS:-} || { status=1; echo "gpu_check: gpu_trainer.py FAILED"; }
for shape in ${GPU_CHECK_SHAPES:-smollm2-135m}; do
  if [ "$(left)" -le 30 ]; then echo "gpu_check: out of time before $shape"; status=1; break; fi
  echo "== our engine on CUDA, $shape ($(date -u +%H:%M:%S))"
  # The vLLM-kind checks run inside gpu_check.py's marked section, once per shape.
  PYTHONUNBUFFERED=1 timeout "$(left)" "$python" bench/gpu_check.py --shape "$shape" || { status=1; echo "gpu_check: $shape FAILED"; }
done
# The vLLM sampler engine behind our HTTP API vs our engine (bench/vllm-sampler.ts: decode tok/s at 1 and 32 streams,
# p50 TTFT, the warm-prefix group, the step-0 logprob gap), bf16 on the GPU, vLLM leaving the trainer most of it.
if [ "$(left)" -le 60 ]; then
  echo "gpu_check: our API over vLLM skipped (out of time)"
elif [ -n "${VLLM_PYTHON:-}" ] && command -v node >/dev/null && [ -d node_modules ] && [ -f models/smollm2-135m-instruct/config.json ]; then
  echo "== our API: our engine vs the vLLM sampler (bench/vllm-sampler.ts) ($(date -u +%H:%M:%S))"
  ENGINE_PYTHON=$python DTYPE=bfloat16 VLLM_ARGS="${GPU_CHECK_VLLM_ARGS:---gpu-memory-utilization 0.35}" timeout "$(left)" npx tsx bench/vllm-sampler.ts \
    || { status=1; echo "gpu_check: bench/vllm-sampler.ts FAILED"; }
else
  echo "gpu_check: our API over vLLM skipped (needs VLLM_PYTHON, node with node_modules, and models/smollm2-135m-instruct)"
fi
echo "== done in $(( $(date +%s) - started ))s (exit $status)"
exit $status
