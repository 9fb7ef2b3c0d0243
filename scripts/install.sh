#!/usr/bin/env bash
# Installs everything the service needs on a fresh Debian machine: npm packages, the engine's Python packages in a
# project-local venv (.venv, pinned; Debian's python3-torch where pip cannot reach a registry), and the built-in models.
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
fi

# Headless Chromium for the dashboard's browser tests (driven by playwright-core; no browser is downloaded).
# The service runs without it, so a failed install only skips those tests.
if [ -f /etc/debian_version ] && ! command -v chromium >/dev/null 2>&1; then
  echo "installing Chromium from Debian (for the dashboard's browser tests)…" >&2
  apt_install chromium || echo "could not install chromium: the dashboard's browser tests will be skipped" >&2
fi

if [ -f models/make-tiny.ts ]; then
  npx tsx models/make-tiny.ts >&2
fi

echo "$engine_python"
