"""The store's batched writes: one executemany per planner batch must still say exactly which
tasks were new (a re-plan after a crash counts only those), whatever else is in the queue."""

from __future__ import annotations

from pathlib import Path

from ferry.transfers.options import JobOptions
from ferry.transfers.store import NewTask, Store


def _task(name: str, size: int = 1) -> NewTask:
    return NewTask("file", f"/src/{name}", f"/dst/{name}", name, size, None)


def test_add_tasks_reports_only_new_rows_with_other_jobs_and_repeats(tmp_path: Path) -> None:
    store = Store(tmp_path / "queue.db")
    try:
        opts = JobOptions(recursive=True, on_conflict="overwrite")
        a = store.create_job(["/src"], "/dst", opts, [("/src", "/dst", "src")])
        b = store.create_job(["/src"], "/dst", opts, [("/src", "/dst", "src")])
        first = [_task(f"f{i}") for i in range(5)]
        assert store.add_tasks(a, first) == first
        # Job b's rows get higher ids than a's: they must not count as new for a.
        assert store.add_tasks(b, first[:3]) == first[:3]
        mixed = [first[1], _task("new1"), first[4], _task("new2"), _task("new1"), _task("undecodable\udcff")]
        assert store.add_tasks(a, mixed) == [mixed[1], mixed[3], mixed[5]]
        assert store.add_tasks(a, mixed) == []
        srcs = sorted(t.src for t in store.tasks(a))
        assert srcs == sorted([*(t.src for t in first), "/src/new1", "/src/new2", "/src/undecodable\udcff"])
        assert len(list(store.tasks(b))) == 3
    finally:
        store.close()


def test_opening_a_current_queue_takes_no_write_lock(tmp_path: Path) -> None:
    """A 'ferry cp' starting beside a runner in the middle of a write must not wait for it."""
    import sqlite3

    path = tmp_path / "queue.db"
    Store(path).close()  # created at the current schema
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process writing
    try:
        store = Store(path)  # would wait for the lock (then fail) if it migrated under one
        assert store.jobs() == []
        store.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_results_read_the_same_with_or_without_update_from(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """SQLite before 3.33 has no UPDATE ... FROM: the one-statement-per-row path must agree."""
    import ferry.transfers.store as store_module
    from ferry.transfers.store import TaskResult

    seen = []
    for batched in (True, False):
        monkeypatch.setattr(store_module, "_UPDATE_FROM", batched)
        store = Store(tmp_path / f"queue-{batched}.db")
        try:
            job = store.create_job(["/src"], "/dst", JobOptions(recursive=True), [("/src", "/dst", "src")])
            store.add_tasks(job, [_task(f"f{i}") for i in range(4)])
            ids = sorted(t.id for t in store.tasks(job))
            store.finish_tasks(
                [
                    TaskResult(ids[0], "done", 1, "sha256", "ab", "sha256"),
                    TaskResult(ids[1], "failed", 3, error_kind="io", error="disk full"),
                    TaskResult(ids[2], "queued", 1, not_before=5.0),
                    TaskResult(ids[2], "done", 2, "sha256", "cd", "size", dst="/dst/f2 (1)"),  # the last one wins
                ]
            )
            seen.append(
                sorted((t.src, t.state, t.attempts, t.hash, t.verified, t.error, t.dst) for t in store.tasks(job))
            )
        finally:
            store.close()
    assert seen[0] == seen[1]
    assert ("/src/f2", "done", 2, "cd", "size", None, "/dst/f2 (1)") in seen[0]
    assert ("/src/f1", "failed", 3, None, None, "disk full", "/dst/f1") in seen[0]
