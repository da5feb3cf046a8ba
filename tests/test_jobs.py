"""Job creation (ferry.transfers.jobs) and job control (ferry.transfers.control): the one place
every front end goes through."""

from __future__ import annotations

from pathlib import Path

import pytest

import ferry.api as api
from ferry.backends.registry import BackendPool
from ferry.core.errors import UsageError
from ferry.transfers import control, jobs, move
from ferry.transfers.options import JobOptions
from ferry.transfers.store import Store
from helpers import Ferry, MemSite


def _new(store: Store, sources: list[str], dest: str, **options: object) -> int:
    with BackendPool() as pool:
        return jobs.new_job(store, pool, sources, dest, JobOptions(**options))  # type: ignore[arg-type]


def test_new_job_records_canonical_addresses_and_its_options(site: MemSite, store: Store) -> None:
    site.put("/src/a.txt", b"a")
    job_id = _new(store, [site.url("/src/a.txt")], site.url("/dst/"), move=True, on_conflict="skip")
    job = store.job(job_id)
    assert job.sources == [site.url("/src/a.txt")] and job.dest.rstrip("/") == site.url("/dst")
    assert job.options.move and job.options.on_conflict == "skip"
    assert job.roots == [("/src/a.txt", "/dst/a.txt", "a.txt")]


def test_bad_requests_change_nothing(site: MemSite, store: Store, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="Source not found"):
        _new(store, [site.url("/nothing")], site.url("/dst/"))
    with pytest.raises(UsageError, match="--allow-unverified-move"):
        JobOptions(move=True, verify="size")
    assert JobOptions(move=True, verify="none", allow_unverified_move=True).move
    assert store.jobs() == []


def test_control_says_per_job_what_it_did(site: MemSite, store: Store) -> None:
    site.put("/src/a.txt", b"a")
    a = _new(store, [site.url("/src/a.txt")], site.url("/x/"))
    b = _new(store, [site.url("/src/a.txt")], site.url("/y/"))
    (c,) = control.pause(store, [a])
    assert c.applied and c.state == "queued" and store.job(a).state == "paused"
    assert "paused by you" in (store.job(a).message or "")
    (c,) = control.pause(store, [a])
    assert not c.applied and c.state == "paused"
    (c,) = control.resume(store, [b])
    assert not c.applied and c.state == "queued"
    (c,) = control.resume(store, [a])
    assert c.applied and store.job(a).state == "queued"
    (c,) = control.cancel(store, [b])
    assert c.applied and store.job(b).state == "cancelled"
    assert [t.state for t in store.tasks(b)] == []  # never planned: nothing to cancel file by file
    (c,) = control.cancel(store, [b])
    assert not c.applied and c.state == "cancelled"
    (c,) = control.retry(store, [b])
    assert c.applied and store.job(b).state == "queued"
    with pytest.raises(UsageError, match="No job 99"):
        control.pause(store, [99])
    control.cancel(store, [b])
    assert control.clear(store) == 1 and [j.id for j in store.jobs()] == [a]


def test_retry_of_a_move_deals_with_its_sources_again(site: MemSite, store: Store) -> None:
    site.put("/src/a.txt", b"a")
    job = _new(store, [site.url("/src/a.txt")], site.url("/dst/"), move=True)
    store.set_job_value(job, move.MOVE_KEY, move.MoveProgress(next_task=5, moved=1, finished=True).to_json())
    store.set_job_state(job, "failed", "1 item(s) failed")
    (c,) = control.retry(store, [job])
    assert c.applied and move.progress(store, job) is None


def test_api_uses_the_same_creation_and_control(ferry: Ferry, tmp_path: Path, store: Store) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f.txt").write_bytes(b"data")
    job = api.enqueue([str(tmp_path / "src")], str(tmp_path / "dst"), recursive=True, move=True, store=store)
    assert store.job(job).options.move
    assert api.pause(job, store=store) and store.job(job).state == "paused"
    assert not api.pause(job, store=store)
    assert api.resume(job, store=store) and store.job(job).state == "queued"
    assert api.cancel(job, store=store) and store.job(job).state == "cancelled"
    result = api.move([str(tmp_path / "src")], str(tmp_path / "moved"), recursive=True, store=store)
    assert result.ok and (tmp_path / "moved" / "f.txt").read_bytes() == b"data"
    assert not (tmp_path / "src").exists()
