"""Schema 2: protocol state kept for resuming (S3 UploadIds and parts, Globus submission ids)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ferry.core.outcomes import Level, SkipReason
from ferry.transfers.options import JobOptions
from ferry.transfers.store import SCHEMA_VERSION, NewTask, Store, StoreError

# Version 6 added the job's route: an older queue has no such columns.
_NO_ROUTE = "ALTER TABLE jobs DROP COLUMN route; ALTER TABLE jobs DROP COLUMN route_reason; "


def _job(store: Store) -> int:
    return store.create_job(["/src"], "/dst", JobOptions(), [("/src", "/dst", "")])


def test_task_resume_and_job_values_round_trip_and_cascade(tmp_path: Path) -> None:
    store = Store(tmp_path / "q.db")
    job = _job(store)
    store.add_tasks(job, [NewTask(kind="file", src="/src/a", dst="/dst/a", rel="a", size=5, mtime_us=None)])
    (task,) = store.claim_tasks([job], 10)
    tid = task.id
    assert store.task_resume(tid) is None
    store.set_task_resume(tid, {"upload_id": "U1", "parts": [[1, "etag1"]]})
    store.set_task_resume(tid, {"upload_id": "U1", "parts": [[1, "etag1"], [2, "etag2"]]})
    assert store.task_resume(tid) == {"upload_id": "U1", "parts": [[1, "etag1"], [2, "etag2"]]}
    store.set_job_value(job, "globus.submission_id", "sub-1")
    store.set_job_value(job, "globus.submission_id", "sub-2")
    assert store.job_value(job, "globus.submission_id") == "sub-2"
    assert store.job_value(job, "other") is None
    store.close()

    again = Store(tmp_path / "q.db")  # survives a restart
    assert again.task_resume(tid) == {"upload_id": "U1", "parts": [[1, "etag1"], [2, "etag2"]]}
    again.set_task_resume(tid, None)
    assert again.task_resume(tid) is None
    again.set_task_resume(tid, {"upload_id": "U2"})
    again.delete_jobs([job])  # deleting a job forgets its protocol state
    assert again.task_resume(tid) is None
    assert again.job_value(job, "globus.submission_id") is None


def test_a_version_1_queue_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    store = Store(path)
    job = _job(store)
    store.close()
    db = sqlite3.connect(path)
    db.executescript(
        "DROP TABLE task_resume; DROP TABLE job_values; ALTER TABLE tasks DROP COLUMN verify_level; "
        "ALTER TABLE tasks DROP COLUMN verify_evidence; ALTER TABLE tasks DROP COLUMN skip_reason; "
        "ALTER TABLE jobs DROP COLUMN error_kind; ALTER TABLE jobs DROP COLUMN error_action; "
        "ALTER TABLE jobs DROP COLUMN position; " + _NO_ROUTE + "PRAGMA user_version = 1;"
    )
    db.close()
    store = Store(path)
    assert store.job(job).dest == "/dst"  # the old job is still there
    store.set_job_value(job, "k", "v")
    assert store.job_value(job, "k") == "v"
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6


def test_a_version_2_queue_gets_typed_outcomes_from_its_old_notes(tmp_path: Path) -> None:
    """Rows written by an older Ferry carry only words; the migration gives each a level and a
    skip reason once, so every later decision reads values."""
    path = tmp_path / "q.db"
    store = Store(path)
    job = _job(store)
    notes = {
        "a": ("done", "sha256 match (server checked Content-MD5)", "ab12"),
        "b": ("done", "size only (the server has no b3sum to check blake3)", None),
        "c": ("done", "checksum verified by Globus", None),
        "d": ("done", "none", None),
        "e": ("skipped", "skipped: destination exists", None),
    }
    store.add_tasks(job, [NewTask("file", f"/src/{n}", f"/dst/{n}", n, 1, None) for n in notes])
    store.close()
    db = sqlite3.connect(path)
    for n, (state, note, digest) in notes.items():
        db.execute(
            "UPDATE tasks SET state = ?, verified = ?, hash = ?, hash_algo = 'sha256' WHERE rel = ?",
            (state, note, digest, n.encode()),
        )
    db.executescript(
        "ALTER TABLE tasks DROP COLUMN verify_level; ALTER TABLE tasks DROP COLUMN verify_evidence; "
        "ALTER TABLE tasks DROP COLUMN skip_reason; ALTER TABLE jobs DROP COLUMN error_kind; "
        "ALTER TABLE jobs DROP COLUMN error_action; ALTER TABLE jobs DROP COLUMN position; "
        + _NO_ROUTE
        + "PRAGMA user_version = 2;"
    )
    db.commit()
    db.close()
    store = Store(path)
    got = {t.rel: t for t in store.tasks(job)}
    assert got["a"].level is Level.CHECKSUM and got["a"].evidence == ()  # no evidence was recorded then
    assert got["b"].level is Level.SIZE
    assert got["c"].level is Level.SERVICE
    assert got["d"].level is Level.NONE
    assert got["e"].skip_reason is SkipReason.POLICY and got["e"].level is None
    counts = store.outcome_counts(job)
    assert counts.copied == {Level.CHECKSUM: 1, Level.SIZE: 1, Level.SERVICE: 1, Level.NONE: 1}
    assert counts.skipped == {SkipReason.POLICY: 1}


def test_a_newer_queue_is_refused_not_damaged(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer Ferry"):
        Store(path)


def test_many_processes_opening_a_fresh_queue_at_once_all_succeed(tmp_path: Path) -> None:
    # The GUI, its runner and a `ferry queue list` may all open a new queue.db together.
    import subprocess
    import sys

    path = tmp_path / "fresh.db"
    code = (
        "import sys; from pathlib import Path; from ferry.transfers.store import Store; "
        "Store(Path(sys.argv[1])).close()"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path)], stderr=subprocess.PIPE) for _ in range(8)]
    errors = [p.communicate(timeout=60)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, errors
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
