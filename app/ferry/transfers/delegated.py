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

The route (``--route``, :class:`~ferry.transfers.options.Route`): :func:`choose_route` decides
once per job whether its bytes go site to site (``direct``: a delegation) or through Ferry
(``relay``), and why not direct where a delegator raised
:class:`~ferry.backends.base.NoDirectRoute`. The job records what was chosen (``Store.set_route``).

A delegation that walks the job itself (S3 server-side copy) records its rows before copying
them: ``finish_rows(rows, TaskState.QUEUED)`` records them as queued and ends nothing, and the job
value ``planned`` ("1") says every row is recorded (set by the engine for a job planned before it
reached the delegation, e.g. a sync's differences), so a restart copies the open rows only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from ferry.backends.base import Backend, DelegatedJob, DelegatedRow, JobDelegate, NoDirectRoute
from ferry.core.cancel import CancelToken
from ferry.core.errors import UsageError
from ferry.core.outcomes import NOT_VERIFIED, SkipReason, TaskState, Verification
from ferry.core.progress import Accounting
from ferry.transfers.options import JobOptions, Route
from ferry.transfers.store import Job, NewTask, Store, Task, TaskResult

_OPEN = ("queued", "running")
PLANNED_KEY = "planned"  # job value: "1" once every row of the job is recorded


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
        error_kind: str | None = None,
    ) -> None:
        """Insert rows (ignored where they exist) and finish the open ones among them. With
        ``QUEUED`` only insert (a delegation recording its plan). A row whose ``dst`` differs from
        the recorded one was renamed by the conflict policy; a skipped row was kept by the policy."""
        if not rows:
            return
        store, job_id = self.run.store, self.run.job.id
        new = store.add_tasks(job_id, [NewTask(r.kind, r.src, r.dst, r.rel, r.size, r.mtime_us) for r in rows])
        if state is TaskState.QUEUED:
            files = [t for t in new if t.kind == "file"]
            self.run.accounting.add_total(len(files), sum(t.size or 0 for t in files))
            return
        wanted = {r.src: r for r in rows}
        finished = [t for t in store.tasks(job_id, states=_OPEN) if t.src in wanted]
        results = [self._result(t, wanted[t.src], state, verification, error, error_kind) for t in finished]
        store.finish_tasks(results)
        for task, res in zip(finished, results, strict=True):
            self.run.listener.task_finished(job_id, task, res)

    @staticmethod
    def _result(
        t: Task,
        row: DelegatedRow,
        state: TaskState,
        verification: Verification | None,
        error: str | None,
        error_kind: str | None = None,
    ) -> TaskResult:
        if state is TaskState.DONE:
            v = verification or NOT_VERIFIED
            renamed = row.dst if row.dst != t.dst else None
            return TaskResult.done(t.id, t.attempts + 1, v, hash=v.digest or None, dst=renamed)
        if state is TaskState.SKIPPED:
            why = error or "kept the existing file"
            return TaskResult(t.id, "skipped", t.attempts + 1, verified=why, error=why, skip_reason=SkipReason.POLICY)
        return TaskResult(t.id, state.value, t.attempts + 1, error_kind=error_kind or "error", error=error)

    def job_changed(self, message: str) -> None:
        self.run.listener.job_changed(self.run.job.id, "running", message)


class Delegation:
    """A backend's :class:`~ferry.backends.base.JobDelegate`, run for the scheduler. ``label``
    names, for a job, a route that is more than "direct" (``globus cluster -> store``): the job
    records it with its route when it runs (``direct: globus cluster -> store``)."""

    def __init__(self, delegate: JobDelegate, label: Callable[[DelegatedJob], str] | None = None) -> None:
        self.delegate = delegate
        self.label = label

    def run_job(self, run: DelegatedRun) -> None:
        """Submit (or reattach to) the service's task for ``run.job`` and follow it to its end."""
        if run.job.planned and run.store.job_value(run.job.id, PLANNED_KEY) is None:
            run.store.set_job_value(run.job.id, PLANNED_KEY, "1")
        job = delegated_job(run.job)
        if self.label is not None:
            run.store.set_route(run.job.id, Route.DIRECT.value, self.label(job))
        self.delegate.run_job(job, StoreSink(run))


