#!/usr/bin/env bash
# Set up everything and run the whole test suite, with the linters CI runs.
# Usage: scripts/test.sh [pytest arguments]
#        scripts/test.sh --fast [pytest arguments]
# --fast is the inner loop (under a minute): ruff, mypy, lint-imports, then the tests that need no
# server, display or Globus fake (scripts/fast_tier.py says which). It sets up only what is missing
# or older than pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi
stamp=.venv/.test-extras-installed
if [ "$fast" = 0 ] || [ ! -x .venv/bin/lint-imports ] || [ ! "$stamp" -nt pyproject.toml ]; then
  bash scripts/system-packages.sh
  PY=${PYTHON:-python3}
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy
echo "== lint-imports (layers, docs/architecture.md)"
.venv/bin/lint-imports --no-cache
echo "== pytest"
if [ "$fast" = 1 ]; then
  status=0
  .venv/bin/python scripts/fast_tier.py "$@" || status=$?
  echo "== fast tier: ${SECONDS} s"
  exit "$status"
fi
exec .venv/bin/python -m pytest "$@"
