"""``ferry sync`` between local folders, run as a user would: one verified job in the queue,
deletions only after every copy verified, ``--backup-dir``, ``--dry-run``, and the guards
against a wrong path (empty source, more than half of the destination, ``--max-delete``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ferry.transfers.store import Store
from helpers import Ferry, describe, file_digests, put, snapshot

T = 1_700_000_000_123_456_789


def trees(tmp_path: Path) -> tuple[Path, Path]:
    """SRC and DST sharing four identical files, then each difference a sync must handle."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    for root in (src, dst):
        for i in range(4):
            put(root, f"keep/f{i}.txt", f"same {i}\n".encode())
    put(src, "new/missing.txt", b"missing at dst")
    put(src, "size.txt", b"longer at src")
    put(dst, "size.txt", b"short")
    put(src, "time.txt", b"same bytes")
    put(dst, "time.txt", b"same bytes", T - 10**9)
    put(src, "sneaky.dat", b"AAAA")
    put(dst, "sneaky.dat", b"BBBB")
    put(dst, "extra.txt", b"src no longer has me")
    put(dst, "gone/deeper/old.bin", b"old")
    return src, dst


def result(stdout: str) -> dict[str, Any]:
    return [json.loads(x) for x in stdout.splitlines() if '"event": "result"' in x][-1]  # type: ignore[no-any-return]


