"""``kill -9`` in the middle of a transfer, then ``ferry queue run``: finished, verified, resumed.

The big file is bandwidth-limited so the kill lands mid-file. Resumption (rather than a restart
from zero) is shown two ways: the partial file never shrinks below what the killed run left
(a restart truncates it), and the second run takes about the time of the missing part only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from helpers import Ferry, describe, file_digests, partials, result_event, stop, wait_until, write_random

MiB = 1 << 20


def make_src(root: Path, big: int) -> None:
    write_random(root / "big.bin", big)
    for i in range(6):
        p = root / f"small{i % 2}" / f"s{i}.dat"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(10_000 + i))


def big_partials(root: Path) -> list[Path]:
    return [p for p in partials(root) if p.name.startswith(".big.bin.")]


class PartialWatch:
    """Samples the size of big.bin's partial file until stopped; keeps the smallest seen."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.smallest: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in big_partials(self.root):
                try:
                    size = p.stat().st_size
                except FileNotFoundError:
                    continue
                self.samples += 1
                self.smallest = size if self.smallest is None else min(self.smallest, size)
            time.sleep(0.005)

    def __enter__(self) -> PartialWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def kill_mid_transfer(proc: subprocess.Popen[str], dst: Path, at_least: int) -> int:
    """SIGKILL ``proc`` once big.bin's partial file holds ``at_least`` bytes; returns its size."""

    def partial_big_enough() -> bool:
        assert proc.poll() is None, f"ferry finished before it could be killed: {proc.communicate()}"
        return any(p.stat().st_size >= at_least for p in big_partials(dst) if p.exists())

    try:
        wait_until(partial_big_enough, 60, 0.01, "a partial file with some bytes")
    finally:
        stop(proc, signal.SIGKILL)  # reaped: a dead runner's pid must not look alive
    assert proc.returncode == -signal.SIGKILL
    (part,) = big_partials(dst)
    assert not (part.parent / "big.bin").exists()  # nothing under the final name
    return part.stat().st_size


def test_queue_run_killed_mid_transfer_resumes(ferry: Ferry, tmp_path: Path) -> None:
    size, rate = 160 * MiB, 40 * MiB
    make_src(tmp_path / "src", size)
    dst = tmp_path / "dst"
    ferry.ok("queue", "add", "-r", tmp_path / "src", f"{dst}/")

    proc = ferry.popen("queue", "run", "--bwlimit", "40M")
    left = kill_mid_transfer(proc, dst, size // 2)
    assert left < size
    assert ferry.jobs()[0]["state"] != "done"

    with PartialWatch(dst) as watch:
        res = ferry("queue", "run", "--json", "--bwlimit", "40M", timeout=120)
    assert res.returncode == 0, describe(res)
    result = result_event(res.stdout)
    assert result["jobs"] == {"1": "done"} and result["exit_code"] == 0

    # Every file verified: the same bytes at both ends, no partial file left.
    assert file_digests(dst / "src") == file_digests(tmp_path / "src")
    assert partials(dst) == []
    (job,) = ferry.jobs()
    assert job["state"] == "done" and job["files_done"] == 7 and job["files_failed"] == 0

    # Resumed, not restarted: the partial never went back below what the killed run left ...
    assert watch.samples > 0 and watch.smallest is not None
    assert watch.smallest >= left, (watch.smallest, left)
    # ... and only the missing part went through the 40 MiB/s limiter (all of it: ~3.75 s).
    assert result["elapsed"] < (size - left) / rate + 1.25, (result["elapsed"], left)


def test_cp_killed_mid_transfer_is_finished_by_queue_run(ferry: Ferry, tmp_path: Path) -> None:
    size = 64 * MiB
    make_src(tmp_path / "src", size)
    dst = tmp_path / "dst"
    proc = ferry.popen("cp", "-r", "--bwlimit", "32M", tmp_path / "src", f"{dst}/")
    left = kill_mid_transfer(proc, dst, 16 * MiB)

    (job,) = ferry.jobs()  # the copy was recorded as a job, so it can be finished later
    assert job["state"] != "done"
    with PartialWatch(dst) as watch:
        res = ferry("queue", "run", "--json", timeout=120)
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["jobs"] == {str(job["id"]): "done"}
    assert file_digests(dst / "src") == file_digests(tmp_path / "src")
    assert partials(dst) == []
    assert ferry.job(job["id"])["state"] == "done"
    if watch.smallest is not None:
        assert watch.smallest >= left


def test_killed_job_can_be_cancelled_and_its_partial_is_removed(ferry: Ferry, tmp_path: Path) -> None:
    make_src(tmp_path / "src", 32 * MiB)
    dst = tmp_path / "dst"
    proc = ferry.popen("cp", "-r", "--bwlimit", "16M", tmp_path / "src", f"{dst}/")
    kill_mid_transfer(proc, dst, 4 * MiB)
    res = ferry.ok("queue", "cancel", "1")
    assert "Cancelled job 1" in res.stdout
    assert partials(dst) == []
    assert not (dst / "src" / "big.bin").exists()
    assert ferry.job(1)["state"] == "cancelled"
    res = ferry("queue", "run")
    assert res.returncode == 0 and "Nothing to run" in res.stderr


def test_cp_interrupted_by_sigterm_keeps_its_partial_and_resumes(ferry: Ferry, tmp_path: Path) -> None:
    make_src(tmp_path / "src", 32 * MiB)
    dst = tmp_path / "dst"
    proc = ferry.popen("cp", "-r", "--bwlimit", "16M", tmp_path / "src", f"{dst}/")

    def under_way() -> bool:
        assert proc.poll() is None, proc.communicate()
        return any(p.stat().st_size >= 4 * MiB for p in big_partials(dst) if p.exists())

    try:
        wait_until(under_way, 60, 0.01, "a partial file with some bytes")
    finally:
        _, err = stop(proc, signal.SIGTERM)
    assert proc.returncode == 130, err  # stopped cleanly, reported as interrupted
    (part,) = big_partials(dst)
    left = part.stat().st_size
    (job,) = ferry.jobs()
    assert job["state"] == "queued" and "interrupted" in job["message"]
    with PartialWatch(dst) as watch:
        res = ferry("queue", "run", timeout=120)
    assert res.returncode == 0, describe(res)
    assert file_digests(dst / "src") == file_digests(tmp_path / "src")
    assert partials(dst) == []
    assert watch.smallest is None or watch.smallest >= left
