"""Delegated transfers: jobs whose bytes a service moves for us (Globus collection to collection).

The scheduler asks, before planning a job, whether its source or destination backend offers a
:class:`~ferry.backends.base.JobDelegate` for the pair (a ``delegation(src, dst)`` method on a
backend whose capabilities say ``delegated_transfer``). If one does, the whole job is handed to
it on the job's planning thread: no per-file tasks go to Ferry's workers.

The backend never sees the queue: it gets the job as a :class:`~ferry.backends.base.DelegatedJob`
and reports through a :class:`~ferry.backends.base.DelegationSink`, which :class:`StoreSink`
implements here over the :class:`~ferry.transfers.store.Store`. The delegation saves what it
submitted (a job value) *before* submitting so a crash never submits twice, follows the
service's task, feeds :class:`~ferry.core.progress.Accounting`, and finally records one row per
transferred file (state and how it was verified) so ``ferry queue show`` and manifests work as
for any other job. It returns when the service's task has ended, or when ``cancel`` fires: with
the reason ``cancel`` it cancels the service's task; any other reason (pause, shutdown) leaves
the service working and the next run reattaches.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from ferry.backends.base import Backend, DelegatedJob, DelegatedRow, JobDelegate
from ferry.core.cancel import CancelToken
from ferry.core.outcomes import NOT_VERIFIED, TaskState, Verification
from ferry.core.progress import Accounting
from ferry.transfers.store import Job, NewTask, Store, Task, TaskResult

_OPEN = ("queued", "running")


class DelegationListener(Protocol):
    def task_finished(self, job_id: int, task: Task | NewTask, result: TaskResult) -> None: ...
    def job_changed(self, job_id: int, state: str, message: str | None) -> None: ...
    def waiting(self, until: datetime | None, why: str) -> None: ...


@dataclass
class DelegatedRun:
    """What a delegation needs from the scheduler for one job."""

    job: Job
    store: Store
    accounting: Accounting
    listener: DelegationListener
    cancel: CancelToken


def delegated_job(job: Job) -> DelegatedJob:
    """The job as a backend's delegate sees it (no options object, no queue)."""
    opts = job.options
    return DelegatedJob(
        id=job.id,
        roots=tuple(job.roots),
        checksums=opts.verify != "none",
        on_conflict=opts.on_conflict,
        preserve_mtime=opts.preserve_mtime,
        label=opts.label,
    )


@dataclass
class StoreSink:
    """:class:`~ferry.backends.base.DelegationSink` over the queue: job values, the job's rows and
    the scheduler's listener."""

    run: DelegatedRun

    @property
    def accounting(self) -> Accounting:
        return self.run.accounting

    @property
    def cancel(self) -> CancelToken:
        return self.run.cancel

    def value(self, key: str) -> str | None:
        return self.run.store.job_value(self.run.job.id, key)

    def set_value(self, key: str, value: str | None) -> None:
        self.run.store.set_job_value(self.run.job.id, key, value)

    def open_rows(self) -> Iterator[DelegatedRow]:
        for t in self.run.store.tasks(self.run.job.id, states=_OPEN):
            yield DelegatedRow(t.kind, t.src, t.dst, t.rel, t.size, t.mtime_us)

    def finish_rows(
        self,
        rows: list[DelegatedRow],
        state: TaskState,
        *,
        verification: Verification | None = None,
        error: str | None = None,
    ) -> None:
        """Insert rows (ignored where they exist) and finish the open ones among them."""
        if not rows:
            return
        store, job_id = self.run.store, self.run.job.id
        store.add_tasks(job_id, [NewTask(r.kind, r.src, r.dst, r.rel, r.size, r.mtime_us) for r in rows])
        wanted = {r.src for r in rows}
        finished = [t for t in store.tasks(job_id, states=_OPEN) if t.src in wanted]
        results = [
            TaskResult.done(t.id, t.attempts + 1, verification or NOT_VERIFIED)
            if state is TaskState.DONE
            else TaskResult(t.id, state.value, t.attempts + 1, error_kind="error", error=error)
            for t in finished
        ]
        store.finish_tasks(results)
        for task, res in zip(finished, results, strict=True):
            self.run.listener.task_finished(job_id, task, res)

    def job_changed(self, message: str) -> None:
        self.run.listener.job_changed(self.run.job.id, "running", message)


class Delegation:
    """A backend's :class:`~ferry.backends.base.JobDelegate`, run for the scheduler."""

    def __init__(self, delegate: JobDelegate) -> None:
        self.delegate = delegate

    def run_job(self, run: DelegatedRun) -> None:
        """Submit (or reattach to) the service's task for ``run.job`` and follow it to its end."""
        self.delegate.run_job(delegated_job(run.job), StoreSink(run))


def find_delegation(src: Backend, dst: Backend) -> Delegation | None:
    """The delegation one of the two backends offers for this pair, or None (Ferry streams).

    Only backends that declare the Delegator feature take part.
    """
    for backend in (src, dst):
        delegator = backend.features.delegator
        found = delegator.delegation(src, dst) if delegator is not None else None
        if found is not None:
            return Delegation(found)
    return None
