"""The few calls scripts and running codes need, without the command line.

    import ferry.api as ferry
    job = ferry.enqueue(["/scratch/out/step_0001.h5"], "/mnt/archive/run42/")
    ferry.copy(["results/"], "/mnt/archive/", recursive=True)     # runs now, returns when verified
    print(ferry.status(job)["state"])

Everything here drives the same engine and queue as ``ferry cp`` / ``ferry queue``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ferry.backends.registry import BackendPool
from ferry.core.errors import UsageError
from ferry.transfers.options import JobOptions
from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import Store, runner_id

__all__ = ["JobResult", "copy", "enqueue", "status", "wait"]


@dataclass(frozen=True)
class JobResult:
    job_id: int
    state: str  # done, failed, paused, cancelled, queued (interrupted)
    files_done: int
    files_failed: int
    bytes_done: int

    @property
    def ok(self) -> bool:
        return self.state == "done"


def _prepare(sources: list[str], dest: str, options: JobOptions, store: Store, **job: Any) -> int:
    from ferry.cli.transfer_common import create_job, prepare_job

    with BackendPool() as pool:
        srcs, dst, roots = prepare_job(sources, dest, options.recursive, pool)
    return create_job(store, srcs, dst, roots, options, **job)


def enqueue(
    sources: list[str],
    dest: str,
    *,
    recursive: bool = False,
    verify: str = "sha256",
    on_conflict: str = "skip",
    store: Store | None = None,
) -> int:
    """Record a job for ``ferry queue run`` (or :func:`copy`-style running later); return its id."""
    st = store or Store()
    opts = JobOptions(recursive=recursive, verify=verify, on_conflict=on_conflict)
    return _prepare(list(sources), dest, opts, st)


def copy(
    sources: list[str],
    dest: str,
    *,
    recursive: bool = False,
    verify: str = "sha256",
    on_conflict: str = "skip",
    parallel: int = 4,
    bwlimit: int | None = None,
    store: Store | None = None,
) -> JobResult:
    """Copy now, in this process, and return when the job has finished (or stopped)."""
    st = store or Store()
    opts = JobOptions(recursive=recursive, verify=verify, on_conflict=on_conflict, bwlimit=bwlimit)
    job_id = _prepare(list(sources), dest, opts, st, state="running", runner=runner_id())
    summary = Runner(st, RunConfig(parallel=parallel, job_ids=[job_id])).run()
    return _result(st, job_id, summary.jobs.get(job_id))


def _result(store: Store, job_id: int, state: str | None = None) -> JobResult:
    job = store.job(job_id)
    c = store.counts(job_id)
    return JobResult(
        job_id=job_id,
        state=state or job.state,
        files_done=c.count("done") + c.count("skipped"),
        files_failed=c.count("failed"),
        bytes_done=c.size("done") + c.size("skipped"),
    )


def status(job_id: int, store: Store | None = None) -> dict[str, Any]:
    st = store or Store()
    r = _result(st, job_id)
    job = st.job(job_id)
    return {
        "job": job_id,
        "state": r.state,
        "message": job.message,
        "files_done": r.files_done,
        "files_failed": r.files_failed,
        "bytes_done": r.bytes_done,
    }


def wait(job_id: int, timeout: float | None = None, store: Store | None = None, poll: float = 0.5) -> JobResult:
    """Block until a job run by someone else (``ferry queue run``) finishes; raise on timeout."""
    st = store or Store()
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        job = st.job(job_id)
        if job.state in ("done", "failed", "cancelled", "paused"):
            return _result(st, job_id)
        if deadline is not None and time.monotonic() > deadline:
            raise UsageError(f"Job {job_id} is still {job.state} after {timeout} s")
        time.sleep(poll)
