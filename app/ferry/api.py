"""The few calls scripts and running codes need, without the command line.

    import ferry.api as ferry
    job = ferry.enqueue(["/scratch/out/step_0001.h5"], "/mnt/archive/run42/")
    ferry.copy(["results/"], "/mnt/archive/", recursive=True)     # runs now, returns when verified
    print(ferry.status(job)["state"])
    ferry.move(["run41/"], "cluster:/archive/", recursive=True)  # sources go once their copies verified
    ferry.pause(job); ferry.resume(job)                      # the same job control as 'ferry queue'

    from ferry.api import Shipper            # ship each output while the code keeps computing
    with Shipper("cluster:/archive/run42") as s:
        for step in range(20):
            path = simulate(step)            # your code writes a file...
            s.ship(path)                     # ...which leaves at once, in the background
    # leaving the block waits until everything is verified, or raises ShipFailed with the failures

Everything here drives the same engine and queue as ``ferry cp`` / ``ferry queue``.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from ferry.backends.registry import BackendPool
from ferry.core.errors import FerryError, NotFound, UsageError
from ferry.transfers import control, jobs
from ferry.transfers.options import JobOptions
from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import Store, runner_id

__all__ = [
    "Failure",
    "JobResult",
    "ShipFailed",
    "ShipTimeout",
    "Shipper",
    "cancel",
    "copy",
    "enqueue",
    "move",
    "pause",
    "resume",
    "retry",
    "status",
    "wait",
]


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
    with BackendPool() as pool:
        return jobs.new_job(store, pool, sources, dest, options, **job)


def enqueue(
    sources: list[str],
    dest: str,
    *,
    recursive: bool = False,
    verify: str = "sha256",
    on_conflict: str = "skip",
    move: bool = False,
    allow_unverified_move: bool = False,
    store: Store | None = None,
) -> int:
    """Record a job for ``ferry queue run`` (or :func:`copy`-style running later); return its id.
    With ``move`` each source is deleted once its copy is checksum-verified (as ``ferry mv``)."""
    st = store or Store()
    opts = JobOptions(
        recursive=recursive,
        verify=verify,
        on_conflict=on_conflict,
        move=move,
        allow_unverified_move=allow_unverified_move,
    )
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
    move: bool = False,
    allow_unverified_move: bool = False,
    store: Store | None = None,
) -> JobResult:
    """Copy now, in this process, and return when the job has finished (or stopped)."""
    st = store or Store()
    opts = JobOptions(
        recursive=recursive,
        verify=verify,
        on_conflict=on_conflict,
        bwlimit=bwlimit,
        move=move,
        allow_unverified_move=allow_unverified_move,
    )
    job_id = _prepare(list(sources), dest, opts, st, state="running", runner=runner_id())
    summary = Runner(st, RunConfig(parallel=parallel, job_ids=[job_id])).run()
    return _result(st, job_id, summary.jobs.get(job_id))


def move(sources: list[str], dest: str, **kw: Any) -> JobResult:
    """:func:`copy` with ``move=True``: each source is deleted once its copy is checksum-verified
    and the source still hashes the same; folders once everything in them was moved."""
    return copy(sources, dest, move=True, **kw)


# ---- job control: the same calls as 'ferry queue pause|resume|cancel|retry' and the window


def pause(job_id: int, store: Store | None = None) -> bool:
    """Pause a queued or running job (its runner stops within a second); False if it was neither."""
    return control.pause(store or Store(), [job_id])[0].applied


def resume(job_id: int, store: Store | None = None) -> bool:
    return control.resume(store or Store(), [job_id])[0].applied


def cancel(job_id: int, store: Store | None = None) -> bool:
    return control.cancel(store or Store(), [job_id])[0].applied


def retry(job_id: int, on_conflict: str | None = None, store: Store | None = None) -> int:
    """Queue a job's failed files again (optionally under another conflict policy); how many."""
    return control.retry(store or Store(), [job_id], on_conflict)[0].files


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


# ---------------------------------------------------------------- Shipper


@dataclass(frozen=True)
class Failure:
    path: str  # the source file
    error: str


