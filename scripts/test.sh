#!/usr/bin/env bash
# `npm test`: installs everything, then runs every test: type check, the engine's Python tests, and the
# TypeScript unit, API and end-to-end tests against SQLite and a real PostgreSQL server.
set -euo pipefail
cd "$(dirname "$0")/.."
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

ENGINE_PYTHON=$(bash scripts/install.sh | tail -n 1)
export ENGINE_PYTHON
source scripts/postgres.sh

echo "== type check"
npx tsc --noEmit -p tsconfig.json

if [ -d engine/tests ]; then
  echo "== engine tests ($ENGINE_PYTHON)"
  "$ENGINE_PYTHON" -m unittest discover -s engine/tests -t . 
fi

echo "== service tests (SQLite and $TEST_DATABASE_URL)"
mapfile -t test_files < <(ls test/*.test.ts | sort)
node --import tsx --test --test-concurrency=1 "${test_files[@]}"
