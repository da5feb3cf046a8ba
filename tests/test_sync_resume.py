"""A --delete sync stopped after its comparison (the process killed) is finished by
``ferry queue run``: its copies, then its deletions, only once every copy verified, never twice;
a copy that fails keeps every deletion from happening. (Issue 23: the engine, not the process
that compared, makes the deletions.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import Ferry, file_digests, put
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


def test_queue_add_sync_compares_when_the_queue_runs_it(ferry: Ferry, tmp_path: Path) -> None:
    """A nightly sync is one line: 'ferry queue add SRC DST --sync --delete' now, and whatever runs
    the queue (cron's 'ferry queue run', the window) compares then, copies what differs *then*,
    and deletes after every copy verified."""
    src, dst = trees(tmp_path)
    res = ferry.ok("queue", "add", str(src), str(dst), "--sync", "--delete", "--json")
    job = int(json.loads(res.stdout)["id"])
    put(src, "later.txt", b"written after the sync was queued")  # the comparison sees it: it runs later
    assert (dst / "extra.txt").exists()  # nothing compared or changed at add time
    ferry.ok("queue", "run")
    assert (dst / "later.txt").read_bytes() == b"written after the sync was queued"
    assert (dst / "size.txt").read_bytes() == b"longer at src"
    assert (dst / "sneaky.dat").read_bytes() == b"BBBB"  # same size and time: size-mtime leaves it, as ferry sync
    assert not (dst / "extra.txt").exists() and not (dst / "gone").exists()
    shown = ferry.ok("queue", "show", str(job)).stdout
    assert "2 file(s) deleted" in shown, shown
    a, b = file_digests(src), file_digests(dst)
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a if k != "sneaky.dat")


def test_a_queued_sync_that_would_empty_the_destination_copies_and_deletes_nothing(
    ferry: Ferry, tmp_path: Path
) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    put(src, "one.txt", b"1")
    for i in range(6):
        put(dst, f"old{i}.txt", b"old")
    res = ferry.ok("queue", "add", str(src), str(dst), "--sync", "--delete", "--json")
    job = int(json.loads(res.stdout)["id"])
    ferry.ok("queue", "run")
    assert (dst / "one.txt").read_bytes() == b"1"
    assert sorted(p.name for p in dst.iterdir()) == [
        "old0.txt",
        "old1.txt",
        "old2.txt",
        "old3.txt",
        "old4.txt",
        "old5.txt",
        "one.txt",
    ]
    shown = ferry.ok("queue", "show", str(job)).stdout
    assert "nothing will be deleted" in shown and "more than half" in shown, shown


def test_queue_add_sync_bad_input(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = trees(tmp_path)
    for args, says in (
        ((str(src), str(src / "keep"), str(dst), "--sync"), "one SOURCE"),
        ((str(src), str(dst), "--delete"), "go with --sync"),
        ((str(src), str(dst), "--sync", "--max-delete", "3"), "give --delete too"),
        ((str(src), str(dst), "--sync", "--delete", "--verify", "none"), "verified"),
        ((str(tmp_path / "nope"), str(dst), "--sync"), "not found"),
    ):
        res = ferry("queue", "add", *args)
        assert res.returncode == 2 and says in res.stderr, (args, res.stderr)
    assert json.loads(ferry.ok("queue", "list", "--json").stdout) == []  # no job was recorded
