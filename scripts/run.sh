#!/usr/bin/env bash
# Set up Ferry in .venv and start it. With no arguments this opens the desktop window (on a
# machine without a display it says so and points at `ferry --help`); `--demo` opens it connected
# to throwaway loopback SFTP and S3 servers; any other arguments run the command line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/system-packages.sh app   # Qt's system libraries and fonts, only when missing
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
exec .venv/bin/ferry "$@"