class ShipFailed(FerryError):
    """Raised by :meth:`Shipper.finish` when files did not all arrive verified."""

    kind = "ship-failed"

    def __init__(self, message: str, failures: list[Failure], *, job_id: int, state: str) -> None:
        super().__init__(message, "\n".join(f"{f.path}: {f.error}" for f in failures[:50]))
        self.failures = failures
        self.job_id = job_id
        self.state = state


class ShipTimeout(FerryError, TimeoutError):
    """Raised by :meth:`Shipper.finish` when its timeout passed first; the files keep going."""

    kind = "timeout"
    retriable = True

    def __init__(self, message: str, pending: list[str], *, job_id: int) -> None:
        super().__init__(message)
        self.pending = pending
        self.job_id = job_id


class Shipper:
    """Ship files to ``dest`` as a running code produces them: two calls, ``ship`` and ``finish``.

    Each :meth:`ship` records the file as a task of one live job in the ordinary queue and returns
    at once; a runner thread in this process (``background=True``, the default) starts sending it
    within a fraction of a second, with the job's verification and conflict policy, while the code
    goes on computing. :meth:`finish` says no more files will come and blocks until everything
    shipped has arrived verified; it raises :class:`ShipFailed` (with ``.failures``) if not, and
    :class:`ShipTimeout` if ``timeout`` passes first.

    With ``background=False`` nothing runs here: the job waits in the queue for a ``ferry queue
    run`` (e.g. on a data-transfer node sharing the queue), and ``finish`` waits for that.

    If the process dies before ``finish``, the job stays in the queue: the next ``ferry queue run``
    ships what was recorded (this process no longer feeds it, so it finishes there).
    """

    def __init__(
        self,
        dest: str,
        *,
        verify: str = "sha256",
        on_conflict: str = "ask",
        parallel: int = 4,
        bwlimit: int | None = None,
        background: bool = True,
        store: Store | None = None,
    ) -> None:
        from ferry.backends.local import LocalBackend
        from ferry.transfers import watch_live
        from ferry.transfers.jobs import canonical, resolve

        self.store = st = store or Store()
        self._pool = watch_live.LentPool()  # one login per host, shared with the runner
        self._dest_text = dest
        dst_addr = resolve(dest)
        self._dst = self._pool.get(dst_addr)
        self._dst_root = dst_addr.path
        try:
            entry = self._dst.stat(self._dst_root)
        except NotFound:
            self._dst.mkdir(self._dst_root, parents=True, exist_ok=True)
        else:
            if not entry.is_dir:
                raise UsageError(f"Cannot ship into {dest}: it is a file, not a folder")
        self._src = LocalBackend()
        opts = JobOptions(recursive=True, verify=verify, on_conflict=on_conflict)
        me = runner_id()
        self.job_id = st.create_job(
            [os.getcwd()],
            canonical(dst_addr),
            opts,
            [],
            state="running" if background else "queued",
            runner=me if background else None,
        )
        st.set_job_value(self.job_id, "shipper", dest)
        self._heartbeat = watch_live.Heartbeat(st, self.job_id)
        self._heartbeat.start()
        self._lock = threading.Lock()
        self._closed = False
        self._runner: Runner | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        if background:
            self._runner = Runner(
                st, RunConfig(parallel=parallel, bwlimit=bwlimit, job_ids=[self.job_id]), pool=self._pool
            )
            self._thread = threading.Thread(target=self._run, name=f"ferry-shipper-{self.job_id}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        assert self._runner is not None
        try:
            self._runner.run()
        except BaseException as exc:
            self._error = exc

    # ---- the two calls ----
    def ship(self, path: str | os.PathLike[str], name: str | None = None) -> None:
        """Queue ``path`` (a file, or a folder with everything in it) to leave now, as ``dest/name``
        (default: its own name). Shipping the same path again after it changed sends it again."""
        from ferry.transfers.planner import Root, expand, mtime_us, unsafe_reason

        if self._closed:
            raise UsageError("This Shipper is finished; make a new one to ship more")
        src = os.path.abspath(os.fspath(path))
        try:
            entry = self._src.stat(src)
        except NotFound:
            raise NotFound(f"Nothing to ship: {src} does not exist") from None
        target = name or entry.name
        reason = unsafe_reason(target)
        if reason:
            raise UsageError(f"Cannot ship {src} as {target!r}: {reason}")
        root = Root(self._src, entry, self._dst, self._dst.join(self._dst_root, target), target)
        tasks = list(expand([root]))
        with self._lock:
            added = self.store.add_tasks(self.job_id, tasks)
            if not added and entry.is_file:
                # Shipped before: send again if it changed since (an output rewritten in place).
                for t in self.store.tasks(self.job_id, kinds=("file",), order_desc=True):
                    if t.src == src:
                        if (t.size, t.mtime_us) != (entry.size, mtime_us(entry.mtime)):
                            self.store.requeue_task(t.id, entry.size, mtime_us(entry.mtime))
                        break
        runner = self._runner
        files = [t for t in added if t.kind == "file"]
        if runner is not None and files:
            runner.accounting.add_total(len(files), sum(t.size or 0 for t in files))

    def finish(self, timeout: float | None = None) -> JobResult:
        """No more files: block until everything shipped has arrived verified.

        Returns the job's result; raises :class:`ShipFailed` listing the failures, or
        :class:`ShipTimeout` (the transfers go on) when ``timeout`` seconds pass first.
        """
        from ferry.transfers import watch_live

        if not self._closed:
            self._closed = True
            watch_live.close_feed(self.store, self.job_id)
            self._heartbeat.stop()
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise self._timeout(timeout)
            if self._error is not None:
                raise self._error
        else:
            while self.store.job(self.job_id).state not in ("done", "failed", "cancelled", "paused"):
                if deadline is not None and time.monotonic() >= deadline:
                    raise self._timeout(timeout)
                time.sleep(0.1)
        self._pool.release()  # nothing more will be sent from here
        result = _result(self.store, self.job_id)
        job = self.store.job(self.job_id)
        if job.state != "done":
            failures = self.failures()
            pending = [t.src for t in self.store.tasks(self.job_id, states=("queued", "running"), kinds=("file",))]
            failures += [Failure(p, job.message or f"not shipped: the job is {job.state}") for p in pending]
            raise ShipFailed(
                f"{len(failures)} file(s) did not arrive verified in {self._dest_text} (job {self.job_id}, "
                f"{job.state})" + (f": {job.message}" if job.message else ""),
                failures,
                job_id=self.job_id,
                state=job.state,
            )
        return result

    def failures(self) -> list[Failure]:
        return [
            Failure(t.src, t.error or "failed")
            for t in self.store.tasks(self.job_id, states=("failed",))
            if t.kind in ("file", "dir", "link")
        ]

    def _timeout(self, timeout: float | None) -> ShipTimeout:
        pending = [t.src for t in self.store.tasks(self.job_id, states=("queued", "running"), kinds=("file",))]
        return ShipTimeout(
            f"{len(pending)} file(s) still on their way to {self._dest_text} after {timeout} s (job {self.job_id}); "
            "they keep going while this process lives, and 'ferry queue run' finishes them otherwise",
            pending,
            job_id=self.job_id,
        )

    def status(self) -> dict[str, Any]:
        return status(self.job_id, self.store)

    def close(self) -> None:
        """Stop now without waiting: what is unsent stays queued for 'ferry queue run'."""
        from ferry.transfers import watch_live

        if not self._closed:
            self._closed = True
            watch_live.close_feed(self.store, self.job_id)
            self._heartbeat.stop()
        if self._runner is not None:
            self._runner.stop("interrupted")
        if self._thread is not None:
            self._thread.join()
        self._pool.release()

    def __enter__(self) -> Shipper:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if et is None:
            try:
                self.finish()
            finally:
                self._pool.release()
            return
        if not issubclass(et, Exception):  # Ctrl+C, SystemExit: stop now; the queue keeps the rest
            self.close()
            return
        # The code failed: still deliver what it produced so far, but never hide its own error.
        try:
            self.finish()
        except FerryError:
            pass
        finally:
            self._pool.release()
