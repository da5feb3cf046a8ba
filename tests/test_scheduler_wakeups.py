"""The coordinator wakes on events, not on a timer: a planner batch and each worker result wake
it, wake-ups carry no work of their own, and every result is written exactly once whether it
arrived alone or in a stream."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import Store
from helpers import MemSite, Recorder, mem_job


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "queue.db")
    yield s
    s.close()


def test_wakeups_alone_record_nothing(store: Store) -> None:
    runner = Runner(store, RunConfig(parallel=1, job_ids=[]))
    for _ in range(3):
        runner._done.put(None)
    runner._collect(0)  # only wake-ups: nothing to write, no error
    assert runner._done.empty()


def test_streamed_results_are_each_recorded_once(site: MemSite, store: Store) -> None:
    for i in range(300):
        site.put(f"/src/d{i % 3}/f{i:03d}", f"file {i}".encode())
    job = mem_job(store, [site.url("/src")], site.url("/dst/"), recursive=True)
    writes: list[int] = []
    original = store.finish_tasks

    def counting(results):  # type: ignore[no-untyped-def]
        writes.append(len(results))
        original(results)

    store.finish_tasks = counting  # type: ignore[method-assign]
    listener = Recorder()
    summary = Runner(store, RunConfig(parallel=2, job_ids=[job]), listener=listener).run()
    assert summary.jobs == {job: "done"}
    assert sum(writes) == 304  # 300 files and 4 folders, each recorded once
    assert len(listener.tasks) == 304
    assert all(site.get(f"/dst/src/d{i % 3}/f{i:03d}") == f"file {i}".encode() for i in range(300))
    assert all(t.state == "done" for t in store.tasks(job))
