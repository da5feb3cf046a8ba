"""A --delete sync stopped after its comparison (the process killed) is finished by
``ferry queue run``: its copies, then its deletions, only once every copy verified, never twice;
a copy that fails keeps every deletion from happening. (Issue 23: the engine, not the process
that compared, makes the deletions.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import Ferry, put
from test_sync import trees

# What 'ferry sync SRC DST --delete' does up to the start of its job, then the process dies (no
# cleanup, no deletions): the job is left running under a runner that no longer exists.
COMPARED_THEN_KILLED = """
import os, sys
from ferry.backends.registry import BackendPool
from ferry.core.address import parse_address
from ferry.transfers import sync
from ferry.transfers.compare import By
from ferry.transfers.options import JobOptions
from ferry.transfers.store import Store

src, dst = parse_address(sys.argv[1]), parse_address(sys.argv[2])
store, pool = Store(), BackendPool()
options = JobOptions(recursive=True, verify="sha256", on_conflict="overwrite", label="sync")
plan, job = sync.queue_sync(pool, store, src, dst, by=By.SIZE_MTIME, options=options, delete=True)
print(job, plan.delete_files, flush=True)
os._exit(0)
"""


def compare_then_die(ferry: Ferry, src: Path, dst: Path) -> int:
    done = subprocess.run(
        [sys.executable, "-c", COMPARED_THEN_KILLED, str(src), str(dst)],
        env=ferry.env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    job, deletions = (int(x) for x in done.stdout.split())
    assert deletions == 2  # extra.txt and gone/deeper/old.bin
    return job


def test_queue_run_finishes_a_killed_sync_then_makes_its_deletions(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = trees(tmp_path)
    job = compare_then_die(ferry, src, dst)
    assert (dst / "extra.txt").exists() and (dst / "gone").exists()  # nothing deleted before the copies
    ferry.ok("queue", "run")
    assert (dst / "new" / "missing.txt").read_bytes() == b"missing at dst"
    assert (dst / "size.txt").read_bytes() == b"longer at src"
    assert not (dst / "extra.txt").exists()
    assert not (dst / "gone").exists()
    shown = ferry.ok("queue", "show", str(job)).stdout
    assert "2 file(s) deleted" in shown, shown
    # Never twice: a second run finds nothing to do and deletes nothing more.
    put(dst, "extra.txt", b"made again after the sync")
    ferry.ok("queue", "run")
    assert (dst / "extra.txt").read_bytes() == b"made again after the sync"


def test_a_failed_copy_in_the_finishing_run_keeps_every_deletion(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = trees(tmp_path)
    job = compare_then_die(ferry, src, dst)
    (src / "new" / "missing.txt").unlink()  # gone before 'ferry queue run' copies it
    res = ferry("queue", "run")
    assert res.returncode != 0
    assert (dst / "extra.txt").read_bytes() == b"src no longer has me"
    assert (dst / "gone" / "deeper" / "old.bin").exists()
    shown = ferry.ok("queue", "show", str(job)).stdout
    assert "nothing deleted" in shown and "1 failed" in shown, shown
