#!/usr/bin/env bash
# `npm run lint`: the field's linters and formatters, configured in biome.json (TypeScript, the dashboard's CSS,
# JSON) and ruff.toml (Python). Fails on any finding or any file the formatters would change; `npm run format`
# applies the formatters and the safe fixes. ruff lives in a small venv of its own (.venv-lint, seconds to build).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
source scripts/python/venv.sh

[ -x node_modules/.bin/biome ] || { echo "node_modules/.bin/biome is missing: run npm ci (npm start and npm test do)" >&2; exit 1; }
make_venv .venv-lint scripts/python/lint.txt
if [ "${1:-}" = --write ]; then
  node_modules/.bin/biome check --write .
  .venv-lint/bin/ruff check --fix .
  .venv-lint/bin/ruff format .
else
  node_modules/.bin/biome ci .
  .venv-lint/bin/ruff check .
  .venv-lint/bin/ruff format --check .
fi
