"""QA of issue 23 from the command line: ``ferry sync --bwlimit RATE`` limits the sync's copies.

The option was accepted (and documented: "--parallel, --bwlimit and --json work as in ferry
cp") but never reached the job, so a sync ran at full speed, silently.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from helpers import Ferry, describe


def test_sync_bwlimit_limits_the_job(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    for i in range(3):
        (src / f"f{i}").write_bytes(os.urandom(1 << 20))
    started = time.monotonic()
    res = ferry("sync", "--bwlimit", "1M", src, dst)
    elapsed = time.monotonic() - started
    assert res.returncode == 0, describe(res)
    assert all((dst / f"f{i}").read_bytes() == (src / f"f{i}").read_bytes() for i in range(3))
    shown = ferry("queue", "show", "1")
    assert "bwlimit 1.0 MiB/s" in shown.stdout, describe(shown)
    assert elapsed >= 1.5, elapsed  # 3 MiB at 1 MiB/s (the first second may come at once)
