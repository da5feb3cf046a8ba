"""The S3 writer's resume row (UploadId and parts) is read through the store's own reader
connections, which never wait for the writer's lock: what one connection writes, the next read
must see at once, from any thread and from another process's store."""

from __future__ import annotations

import threading
from pathlib import Path

from ferry.transfers.options import JobOptions
from ferry.transfers.store import NewTask, Store


def _task(store: Store) -> int:
    job = store.create_job(["/src"], "/dst", JobOptions(), [])
    store.add_tasks(job, [NewTask("file", "/src/a", "/dst/a", "a", 1, None)])
    return next(iter(store.tasks(job))).id


def test_a_row_written_is_read_at_once_and_forgotten_at_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "q.db")
    try:
        tid = _task(store)
        assert store.task_resume(tid) is None  # the reader's snapshot must not stick
        store.set_task_resume(tid, {"upload_id": "u1", "parts": {}})
        assert store.task_resume(tid) == {"upload_id": "u1", "parts": {}}
        store.set_task_resume(tid, {"upload_id": "u2", "parts": {"1": ["e", 5, "m"]}})
        assert store.task_resume(tid) == {"upload_id": "u2", "parts": {"1": ["e", 5, "m"]}}
        store.set_task_resume(tid, None)
        assert store.task_resume(tid) is None
    finally:
        store.close()


def test_rows_are_seen_across_stores_and_threads(tmp_path: Path) -> None:
    one, two = Store(tmp_path / "q.db"), Store(tmp_path / "q.db")
    try:
        tid = _task(one)
        assert two.task_resume(tid) is None
        one.set_task_resume(tid, {"upload_id": "x"})  # as a crashed runner left it
        seen: list[object] = []
        gate = threading.Barrier(8)

        def read() -> None:
            gate.wait()
            for _ in range(50):
                seen.append(two.task_resume(tid))

        threads = [threading.Thread(target=read) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert seen == [{"upload_id": "x"}] * 400
        assert len(two._reader_conns) <= 8  # one per concurrent caller, reused
    finally:
        one.close()
        two.close()
    assert two._reader_conns == []
