"""The transfers panel's per-job actions, through the engine's job control (no Qt).

Pause, resume, cancel, retry, clear and the queue's order are :mod:`ferry.transfers.control`, the
same calls ``ferry queue`` and ``ferry.api`` make; here they only come back as counts for the
status bar. :func:`job_log` reads what the log view shows: each failure's typed error kind, the
action it suggests, its attempts and message, from the store.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ferry.backends.registry import BackendPool
from ferry.core.errors import Action, action_for_kind
from ferry.transfers import control
from ferry.transfers.store import Store, Task


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


def addresses_text(jobs: Sequence[tuple[Sequence[str], str]]) -> str:
    """"Copy addresses": one line per job, its sources then its destination, quoted for a shell
    (paste after ``ferry cp -r`` to do it again)."""
    return "\n".join(shlex.join([*sources, dest]) for sources, dest in jobs)


@dataclass(frozen=True)
class LogEntry:
    """One failed file, as the store recorded it (values, not sentences, for what it was)."""

    path: str  # relative to the job's destination
    kind: str  # the error kind (core/errors.py), "error" when unknown
    action: Action  # what the person can do about it
    attempts: int
    message: str  # the sentence recorded for people
    detail: str = ""  # the error's technical detail (an errno, an HTTP status and code), when it had one


@dataclass(frozen=True)
class JobLog:
    job_id: int
    state: str
    sources: tuple[str, ...]
    dest: str
    message: str
    kind: str | None
    action: Action | None
    failed: tuple[LogEntry, ...]
    more: int  # failed files beyond those read (a big job's log stays small)


def job_log(store: Store, job_id: int, limit: int = 500) -> JobLog:
    job = store.job(job_id)
    tasks: list[Task] = []
    for t in store.tasks(job_id, states=("failed",)):
        if len(tasks) >= limit:
            break
        tasks.append(t)
    details = store.error_details([t.id for t in tasks])
    failed = [
        LogEntry(
            t.rel,
            t.error_kind or "error",
            action_for_kind(t.error_kind or "error"),
            t.attempts,
            t.error or "",
            details.get(t.id, ""),
        )
        for t in tasks
    ]
    more = max(0, store.counts(job_id).count("failed") - len(failed))
    return JobLog(
        job.id,
        job.state,
        tuple(job.sources),
        job.dest,
        job.message or "",
        job.error_kind,
        job.error_action,
        tuple(failed),
        more,
    )


def log_text(log: JobLog) -> str:
    """The log view's text: the job's state and stop reason, then each failed file."""
    lines = [f"Job {log.job_id}: {log.state}" + (f" — {log.message}" if log.message else "")]
    lines += [f"  from: {s}" for s in log.sources] + [f"  to:   {log.dest}"]
    if log.kind or log.action:
        lines.append(f"  error kind: {log.kind or '-'}; suggested action: {(log.action or Action.NONE).value}")
    if not log.failed:
        lines.append("No failed files.")
        return "\n".join(lines)
    lines.append(f"Failed files ({len(log.failed) + log.more:,}):")
    for e in log.failed:
        lines.append(f"  {e.path}")
        lines.append(f"    kind: {e.kind}; suggested action: {e.action.value}; attempts: {e.attempts}")
        if e.message:
            lines.append(f"    {e.message}")
        if e.detail:
            lines.append(f"    detail: {e.detail}")
    if log.more:
        lines.append(f"  … and {log.more:,} more ('ferry queue show {log.job_id} --files' lists them all)")
    return "\n".join(lines)