@dataclass(frozen=True)
class RouteChoice:
    """How a job's bytes travel: ``route`` is DIRECT (``delegation`` set) or RELAY; ``reason`` is
    the sentence saying why not direct where a direct route was possible but not now."""

    route: Route
    delegation: Delegation | None = None
    reason: str | None = None

    def describe(self) -> str:
        """``direct``, ``relay``, or ``relay: the host has no curl``."""
        return f"{self.route.value}: {self.reason}" if self.reason else self.route.value


def job_route(options: JobOptions, src: Backend, dst: Backend) -> Route:
    """The route a job's options ask for, where ``auto`` means relay for a move whose direct route
    would be one of Ferry's own (an S3 server-side copy, an SSH host's curl to or from S3, one SSH
    host copying to another): a move
    deletes each source only after Ferry's own checksum check of the bytes it read, which those
    routes never give. (A Globus move is the service's own check: see jobs.check_move.)"""
    pair = {src.scheme, dst.scheme}
    if options.move and options.route is Route.AUTO and pair in ({"s3"}, {"sftp", "s3"}, {"sftp"}):
        return Route.RELAY
    return Route(options.route)


def no_route_sentence(src: Backend, dst: Backend) -> str:
    return f"no direct route from {src.scheme} to {dst.scheme}"


def choose_route(src: Backend, dst: Backend, route: str = Route.AUTO) -> RouteChoice:
    """The route for a job from ``src`` to ``dst`` as asked (``--route``). ``relay`` never
    delegates; ``direct`` is the delegation or a :class:`UsageError` with the reason; ``auto`` is
    the delegation where one is offered, else relay (with the reason a delegator gave).

    The Globus route between saved sites naming collections (:mod:`ferry.backends.globus.site_route`)
    comes first under ``auto`` (one task that runs with this computer off; between S3 buckets the
    store's own copy comes first) and where an end is a Globus collection; under ``direct``
    between two sites, only where no other direct route exists."""
    asked = Route(route)
    if asked is Route.RELAY:
        return RouteChoice(Route.RELAY)
    globus, refused = _globus_site_route(src, dst)
    # First under auto, except between S3 buckets, where the store's own copy comes first.
    first = asked is Route.AUTO and not src.scheme == dst.scheme == "s3"
    if globus is not None and (first or "globus" in (src.scheme, dst.scheme)):
        return RouteChoice(Route.DIRECT, globus)
    try:
        found = _offered(src, dst)
    except NoDirectRoute as exc:
        found, refused = None, refused or exc
    if found is None:
        found = globus
    if found is not None:
        return RouteChoice(Route.DIRECT, found)
    reason = refused.reason if refused is not None else None
    if asked is Route.DIRECT:
        raise UsageError(f"--route direct: {reason or no_route_sentence(src, dst)}")
    return RouteChoice(Route.RELAY, reason=reason)


def globus_site_route(src: Backend, dst: Backend) -> Delegation | None:
    """The Globus route between two saved sites naming collections (or such a site and a
    collection) when it can be taken now, else None (relay, or another route)."""
    return _globus_site_route(src, dst)[0]


def _globus_site_route(src: Backend, dst: Backend) -> tuple[Delegation | None, NoDirectRoute | None]:
    """The Globus route between sites naming collections, or why it cannot be taken now."""
    from ferry.backends.globus.site_route import site_route

    try:
        found = site_route(src, dst)
    except NoDirectRoute as exc:
        return None, exc
    return (Delegation(found, found.route_label) if found is not None else None), None


def _offered(src: Backend, dst: Backend) -> Delegation | None:
    """The delegation one of the two backends offers (only those declaring the Delegator feature
    take part); NoDirectRoute when one could but cannot now and the other offers none."""
    refused: NoDirectRoute | None = None
    for backend in (src, dst):
        delegator = backend.features.delegator
        if delegator is None:
            continue
        try:
            found = delegator.delegation(src, dst)
        except NoDirectRoute as exc:
            refused = refused or exc
            continue
        if found is not None:
            return Delegation(found)
    if refused is not None:
        raise refused
    return None


def find_delegation(src: Backend, dst: Backend, route: str = Route.AUTO) -> Delegation | None:
    """The delegation for this pair under ``route``, or None (Ferry streams). ``direct`` without
    one raises :class:`UsageError` with the reason."""
    return choose_route(src, dst, route).delegation
