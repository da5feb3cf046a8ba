"""Job control: pause, resume, cancel, retry, clear and the queue's order, for ``ferry queue``, the window and
``ferry.api`` alike. No front end changes a job's state itself.

Each call changes the store only; whoever runs the job (this process's runner, a ``ferry queue
run`` elsewhere, the window) sees the change within half a second and acts on it: running files
stop, keeping partial data where they can resume. Each returns one :class:`Change` per job asked
about, saying whether it applied and, if not, why, for the front end to word.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from ferry.backends.registry import BackendPool
from ferry.core.address import parse_address
from ferry.core.errors import FerryError, UsageError, describe
from ferry.core.outcomes import JobState
from ferry.transfers import move
from ferry.transfers.options import CONFLICT_ANSWER_KEY, JobOptions
from ferry.transfers.store import Job, Store

PAUSED = "paused by you; 'ferry queue resume' (or Resume in the window) continues it"
CANCELLED = "cancelled by you"

PAUSABLE = (JobState.QUEUED, JobState.RUNNING)
RESUMABLE = (JobState.PAUSED,)
CANCELLABLE = (JobState.QUEUED, JobState.RUNNING, JobState.PAUSED, JobState.FAILED)
RETRYABLE = (JobState.FAILED, JobState.CANCELLED, JobState.PAUSED, JobState.DONE, JobState.RUNNING)
CLEARABLE = (JobState.DONE, JobState.CANCELLED)


class QueueAction(StrEnum):
    """What a person can do to jobs, from any front end (see :func:`apply`)."""

    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"
    RETRY = "retry"
    TOP = "top"  # first in the queue: its files are claimed before any other job's
    BOTTOM = "bottom"


@dataclass(frozen=True)
class Change:
    job_id: int
    applied: bool
    state: str  # the job's state when it was asked
    runner_alive: bool = False  # a runner holds the job (and will act on the change)
    files: int = 0  # retry: files queued again
    problem: str = ""  # for people: what went wrong beside the change itself


def jobs_in(store: Store, states: Iterable[str]) -> list[int]:
    """The ids of every job in one of ``states`` (``--all``)."""
    return [j.id for j in store.jobs(tuple(states))]


def _jobs(store: Store, job_ids: Sequence[int]) -> list[Job]:
    """The jobs asked about, in the order asked; an unknown id raises UsageError (nothing changed)."""
    return [store.job(j) for j in job_ids]


def pause(store: Store, job_ids: Sequence[int]) -> list[Change]:
    out = []
    for job in _jobs(store, job_ids):
        ok = job.state in PAUSABLE
        if ok:
            store.set_job_state(job.id, "paused", PAUSED)
        out.append(Change(job.id, ok, job.state, job.runner_alive))
    return out


def resume(store: Store, job_ids: Sequence[int]) -> list[Change]:
    out = []
    for job in _jobs(store, job_ids):
        ok = job.state in RESUMABLE
        if ok:
            store.set_job_state(job.id, "queued", None)
        out.append(Change(job.id, ok, job.state))
    return out


def cancel(store: Store, job_ids: Sequence[int], pool: BackendPool | None = None) -> list[Change]:
    """Cancel jobs (failed ones too: a failed job's files may have left partial data); a job no
    runner holds has its partial files removed, and its unfinished S3 uploads aborted, here."""
    out = []
    for job in _jobs(store, job_ids):
        if job.state == JobState.CANCELLED and not job.runner_alive and _left_unfinished(store, job):
            # Cancelled while running, and its runner ended (killed) before its cleanup: that is
            # done here, or its partial files would stay for good once the job is cleared.
            out.append(Change(job.id, True, job.state, problem=_finish_cancel(store, job, pool)))
            continue
        if job.state not in CANCELLABLE:
            out.append(Change(job.id, False, job.state))
            continue
        running = job.state == "running" and job.runner_alive
        store.set_job_state(job.id, "cancelled", CANCELLED)
        problem = _finish_cancel(store, job, pool) if not running else ""  # no runner will clean up after it
        out.append(Change(job.id, True, job.state, running, problem=problem))
    return out


def _left_unfinished(store: Store, job: Job) -> bool:
    """Whether a cancelled job still has files its runner was holding or had yet to start."""
    return any(True for _ in store.tasks(job.id, states=("queued", "running"), kinds=("file",)))


def _finish_cancel(store: Store, job: Job, pool: BackendPool | None) -> str:
    """A cancel's cleanup that no runner did: partial files removed, unfinished files cancelled."""
    problem = _remove_partials(store, job, pool)
    if not job.runner_alive:  # files a killed runner held: cancelled too, not left 'running'
        store.unclaim(t.id for t in store.tasks(job.id, states=("running",)))
    store.cancel_open_tasks(job.id)
    return problem


def _remove_partials(store: Store, job: Job, pool: BackendPool | None) -> str:
    from ferry.transfers.scheduler import PARTIAL_STATES, remove_partial

    own = pool is None
    pool = pool or BackendPool()
    try:
        dst = pool.get(parse_address(job.dest))
        for task in store.tasks(job.id, states=PARTIAL_STATES, kinds=("file",)):
            remove_partial(dst, task, store)
    except FerryError as exc:
        return f"could not remove the partial files of job {job.id}: {describe(exc)}"
    finally:
        if own:
            pool.close()
    return ""


def retry(store: Store, job_ids: Sequence[int], on_conflict: str | None = None) -> list[Change]:
    """Queue failed (and, for cancelled jobs, cancelled) files again.

    With ``on_conflict`` the job's conflict policy changes first, and an "apply to all" answer
    given for it earlier is forgotten. A Move job deals with its sources again once it finishes.
    """
    out = []
    for job in _jobs(store, job_ids):
        if job.state not in RETRYABLE:
            out.append(Change(job.id, False, job.state))
            continue
        if on_conflict:
            opts = job.options
            opts.on_conflict = JobOptions(on_conflict=on_conflict).on_conflict  # checked
            store.update_job_options(job.id, opts)
            store.set_job_value(job.id, CONFLICT_ANSWER_KEY, None)
        if job.options.move:
            move.restart(store, job.id)
        n = store.retry_failed(job.id, include_cancelled=job.state == "cancelled")
        out.append(Change(job.id, True, job.state, files=n))
    return out


def apply(store: Store, action: QueueAction, job_ids: Sequence[int], pool: BackendPool | None = None) -> list[Change]:
    """One of the per-job actions by its value (the window's buttons, scripts)."""
    if action is QueueAction.PAUSE:
        return pause(store, job_ids)
    if action is QueueAction.RESUME:
        return resume(store, job_ids)
    if action is QueueAction.CANCEL:
        return cancel(store, job_ids, pool)
    if action is QueueAction.TOP:
        return reorder(store, job_ids, first=True)
    if action is QueueAction.BOTTOM:
        return reorder(store, job_ids, last=True)
    return retry(store, job_ids)


def reorder(
    store: Store,
    job_ids: Sequence[int],
    *,
    before: int | None = None,
    after: int | None = None,
    first: bool = False,
    last: bool = False,
) -> list[Change]:
    """Reorder the queue: ``job_ids`` (kept in the order given) go first, last, or just before or
    after another job. The order is stored, so every runner claims files in it (a job moved up gets
    the free workers first) and every front end lists it. Unknown jobs raise UsageError, and a job
    cannot move relative to itself; nothing changes then."""
    if [first, last, before is not None, after is not None].count(True) != 1:
        raise UsageError("Say where the jobs go: first, last, before a job or after a job")
    moving = _jobs(store, list(dict.fromkeys(job_ids)))
    anchor = before if before is not None else after
    if anchor is not None:
        store.job(anchor)  # an unknown anchor is a usage error too
        if anchor in {j.id for j in moving}:
            raise UsageError(f"Job {anchor} cannot move relative to itself")
    ids = {j.id for j in moving}
    rest = [j.id for j in store.jobs() if j.id not in ids]
    if first:
        at = 0
    elif last:
        at = len(rest)
    else:
        at = rest.index(anchor) + (1 if after is not None else 0)  # type: ignore[arg-type]
    store.set_order(rest[:at] + [j.id for j in moving] + rest[at:])
    return [Change(j.id, True, j.state) for j in moving]


def clear(store: Store, job_ids: Sequence[int] | None = None, *, include_failed: bool = False) -> int:
    """Remove finished jobs (done and cancelled; with ``include_failed`` failed ones too) from
    the queue, or only those of ``job_ids``; files are not touched. Returns how many went."""
    states = (*CLEARABLE, "failed") if include_failed else CLEARABLE
    wanted = None if job_ids is None else set(job_ids)
    return store.delete_jobs(j.id for j in store.jobs(states) if wanted is None or j.id in wanted)
