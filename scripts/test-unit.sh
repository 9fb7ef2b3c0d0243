#!/usr/bin/env bash
# `npm run test:unit`: the fast tier, the pure logic in well under a minute with no engine process, server or
# database: the TypeScript files in test/unit/ (templating, tool-call parsing, row building, constraint requests,
# config, framing) and the engine modules whose tests build tensors in-process (wire parsing, model, sampling,
# LoRA). It runs against the install `npm start` or `npm test` made, installing first only where none is there.
# `npm test` stays the gate: it runs these files again beside everything else.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -d node_modules ] || { [ -z "${ENGINE_PYTHON:-}" ] && [ ! -x .venv/bin/python ]; }; then
  ENGINE_PYTHON=$(bash scripts/install.sh | tail -n 1)
fi
export ENGINE_PYTHON=${ENGINE_PYTHON:-$PWD/.venv/bin/python}

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
