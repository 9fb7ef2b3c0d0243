#!/usr/bin/env bash
# `npm run test:unit`: the fast tier, the pure logic in well under a minute with no engine process, server or
# database: the TypeScript files in test/unit/ (templating, tool-call parsing, row building, constraint requests,
# config, framing) and the engine modules whose tests build tensors in-process (wire parsing, model, sampling,
# LoRA). It needs what `npm start` installs (npm packages, the engine's venv, the built-in models in models/), and
# runs the installer first, which is quiet and takes about 2 s when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

ENGINE_PYTHON=$(bash scripts/install.sh | tail -n 1)
export ENGINE_PYTHON

# The two halves run side by side (each is mostly one core); the engine's report is printed after the TypeScript one.
engine_log=$(mktemp)
trap 'rm -f "$engine_log"' EXIT
"$ENGINE_PYTHON" -m unittest engine.tests.test_wire engine.tests.test_model engine.tests.test_sampling engine.tests.test_lora \
  >"$engine_log" 2>&1 &
engine_pid=$!
echo "== unit tests (test/unit/)"
node_status=0
node --import tsx --test test/unit/*.test.ts || node_status=$?
engine_status=0
wait "$engine_pid" || engine_status=$?
echo "== engine numerics ($ENGINE_PYTHON)"
cat "$engine_log"
exit $(( node_status || engine_status ))
