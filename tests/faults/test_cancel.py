"""Cancelling and failing leave nothing behind (issue 18): ``ferry queue cancel`` aborts the job's
unfinished S3 multipart uploads and removes partial files (local, SFTP), also for a job that
already failed; a source that cannot be read leaves no empty partial file at the destination."""

from __future__ import annotations

import errno
import signal
from pathlib import Path

from faults.conftest import S3Site, SftpSite
from ferry.core.errors import PermissionDenied
from ferry.transfers import control
from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import Store
from helpers import Ferry, MemSite, describe, mem_job, partials, stop, wait_until, write_random

MiB = 1 << 20


def _run(store: Store, job: int) -> str:
    summary = Runner(store, RunConfig(parallel=2, backoff_base=0.01, job_ids=[job], max_attempts=1)).run()
    return summary.jobs[job]


def test_unreadable_source_leaves_no_empty_partial(site: MemSite, store: Store, tmp_path: Path) -> None:
    site.put("/src/secret.bin", b"x" * 100_000)
    site.put("/src/open.bin", b"y" * 1000)
    denied = PermissionError(errno.EACCES, "Permission denied", "/src/secret.bin")
    site.store.fail_on("open_read", "/src/secret.bin", denied, times=None)
    dst = tmp_path / "dst"
    job = mem_job(store, [site.url("/src/")], f"{dst}/", recursive=True)
    assert _run(store, job) == "failed"
    assert (dst / "src" / "open.bin").read_bytes() == b"y" * 1000
    assert not (dst / "src" / "secret.bin").exists()
    assert partials(dst) == []  # before: an empty .secret.bin.N.ferry-part stayed
    (task,) = [t for t in store.tasks(job, kinds=("file",)) if t.state == "failed"]
    assert task.rel == "src/secret.bin" and task.error_kind == "permission-denied"


def test_failed_job_can_be_cancelled_its_partials_removed_and_cleared(site: MemSite, store: Store) -> None:
    site.put("/src/big.bin", b"z" * 300_000)
    site.store.fail_write_after("/dst/big.bin", 100_000, PermissionDenied("Permission denied: /dst/big.bin"))
    job = mem_job(store, [site.url("/src/big.bin")], site.url("/dst/"))
    assert _run(store, job) == "failed"
    assert [size for _, size in site.partials("/dst")] == [100_000]  # kept for a retry ...
    (change,) = control.cancel(store, [job])
    assert change.applied and change.state == "failed" and not change.problem
    assert site.partials("/dst") == []  # ... and gone once the job is given up
    assert store.job(job).state == "cancelled"
    assert control.clear(store, [job]) == 1
    assert store.jobs() == []


def test_queue_cancel_of_a_failed_job_from_the_command_line(ferry: Ferry, tmp_path: Path) -> None:
    (tmp_path / "gone.txt").write_bytes(b"soon gone")
    ferry.ok("queue", "add", tmp_path / "gone.txt", f"{tmp_path / 'dst'}/")
    (tmp_path / "gone.txt").unlink()
    assert ferry("queue", "run").returncode == 1
    res = ferry("queue", "cancel", "1")
    assert res.returncode == 0 and "Cancelled job 1" in res.stdout, describe(res)
    assert ferry.job(1)["state"] == "cancelled"
    ferry.ok("queue", "clear", "1")
    assert ferry.jobs() == []


def test_cancel_of_a_running_s3_upload_aborts_its_multipart_upload(s3_site: S3Site, tmp_path: Path) -> None:
    site, ferry = s3_site, s3_site.ferry
    write_random(tmp_path / "big.bin", 40 * MiB)
    ferry.ok("queue", "add", tmp_path / "big.bin", site.url("in/"))
    client = site.server.client()

    def uploads() -> list[object]:
        return list(client.list_multipart_uploads(Bucket=site.bucket).get("Uploads", []))

    proc = ferry.popen("queue", "run", "--bwlimit", "8M")
    try:
        wait_until(lambda: uploads() and site.proxy.bytes > 12 * MiB, 60, 0.05, "a multipart upload under way")
        res = ferry("queue", "cancel", "1")
        assert res.returncode == 0, describe(res)
        out, err = proc.communicate(timeout=60)  # the runner sees the cancel and stops
    finally:
        if proc.poll() is None:
            stop(proc, signal.SIGKILL)
    assert ferry.job(1)["state"] == "cancelled", (out, err)
    assert uploads() == []  # before: the upload and its parts stayed (storage billed, forever)
    assert "Contents" not in client.list_objects_v2(Bucket=site.bucket)


def test_cancel_after_a_kill_removes_the_sftp_partial(sftp_site: SftpSite, tmp_path: Path) -> None:
    site, ferry = sftp_site, sftp_site.ferry
    write_random(tmp_path / "big.bin", 32 * MiB)
    ferry.ok("queue", "add", tmp_path / "big.bin", site.url())
    proc = ferry.popen("queue", "run", "--bwlimit", "8M")
    try:
        wait_until(lambda: any(p.stat().st_size > 4 * MiB for p in partials(site.remote)), 60, 0.05, "a partial")
    finally:
        stop(proc, signal.SIGKILL)
    res = ferry("queue", "cancel", "1")
    assert res.returncode == 0, describe(res)
    assert partials(site.remote) == [] and not (site.remote / "big.bin").exists()
