"""Helpers for the watch tests: a writer process and the ``ferry watch`` process beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

WRITER = Path(__file__).with_name("writer.py")


def start_writer(*args: str | os.PathLike[str], done: Path | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ)
    if done is not None:
        env["WRITER_DONE"] = str(done)
    return subprocess.Popen(
        [sys.executable, str(WRITER), *(os.fspath(a) for a in args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def writer_result(proc: subprocess.Popen[str], timeout: float = 60) -> dict[str, str]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    data: dict[str, str] = json.loads(out)
    return data


def wait_for_event(proc: subprocess.Popen[str], name: str) -> dict[str, Any]:
    """Read ``ferry watch --json`` lines until the event ``name`` (the watch is then set up)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if not line.strip():
            continue
        obj: dict[str, Any] = json.loads(line)
        if obj.get("event") == name:
            return obj
    raise AssertionError(f"ferry watch ended before '{name}': {proc.stderr.read() if proc.stderr else ''}")
