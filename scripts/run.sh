#!/usr/bin/env bash
# Set up Ferry in .venv and start it. Until the desktop window lands (issue: dual-pane app) this
# opens the command line: `ferry --help` lists what it can do; arguments are passed through.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
if [ $# -eq 0 ]; then set -- --help; fi
exec .venv/bin/ferry "$@"
