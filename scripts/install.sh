#!/usr/bin/env bash
# Installs everything the service needs on a fresh Debian machine: npm packages, PyTorch for the engine
# (Debian's python3-torch with OpenBLAS when no python3 imports torch), and the built-in tiny model.
# Idempotent and quiet when everything is already there. Prints the engine's python on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=""
apt_install() {
  [ -n "$apt_updated" ] || { as_root apt-get update -qq >&2; apt_updated=1; }
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >&2
}
has_package() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# npm packages: reinstalled only when the lock file changed since the last install.
stamp=node_modules/.install-stamp
if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ] || [ package.json -nt "$stamp" ]; then
  echo "installing npm packages…" >&2
  npm ci --no-audit --no-fund --loglevel=error >&2
  touch "$stamp"
fi

# The engine's python: ENGINE_PYTHON, else the first python3 that imports torch and numpy. Debian's packages
# live in the system python, which is not always the first python3 on PATH.
find_python() {
  for candidate in ${ENGINE_PYTHON:-} /usr/bin/python3 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import torch, numpy' >/dev/null 2>&1; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}
if ! engine_python=$(find_python); then
  echo "installing PyTorch from Debian (python3-torch, python3-numpy, libopenblas0-pthread)…" >&2
  apt_install python3-torch python3-numpy libopenblas0-pthread
  engine_python=$(find_python)
fi
# Without OpenBLAS, Debian's torch falls back to the reference BLAS and runs matmuls ~30x slower.
if [ -f /etc/debian_version ] && ! has_package libopenblas0-pthread; then
  apt_install libopenblas0-pthread
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
