#!/usr/bin/env bash
# Set up everything and run the whole test suite, with the linters CI runs.
# Usage: scripts/test.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/system-packages.sh
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy
echo "== lint-imports (layers, docs/architecture.md)"
.venv/bin/lint-imports --no-cache
echo "== pytest"
exec .venv/bin/python -m pytest "$@"
