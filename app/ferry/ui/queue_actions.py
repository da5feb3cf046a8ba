"""The transfers panel's per-job actions, through the engine's job control (no Qt).

Pause, resume, cancel, retry and clear are :mod:`ferry.transfers.control`, the same calls
``ferry queue`` and ``ferry.api`` make; here they only come back as counts for the status bar.
"""

from __future__ import annotations

from ferry.backends.registry import BackendPool
from ferry.transfers import control
from ferry.transfers.store import Store


def _applied(changes: list[control.Change]) -> int:
    return sum(1 for c in changes if c.applied)


def _known(store: Store, job_ids: list[int]) -> list[int]:
    """The panel may show a job another process has just cleared: leave it out, do not fail."""
    return [j.id for j in store.jobs(ids=job_ids)]


def apply(store: Store, action: control.QueueAction, job_ids: list[int], pool: BackendPool) -> int:
    """Jobs changed (files queued again, for retry), as the status bar says it."""
    changes = control.apply(store, action, _known(store, job_ids), pool)
    if action is control.QueueAction.RETRY:
        return sum(c.files for c in changes if c.applied)
    return _applied(changes)


def pause(store: Store, job_ids: list[int]) -> int:
    return _applied(control.pause(store, _known(store, job_ids)))


def resume(store: Store, job_ids: list[int]) -> int:
    return _applied(control.resume(store, _known(store, job_ids)))


def cancel(store: Store, job_ids: list[int], pool: BackendPool) -> int:
    return _applied(control.cancel(store, _known(store, job_ids), pool))


def retry(store: Store, job_ids: list[int], on_conflict: str | None = None) -> int:
    """Files queued again, over every job asked about."""
    return sum(c.files for c in control.retry(store, _known(store, job_ids), on_conflict) if c.applied)


def clear_finished(store: Store, include_failed: bool = False) -> int:
    return control.clear(store, include_failed=include_failed)
