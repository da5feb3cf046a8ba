"""Schema 2: protocol state kept for resuming (S3 UploadIds and parts, Globus submission ids)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ferry.transfers.options import JobOptions
from ferry.transfers.store import SCHEMA_VERSION, NewTask, Store, StoreError


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
    db.executescript("DROP TABLE task_resume; DROP TABLE job_values; PRAGMA user_version = 1;")
    db.close()
    store = Store(path)
    assert store.job(job).dest == "/dst"  # the old job is still there
    store.set_job_value(job, "k", "v")
    assert store.job_value(job, "k") == "v"
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2


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