def test_sync_copies_what_differs_as_one_verified_job_and_deletes_after(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = trees(tmp_path)
    res = ferry("sync", "--delete", "--by", "checksum", "--max-delete", "2", "--json", src, dst)
    assert res.returncode == 0, describe(res)
    assert file_digests(dst) == file_digests(src)
    out = result(res.stdout)
    # By checksum, time.txt (same bytes, other time) is the same file: not sent again.
    assert (out["copy"], out["replace"], out["delete"], out["deleted"]) == (1, 2, 2, 2)
    store = Store(ferry.home / "data" / "queue.db")
    try:
        job = store.job(out["job"])
        assert job.state == "done" and job.options.label == "sync"
        files = list(store.tasks(job.id, kinds=["file"]))
        assert len(files) == 3 and all(t.checksum_verified for t in files)  # only what differed was sent
        assert store.job_value(job.id, "sync") is not None
    finally:
        store.close()
    # A second run finds nothing to do and creates no job.
    res = ferry("sync", "--delete", "--by", "checksum", "--json", src, dst)
    assert res.returncode == 0 and result(res.stdout)["job"] is None, describe(res)


def test_size_mtime_misses_same_size_same_time_content(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = trees(tmp_path)
    res = ferry("sync", src, dst)
    assert res.returncode == 0, describe(res)
    assert (dst / "sneaky.dat").read_bytes() == b"BBBB"  # size and time agree: left alone
    assert (dst / "time.txt").stat().st_mtime_ns == T and (dst / "size.txt").read_bytes() == b"longer at src"
    assert (dst / "extra.txt").exists()  # no --delete: nothing removed


def test_dry_run_changes_nothing(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = trees(tmp_path)
    before = snapshot(dst)
    res = ferry("sync", "--dry-run", "--delete", "--by", "checksum", "--max-delete", "5", src, dst)
    assert res.returncode == 0, describe(res)
    assert snapshot(dst) == before
    lines = res.stdout.splitlines()
    assert "copy    new/missing.txt (14 B)" in lines
    assert {"replace sneaky.dat (4 B)", "delete  extra.txt", "delete  gone/deeper/old.bin"} <= set(lines)
    assert "nothing was changed" in lines[-1]
    assert not (ferry.home / "data" / "queue.db").exists() or not Store(ferry.home / "data" / "queue.db").jobs()


def test_a_failed_copy_prevents_every_deletion(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = trees(tmp_path)
    # A file at the source where the destination has a folder: that copy cannot succeed.
    put(src, "blocker", b"a file")
    put(dst, "blocker/inside.txt", b"a folder at dst")
    res = ferry("sync", "--delete", "--max-delete", "10", "--json", src, dst)
    assert res.returncode == 1, describe(res)
    out = result(res.stdout)
    assert out["outcomes"]["failed"] == 1 and out["deleted"] == 0 and "nothing was deleted" in out["refused"]
    assert (dst / "extra.txt").exists() and (dst / "gone" / "deeper" / "old.bin").exists()
    assert (dst / "blocker" / "inside.txt").exists()
    assert (dst / "new" / "missing.txt").exists()  # the other copies went ahead


def test_backup_dir_keeps_what_is_deleted(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = trees(tmp_path)
    backup = tmp_path / "trash"
    res = ferry("sync", "--delete", "--backup-dir", backup, "--max-delete", "2", src, dst)
    assert res.returncode == 0, describe(res)
    assert not (dst / "extra.txt").exists() and not (dst / "gone").exists()
    assert (backup / "extra.txt").read_bytes() == b"src no longer has me"
    assert (backup / "gone" / "deeper" / "old.bin").read_bytes() == b"old"
    assert "moved to" in res.stderr
    bad = ferry("sync", "--delete", "--backup-dir", dst / "inside", src, dst)
    assert bad.returncode == 2 and "must not be inside the destination" in bad.stderr, describe(bad)


def test_empty_source_refuses_to_delete(ferry: Ferry, tmp_path: Path) -> None:
    _src, dst = trees(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    before = snapshot(dst)
    res = ferry("sync", "--delete", "--max-delete", "1000", empty, dst)
    assert res.returncode == 2 and "is empty: refusing to delete" in res.stderr, describe(res)
    assert snapshot(dst) == before


def test_more_than_half_needs_max_delete(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = trees(tmp_path)
    for i in range(10):
        put(dst, f"extra/{i}.txt", b"x")
    before = snapshot(dst)
    res = ferry("sync", "--delete", src, dst)
    assert res.returncode == 2 and "more than half" in res.stderr and "--max-delete 12" in res.stderr, describe(res)
    res = ferry("sync", "--delete", "--max-delete", "11", src, dst)
    assert res.returncode == 2 and "more than --max-delete 11" in res.stderr, describe(res)
    assert snapshot(dst) == before
    res = ferry("sync", "--delete", "--max-delete", "12", src, dst)
    assert res.returncode == 0, describe(res)
    assert not (dst / "extra").exists()


def test_case_only_rename(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = trees(tmp_path)
    put(src, "Data.txt", b"d")
    put(dst, "data.txt", b"d")
    res = ferry("sync", "--delete", "--max-delete", "3", src, dst)
    assert res.returncode == 0, describe(res)
    assert (dst / "Data.txt").read_bytes() == b"d" and not (dst / "data.txt").exists()


def test_missing_destination_is_created(ferry: Ferry, tmp_path: Path) -> None:
    src, _ = trees(tmp_path)
    dst = tmp_path / "fresh" / "copy"
    res = ferry("sync", "--delete", src, dst)
    assert res.returncode == 0, describe(res)
    assert file_digests(dst) == file_digests(src)


def test_bad_input(ferry: Ferry, tmp_path: Path) -> None:
    src, dst = trees(tmp_path)
    assert ferry("sync", "--backup-dir", tmp_path / "b", src, dst).returncode == 2
    assert ferry("sync", "--delete", "--verify", "none", src, dst).returncode == 2
    res = ferry("sync", src, src / "keep")
    assert res.returncode == 2 and "overlap" in res.stderr, describe(res)
    res = ferry("sync", tmp_path / "nope", dst)
    assert res.returncode == 2 and "Source not found" in res.stderr, describe(res)


# ---- the engine's side, driven directly ----------------------------------------------------


def _plan(src: Path, dst: Path, *, delete: bool = True) -> tuple[Any, Any, Any]:
    from ferry.backends.registry import BackendPool
    from ferry.core.address import parse_address
    from ferry.transfers.compare import By
    from ferry.transfers.sync import plan_sync

    pool = BackendPool()
    s, d = parse_address(str(src)), parse_address(str(dst))
    return pool, (s, d), plan_sync(pool, s, d, by=By.SIZE_MTIME, delete=delete)


def test_a_source_that_disappears_mid_sync_prevents_deletions(tmp_path: Path) -> None:
    from ferry.backends.registry import BackendPool
    from ferry.core.address import parse_address
    from ferry.transfers import sync
    from ferry.transfers.compare import By
    from ferry.transfers.options import JobOptions
    from ferry.transfers.scheduler import RunConfig, Runner

    src, dst = trees(tmp_path)
    pool = BackendPool()
    s, d = parse_address(str(src)), parse_address(str(dst))
    store = Store(tmp_path / "q.db")
    try:
        options = JobOptions(recursive=True, on_conflict="overwrite", label="sync")
        job = sync.new_sync_job(store, s, d, sync.sync_root(pool, s, d), options)
        assert store.job(job).state == "paused"  # held while the comparison fills it
        plan = sync.plan_sync(pool, s, d, by=By.SIZE_MTIME, delete=True, sink=sync.task_sink(store, job))
        assert plan.tasks == [] and plan.tasks_total == 4  # in the queue (new/, three files), not in memory
        (src / "new" / "missing.txt").unlink()  # gone between the comparison and its copy
        sync.start_sync_job(store, job, {})
        Runner(store, RunConfig(job_ids=[job], parallel=2), pool=pool).run()
        refusal = sync.deletion_refusal(store, job, options)
        assert refusal is not None and "1 failed" in refusal
        assert store.outcome_counts(job).failed_total == 1
    finally:
        store.close()
        pool.close()


def test_a_file_changed_since_the_comparison_is_kept(tmp_path: Path) -> None:
    from ferry.transfers.sync import apply_deletions

    src, dst = trees(tmp_path)
    pool, _ends, plan = _plan(src, dst)
    put(dst, "extra.txt", b"rewritten after the comparison", T + 5)
    done = apply_deletions(plan, None)
    pool.close()
    assert (dst / "extra.txt").read_bytes() == b"rewritten after the comparison"
    assert not (dst / "gone").exists()
    assert (done.deleted, done.kept) == (1, 1) and "changed since the comparison" in done.errors[0]
