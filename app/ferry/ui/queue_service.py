"""Running the queue for the window, and reading it back in pages (no Qt here).

:class:`QueueService` runs :class:`ferry.transfers.scheduler.Runner` on a worker thread whenever
there is something queued, exactly as ``ferry queue run`` does; the window only adds jobs and
changes their states in the store. :class:`QueuePoller` reads the store on its own thread and
connection a few times a second and hands one :class:`QueueSnapshot` to a callback: progress is
data read on a timer, never a signal per chunk. Both hand results to the UI through a ``post``
callable supplied by :mod:`ferry.ui.bridge`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ferry.backends.registry import BackendPool
from ferry.core.errors import Action
from ferry.core.outcomes import OutcomeCounts
from ferry.core.progress import Snapshot
from ferry.transfers.copy import AskFn
from ferry.transfers.scheduler import RunConfig, Runner
from ferry.transfers.store import JOB_FINISHED, NewTask, Store, Task, TaskResult
from ferry.transfers.watch import WatchCounters, read_counters

log = logging.getLogger(__name__)

Post = Callable[[Callable[[], object]], None]
SPEED_WINDOW = 5.0  # seconds of history behind a job's speed


class SharedPool(BackendPool):
    """The window's one pool: panes and transfers share logins (one 2FA prompt per host).

    A Runner closes its pool when it finishes; here that must not log the panes out, so
    :meth:`close` does nothing and :meth:`close_all` closes for real when the window quits.
    """

    def close(self) -> None:
        pass

    def close_all(self) -> None:
        super().close()


class _Listener:
    def __init__(self, service: QueueService) -> None:
        self.service = service

    def task_finished(self, job_id: int, task: Task | NewTask, result: TaskResult) -> None:
        pass

    def job_changed(self, job_id: int, state: str, message: str | None) -> None:
        cb = self.service.on_job_changed
        if cb is not None:
            self.service.post(lambda: cb(job_id, state, message))

    def waiting(self, until: datetime | None, why: str) -> None:
        self.service.waiting = why if until is not None else ""


class QueueService:
    """Runs queued jobs in this process on one coordinator thread (plus the Runner's workers)."""

    def __init__(
        self,
        store_path: Path | None,
        pool: SharedPool,
        post: Post,
        *,
        ask: AskFn | None = None,
        config: Callable[[], RunConfig] = RunConfig,
    ) -> None:
        self.store_path = store_path
        self.pool = pool
        self.post = post
        self.ask = ask
        self.config = config
        self.on_job_changed: Callable[[int, str, str | None], object] | None = None
        self.on_idle: Callable[[], object] | None = None
        self.on_thread_start: Callable[[], object] | None = None  # e.g. lower this thread's priority
        self.waiting = ""
        self._wake = threading.Event()
        self._quit = threading.Event()
        self._lock = threading.Lock()
        self._runner: Runner | None = None
        self._thread = threading.Thread(target=self._loop, name="ferry-ui-queue", daemon=True)
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()
        self.wake()

    def wake(self) -> None:
        """Something was queued or resumed: run (a running Runner admits new jobs by itself)."""
        self._wake.set()

    def apply_limits(self) -> None:
        """The settings changed: the run in progress takes the new bandwidth limit and parallelism."""
        config = self.config()
        with self._lock:
            runner = self._runner
        if runner is not None:
            runner.set_limits(parallel=config.parallel, bwlimit=config.bwlimit)

    @property
    def running(self) -> bool:
        return self._runner is not None

    def snapshot(self) -> Snapshot | None:
        with self._lock:
            runner = self._runner
        return runner.accounting.snapshot() if runner is not None else None

    def _loop(self) -> None:
        if self.on_thread_start is not None:
            self.on_thread_start()
        store = Store(self.store_path)
        try:
            while not self._quit.is_set():
                self._wake.wait()
                if self._quit.is_set():
                    break
                self._wake.clear()
                runner = Runner(store, self.config(), listener=_Listener(self), ask=self.ask, pool=self.pool)
                with self._lock:
                    self._runner = runner
                try:
                    runner.run()
                except Exception:
                    log.exception("the queue runner stopped with an error")
                finally:
                    with self._lock:
                        self._runner = None
                if not self._wake.is_set() and self.on_idle is not None:
                    self.post(self.on_idle)
        finally:
            store.close()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop running: files in flight keep their partial data and go back to the queue."""
        self._quit.set()
        with self._lock:
            runner = self._runner
        if runner is not None:
            runner.stop("interrupted")
        self._wake.set()
        if self._started:
            self._thread.join(timeout)


# ---------------------------------------------------------------- reading the queue


@dataclass(frozen=True)
class JobRow:
    id: int
    state: str
    message: str | None
    sources: tuple[str, ...]
    dest: str
    verify: str
    files_total: int
    files_done: int
    files_failed: int
    files_skipped: int
    bytes_total: int
    bytes_done: int
    planned: bool
    created: float
    finished: float | None
    speed: float = 0.0  # bytes/s, from the change since the last read
    watch: WatchCounters | None = None  # a folder watch's counters (saved by the watcher every second)
    # Finished jobs: how their files ended, by verification level reached, skip reason and error
    # kind (the Verify column shows it; never the configured method on a job that did not copy).
    outcomes: OutcomeCounts | None = None
    error_action: Action | None = None  # what the Fix button offers, as a value

    @property
    def fraction(self) -> float:
        if self.bytes_total:
            return min(1.0, self.bytes_done / self.bytes_total)
        return 1.0 if self.files_total and self.files_done >= self.files_total else 0.0

    @property
    def eta(self) -> float | None:
        if self.speed <= 0 or not self.planned or self.state != "running":
            return None
        return max(0.0, (self.bytes_total - self.bytes_done) / self.speed)

    @property
    def title(self) -> str:
        first = self.sources[0] if self.sources else "?"
        more = f" (+{len(self.sources) - 1})" if len(self.sources) > 1 else ""
        return f"{first}{more} → {self.dest}"


@dataclass(frozen=True)
class FileRow:
    id: int
    rel: str
    state: str
    size: int | None
    verified: str | None
    error: str | None
    attempts: int


@dataclass
class QueueSnapshot:
    jobs: list[JobRow]
    files: dict[int, list[FileRow]] = field(default_factory=dict)  # for expanded jobs only
    taken: float = 0.0


def read_files(store: Store, job_id: int, limit: int) -> list[FileRow]:
    out: list[FileRow] = []
    for t in store.tasks(job_id, page=min(limit, 2000)):
        out.append(FileRow(t.id, t.rel, t.state, t.size, t.verified, t.error, t.attempts))
        if len(out) >= limit:
            break
    return out


class QueuePoller:
    """Reads the queue a few times a second on its own thread and connection."""

    def __init__(self, store_path: Path | None, post: Post, deliver: Callable[[QueueSnapshot], object]) -> None:
        self.store_path = store_path
        self.post = post
        self.deliver = deliver
        self.interval = 0.3
        self.expanded: dict[int, int] = {}  # job id → how many files the view has loaded
        self._stop = threading.Event()
        self._now = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ferry-ui-poll", daemon=True)
        self._cache: dict[int, tuple[str, JobRow]] = {}  # finished jobs are not counted again
        self._last: dict[int, deque[tuple[float, int]]] = {}
        self.on_thread_start: Callable[[], object] | None = None

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        """Read again now (after a job was added or changed)."""
        self._now.set()

    def stop(self) -> None:
        self._stop.set()
        self._now.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _loop(self) -> None:
        if self.on_thread_start is not None:
            self.on_thread_start()
        store = Store(self.store_path)
        try:
            while not self._stop.is_set():
                try:
                    snap = self.read(store)
                except Exception:
                    log.exception("reading the queue failed")
                else:
                    self.post(lambda s=snap: self.deliver(s))  # type: ignore[misc]
                self._now.wait(self.interval)
                self._now.clear()
        finally:
            store.close()

    def read(self, store: Store) -> QueueSnapshot:
        now = time.monotonic()
        rows: list[JobRow] = []
        for job in store.jobs():
            cached = self._cache.get(job.id)
            if cached is not None and cached[0] == job.state and job.state in JOB_FINISHED:
                rows.append(cached[1])
                continue
            c = store.counts(job.id)
            done_bytes = c.size("done") + c.size("skipped")
            # Speed over the last few seconds: files finish in bursts, so one poll's change
            # would jump between zero and several times the real rate.
            history = self._last.setdefault(job.id, deque())
            history.append((now, done_bytes))
            while len(history) > 2 and now - history[0][0] > SPEED_WINDOW:
                history.popleft()
            speed = 0.0
            if job.state == "running" and len(history) > 1 and now > history[0][0]:
                speed = max(0.0, (done_bytes - history[0][1]) / (now - history[0][0]))
            row = JobRow(
                id=job.id,
                state=job.state,
                message=job.message,
                sources=tuple(job.sources),
                dest=job.dest,
                verify=job.options.verify,
                files_total=c.files,
                files_done=c.count("done") + c.count("skipped"),
                files_failed=c.count("failed"),
                files_skipped=c.count("skipped"),
                bytes_total=c.bytes,
                bytes_done=done_bytes,
                planned=job.planned,
                created=job.created,
                finished=job.finished,
                speed=speed,
                watch=read_counters(store, job.id),
                # Counted once, when the job has finished (finished rows are cached): a query
                # over every task per poll would cost a big running job more than it tells.
                outcomes=store.outcome_counts(job.id) if job.state in JOB_FINISHED else None,
                error_action=job.error_action,
            )
            self._cache[job.id] = (job.state, row)
            rows.append(row)
        files = {jid: read_files(store, jid, n) for jid, n in list(self.expanded.items()) if n > 0}
        return QueueSnapshot(rows, files, time.time())
