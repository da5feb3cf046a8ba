"""A failed file's technical detail (issue 20's log view): the scheduler records the error's
``detail`` beside its sentence, and the transfers panel's log shows both."""

from __future__ import annotations

from ferry.backends.registry import BackendPool
from ferry.core.errors import PermissionDenied
from ferry.transfers import jobs
from ferry.transfers.options import JobOptions
from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import Store, TaskResult
from ferry.ui import queue_actions
from helpers import MemSite


def test_a_failures_detail_is_recorded_and_shown_and_a_later_failure_replaces_it(site: MemSite, store: Store) -> None:
    site.put("/src/a.txt", b"a")
    site.put("/src/b.txt", b"b")
    from ferry.backends.memory import get_store

    get_store(site.name).fail_on(
        "open_write",
        "a.txt",
        PermissionDenied("Permission denied: /dst/a.txt", detail="EACCES (13) from open()"),
        times=None,
    )
    with BackendPool() as pool:
        job = jobs.new_job(
            store, pool, [site.url("/src/a.txt"), site.url("/src/b.txt")], site.url("/dst/"), JobOptions()
        )
    assert Runner(store, RunConfig(job_ids=[job])).run().jobs == {job: "failed"}
    (failed,) = store.tasks(job, states=("failed",))
    assert store.error_details([failed.id]) == {failed.id: "EACCES (13) from open()"}
    text = queue_actions.log_text(queue_actions.job_log(store, job))
    assert "a.txt\n    kind: permission-denied; suggested action: check-permissions; attempts: 1\n" in text
    assert "    Permission denied: /dst/a.txt\n    detail: EACCES (13) from open()" in text
    assert "Failed files (1):" in text and "\n  b.txt" not in text  # copied: not among the failures
    # Failing again without a detail forgets the old one (it would describe another failure).
    store.finish_tasks([TaskResult(failed.id, "failed", 2, error_kind="transient", error="Connection lost")])
    assert store.error_details([failed.id]) == {}
    assert "detail:" not in queue_actions.log_text(queue_actions.job_log(store, job))


def test_a_source_gone_before_the_run_is_logged_as_not_found(site: MemSite, store: Store) -> None:
    """The log view gave a source that disappeared between 'queue add' and the run the kind
    'error'; it is typed 'not-found', as the same loss found later, mid-walk, is."""
    site.put("/src/a.txt", b"a")
    with BackendPool() as pool:
        job = jobs.new_job(store, pool, [site.url("/src/a.txt")], site.url("/dst/"), JobOptions())
    from ferry.backends.memory import get_store

    with get_store(site.name).lock:
        del get_store(site.name)._lookup("/src").children["a.txt"]  # type: ignore[attr-defined]
    assert Runner(store, RunConfig(job_ids=[job])).run().jobs == {job: "failed"}
    assert len(list(store.tasks(job, states=("failed",)))) == 1
    assert store.outcome_counts(job).failed == {"not-found": 1}
    text = queue_actions.log_text(queue_actions.job_log(store, job))
    assert "kind: not-found" in text, text
