#!/usr/bin/env bash
# Set up Ferry in .venv and start it. With no arguments this opens the desktop window (on a
# machine without a display it says so and points at `ferry --help`); `--demo` opens it connected
# to throwaway loopback SFTP and S3 servers; any other arguments run the command line.
#
# Setup (Qt's system libraries, the venv, `pip install -e '.[demo]'`) runs only when it is missing
# or older than pyproject.toml, as `scripts/test.sh --fast` does: a stamp in .venv records the last
# one, so an unchanged checkout starts the window at once. The `demo` extra is the demo's S3 server
# (moto's, started in-process by `ferry --demo`). FERRY_SETUP=1 forces the setup again.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.run-installed
if [ "${FERRY_SETUP:-0}" = 1 ] || [ ! -x .venv/bin/ferry ] || [ ! "$stamp" -nt pyproject.toml ]; then
  bash scripts/system-packages.sh app   # Qt's system libraries and fonts, only when missing
  PY=${PYTHON:-python3}
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[demo]'
  touch "$stamp"
fi
exec .venv/bin/ferry "$@"
