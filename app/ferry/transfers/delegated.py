"""Delegated transfers: jobs whose bytes a service moves for us (Globus collection to collection).

The scheduler asks, before planning a job, whether its source or destination backend offers a
:class:`Delegation` for the pair (a ``delegation(src, dst)`` method on a backend whose
capabilities say ``delegated_transfer``). If one does, the whole job is handed to it on the
job's planning thread: no per-file tasks go to Ferry's workers. The delegation records what it
submitted (``Store.set_job_value``) *before* submitting so a crash never submits twice, follows
the service's task, feeds :class:`~ferry.core.progress.Accounting`, and finally records one row
per transferred file (state and how it was verified) so ``ferry queue show`` and manifests work
as for any other job. It returns when the service's task has ended, or when ``cancel`` fires:
with the reason ``cancel`` it cancels the service's task; any other reason (pause, shutdown)
leaves the service working and the next run reattaches.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from ferry.backends.base import Backend
from ferry.core.cancel import CancelToken
from ferry.core.progress import Accounting
from ferry.transfers.store import Job, NewTask, Store, Task, TaskResult


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


class Delegation(Protocol):
    def run_job(self, run: DelegatedRun) -> None:
        """Submit (or reattach to) the service's task for ``run.job`` and follow it to its end."""
        ...


def find_delegation(src: Backend, dst: Backend) -> Delegation | None:
    """The delegation one of the two backends offers for this pair, or None (Ferry streams).

    Only backends with a ``delegation(src, dst)`` method take part; asking costs no service call
    (a Globus backend's capabilities may need one).
    """
    for backend in (src, dst):
        offer = getattr(backend, "delegation", None)
        if not callable(offer):
            continue
        found: Delegation | None = offer(src, dst)
        if found is not None:
            return found
    return None
