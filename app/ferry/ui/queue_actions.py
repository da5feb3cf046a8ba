"""Per-job actions from the transfers panel, the same state changes ``ferry queue`` makes (no Qt).

The window's runner (or a ``ferry queue run`` in another process) sees a pause or cancel in the
store within half a second and stops the job's files, keeping partial data where it resumes.
"""

from __future__ import annotations

from ferry.backends.registry import BackendPool
from ferry.core.address import parse_address
from ferry.core.errors import FerryError
from ferry.transfers.scheduler import remove_partial
from ferry.transfers.store import JOB_FINISHED, Store


def pause(store: Store, job_ids: list[int]) -> int:
    n = 0
    for job in store.jobs(ids=job_ids):
        if job.state in ("queued", "running"):
            store.set_job_state(job.id, "paused", "paused by you")
            n += 1
    return n


def resume(store: Store, job_ids: list[int]) -> int:
    n = 0
    for job in store.jobs(ids=job_ids):
        if job.state == "paused":
            store.set_job_state(job.id, "queued", None)
            n += 1
    return n


def cancel(store: Store, job_ids: list[int], pool: BackendPool) -> int:
    n = 0
    for job in store.jobs(ids=job_ids):
        if job.state in JOB_FINISHED:
            continue
        running = job.state == "running" and job.runner_alive
        store.set_job_state(job.id, "cancelled", "cancelled by you")
        if not running:  # no runner will clean up: remove partial files here
            try:
                dst = pool.get(parse_address(job.dest))
                for task in store.tasks(job.id, states=("queued", "running"), kinds=("file",)):
                    remove_partial(dst, task)
            except FerryError:
                pass
            store.cancel_open_tasks(job.id)
        n += 1
    return n


def retry(store: Store, job_ids: list[int], on_conflict: str | None = None) -> int:
    """Queue failed (and, for cancelled jobs, cancelled) files again; returns how many."""
    total = 0
    for job in store.jobs(ids=job_ids):
        if job.state not in ("failed", "cancelled", "paused", "done"):
            continue
        if on_conflict:
            opts = job.options
            opts.on_conflict = on_conflict
            store.update_job_options(job.id, opts)
        total += store.retry_failed(job.id, include_cancelled=job.state == "cancelled")
    return total


def clear_finished(store: Store, include_failed: bool = False) -> int:
    states = ("done", "cancelled", "failed") if include_failed else ("done", "cancelled")
    return store.delete_jobs(j.id for j in store.jobs(states))
