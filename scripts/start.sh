#!/usr/bin/env bash
# `npm start`: installs everything, then serves on the embedded default (SQLite, local artifacts, engine child process).
set -euo pipefail
cd "$(dirname "$0")/.."
ENGINE_PYTHON=$(bash scripts/install.sh | tail -n 1)
export ENGINE_PYTHON
exec npx tsx src/main.ts serve
