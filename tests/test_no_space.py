"""A full destination pauses the job (not fails it); after making space the job completes.

On a small tmpfs when we may mount one (root); otherwise, and in any case once, on the memory
backend with an injected "no space" error at the same point.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.backends.memory import reset_memory_stores
from ferry.core.errors import NoSpace
from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import Store
from helpers import Ferry, MemSite, describe, mem_job, partials, result_event, sha256_file, write_random

MiB = 1 << 20


def _mount(path: Path, size: str) -> bool:
    path.mkdir(exist_ok=True)
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], capture_output=True, check=False
    )
    return res.returncode == 0


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path | None]:
    """A 2 MiB tmpfs at tmp_path/small, or None when mounting is not possible here."""
    mnt = tmp_path / "small"
    mounted = _mount(mnt, "2m")
    try:
        yield mnt if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", str(mnt)], check=False)
            if os.path.ismount(mnt):
                subprocess.run(["umount", "-l", str(mnt)], check=False)


def no_space_on_memory(ferry: Ferry) -> None:
    """The same scenario through the engine API: the writer fails with NoSpace after 2 MiB."""
    site = MemSite(f"nospace-{uuid.uuid4().hex[:10]}")
    store = Store(ferry.home / "data" / "queue.db")
    try:
        data = os.urandom(5 * MiB)
        site.put("/src/big.bin", data)
        site.put("/src/small.txt", b"small")
        site.store.fail_write_after(
            "/dst/big.bin", 2 * MiB, NoSpace("No space left on the destination: /dst/big.bin"), times=1
        )
        job = mem_job(store, [site.url("/src/big.bin"), site.url("/src/small.txt")], site.url("/dst/"))
        summary = Runner(store, RunConfig(parallel=1, job_ids=[job])).run()
        assert summary.jobs == {job: "paused"}
        j = store.job(job)
        assert j.state == "paused" and "full" in (j.message or "") and "free some space" in (j.message or "")
        assert not site.exists("/dst/big.bin")  # nothing truncated under the final name
        assert [size for _, size in site.partials("/dst")] == [2 * MiB]  # kept, to resume
        assert not any(t.state == "failed" for t in store.tasks(job))
        # "Make space", then resume as the user would and run again.
        site.store.clear_faults()
        ferry.ok("queue", "resume", str(job))
        assert Runner(store, RunConfig(parallel=1, job_ids=[job])).run().jobs == {job: "done"}
        assert site.get("/dst/big.bin") == data and site.get("/dst/small.txt") == b"small"
        assert site.partials() == []
    finally:
        store.close()
        reset_memory_stores(site.name)


def _assert_paused_for_space(ferry: Ferry, res: subprocess.CompletedProcess[str], job_id: int, dst: Path) -> None:
    assert res.returncode == 1, describe(res)
    job = ferry.job(job_id)
    assert job["state"] == "paused", job
    assert "full" in job["message"] and "free some space" in job["message"]
    assert job["files_failed"] == 0
    assert not (dst / "big.bin").exists()  # no truncated file under its final name
    parts = partials(dst)
    for part in parts:  # other files stopped by the full disk too are not under their names either
        assert not (dst / part.name[1:].rsplit(".", 2)[0]).exists(), part
    (big,) = [p for p in parts if p.name.startswith(".big.bin.")]
    assert big.stat().st_size > 0  # what fitted is kept for resuming


@pytest.mark.mount
def test_cp_into_a_full_tmpfs_pauses_then_resumes(ferry: Ferry, tmp_path: Path, tmpfs: Path | None) -> None:
    if tmpfs is None:
        no_space_on_memory(ferry)
        return
    digest = write_random(tmp_path / "big.bin", 5 * MiB)
    res = ferry("cp", "--json", tmp_path / "big.bin", tmpfs)
    result = result_event(res.stdout)
    assert result["state"] == "paused" and result["exit_code"] == 1
    assert "full" in result["message"]
    _assert_paused_for_space(ferry, res, result["job"], tmpfs)

    # Make space: grow the file system (the partial file stays), then resume and run.
    subprocess.run(["mount", "-o", "remount,size=16m", str(tmpfs)], check=True)
    ferry.ok("queue", "resume", str(result["job"]))
    res = ferry("queue", "run", "--json")
    assert res.returncode == 0, describe(res)
    assert result_event(res.stdout)["jobs"] == {str(result["job"]): "done"}
    assert sha256_file(tmpfs / "big.bin") == digest
    assert partials(tmpfs) == []
    assert ferry.job(result["job"])["state"] == "done"


@pytest.mark.mount
def test_queue_run_full_after_a_filler_then_space_freed(ferry: Ferry, tmp_path: Path, tmpfs: Path | None) -> None:
    if tmpfs is None:
        no_space_on_memory(ferry)
        return
    subprocess.run(["mount", "-o", "remount,size=8m", str(tmpfs)], check=True)
    filler = tmpfs / "filler"
    filler.write_bytes(b"\1" * (5 * MiB))
    (tmp_path / "src").mkdir()
    digest = write_random(tmp_path / "src" / "big.bin", 5 * MiB)
    (tmp_path / "src" / "a.txt").write_bytes(b"small")
    ferry.ok("queue", "add", tmp_path / "src" / "a.txt", tmp_path / "src" / "big.bin", tmpfs)
    res = ferry("queue", "run", "--json")
    assert result_event(res.stdout)["jobs"] == {"1": "paused"}
    _assert_paused_for_space(ferry, res, 1, tmpfs)

    filler.unlink()
    ferry.ok("queue", "resume", "1")
    res = ferry("queue", "run")
    assert res.returncode == 0, describe(res)
    assert sha256_file(tmpfs / "big.bin") == digest
    assert (tmpfs / "a.txt").read_bytes() == b"small"
    assert partials(tmpfs) == []
    assert ferry.job(1)["state"] == "done" and ferry.job(1)["files_done"] == 2


def test_no_space_pauses_on_the_memory_backend(ferry: Ferry) -> None:
    no_space_on_memory(ferry)
