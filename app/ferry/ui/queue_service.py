"""Running the queue for the window, and reading it back in pages (no Qt here).

:class:`QueueService` runs :class:`ferry.transfers.scheduler.Runner` on a worker thread whenever
there is something queued, exactly as ``ferry queue run`` does; the window only adds jobs and
changes their states in the store. :class:`QueuePoller` reads the store on its own thread and
connection a few times a second and hands one :class:`QueueSnapshot` to a callback: progress is
data read on a timer, never a signal per chunk. Both hand results to the UI through a ``post``
callable supplied by :mod:`ferry.ui.bridge`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ferry.backends.registry import BackendPool
from ferry.core.errors import Action, FerryError
from ferry.core.outcomes import OutcomeCounts
from ferry.core.progress import Accounting, Snapshot
from ferry.credentials.sites import Site, SiteStore
from ferry.transfers.copy import AskFn
from ferry.transfers.scheduler import PARTIAL_BYTES_KEY, RunConfig, Runner
from ferry.transfers.store import JOB_FINISHED, Job, JobCounts, NewTask, Store, Task, TaskResult, default_store_path
from ferry.transfers.store import runner_id as this_runner
from ferry.transfers.tuning import STREAMS_KEY, TUNING_KEY, Choice
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
            runner.set_limits(parallel=0 if config.auto_parallel else config.parallel, bwlimit=config.bwlimit)

    @property
    def running(self) -> bool:
        return self._runner is not None

    def snapshot(self) -> Snapshot | None:
        with self._lock:
            runner = self._runner
        return runner.accounting.snapshot() if runner is not None else None

    def accounting(self) -> Accounting | None:
        """The running Runner's counters (thread-safe), for the bytes its jobs have in flight."""
        with self._lock:
            runner = self._runner
        return runner.accounting if runner is not None else None

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


def background_command(config: RunConfig) -> list[str]:
    """The ``ferry queue run`` that carries on the window's transfers, with its limits."""
    parallel = "auto" if config.auto_parallel else str(max(1, config.parallel))
    cmd = [sys.executable, "-m", "ferry", "queue", "run", "--parallel", parallel]
    if config.bwlimit:
        cmd += ["--bwlimit", str(config.bwlimit)]
    return cmd


def start_background_runner(store_path: Path | None, config: RunConfig) -> tuple[subprocess.Popen[bytes], Path]:
    """Start a headless ``ferry queue run`` that outlives the window; returns it and its log file.

    Call it after the window's own runner has stopped (so the jobs are free to claim). The
    process gets its own session, so closing the window, the terminal or the desktop session's
    process group does not stop it; it runs the queue until nothing is left and exits, writing
    what it did to ``background-run.log`` beside the queue database.
    """
    db = store_path or default_store_path()
    log_path = db.parent / "background-run.log"
    env = dict(os.environ, FERRY_QUEUE_DB=str(db))
    env.pop("QT_QPA_PLATFORM", None)  # the command line never loads Qt
    with open(log_path, "ab") as out:
        out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} started by the window on quit\n".encode())
        out.flush()
        proc = subprocess.Popen(
            background_command(config),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    return proc, log_path


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
    error_kind: str | None = None  # why the job stopped, as a value
    started: float | None = None  # wall time the job first ran
    partial_bytes: int = 0  # of bytes_done: in running files and kept partial files
    bytes_copied: int = 0  # of the files copied (not skipped): a finished job's average speed
    # The first failed file's cause (its typed kind and its words), shown at once, while the
    # job still runs its other files, and after it failed.
    problem_kind: str | None = None
    problem: str | None = None
    route: str | None = None  # "direct" (site to site) or "relay" (through Ferry) once started
    route_reason: str | None = None  # why it relayed where a direct route was possible (one sentence)
    # --parallel auto: files at once and why (tuning.Choice.describe). Never on a direct job: the
    # host, store or service moves its files, not the tuned workers.
    tuning: str | None = None
    # The ends as the person knows them, ``cluster:run42`` (saved sites' names; the full
    # addresses where no site holds them). The tooltip keeps the full addresses.
    shown_sources: tuple[str, ...] = ()
    shown_dest: str = ""

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
        sources = self.shown_sources or self.sources
        first = sources[0] if sources else "?"
        more = f" (+{len(sources) - 1})" if len(sources) > 1 else ""
        return f"{first}{more} → {self.shown_dest or self.dest}"


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
        self._speed_kind: dict[int, bool] = {}  # job id → its speed history counts live bytes moved
        # This window's runner's counters (bytes in flight), when it runs (QueueService.accounting).
        self.live: Callable[[], Accounting | None] | None = None
        self.on_thread_start: Callable[[], object] | None = None
        self.sites: Callable[[], list[Site]] = _saved_sites

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
        # The live counters first, then the store: a file the runner settles between the two
        # reads is then counted twice for a moment (capped at the total), never missed.
        acct = self.live() if self.live is not None else None
        flight = acct.partial_bytes() if acct is not None else {}
        moved = acct.moved_bytes() if acct is not None else {}
        me = this_runner()
        rows: list[JobRow] = []
        sites = self.sites()
        for job in store.jobs():
            cached = self._cache.get(job.id)
            if cached is not None and cached[0] == job.state and job.state in JOB_FINISHED:
                rows.append(cached[1])
                continue
            live = acct is not None and job.state == "running" and job.runner == me
            partial = flight.get(job.id, 0) if live else _saved_partial(store, job)
            c = store.counts(job.id)
            row = self._row(store, job, c, partial)
            shown = tuple(site_form(a, sites) for a in row.sources)
            row = dataclasses.replace(row, shown_sources=shown, shown_dest=site_form(row.dest, sites))
            # Speed from what this window's runner moved (not a resumed partial's bytes), else
            # from the change of the bytes done (a runner in another process).
            value = moved.get(job.id, 0) if live else row.bytes_done
            row = dataclasses.replace(row, speed=self._speed(job.id, job.state == "running", now, live, value))
            self._cache[job.id] = (job.state, row)
            rows.append(row)
        files = {jid: read_files(store, jid, n) for jid, n in list(self.expanded.items()) if n > 0}
        return QueueSnapshot(rows, files, time.time())

    def _row(self, store: Store, job: Job, c: JobCounts, partial: int) -> JobRow:
        finished = job.state in JOB_FINISHED
        done_bytes = c.size("done") + c.size("skipped") + partial
        failed = c.count("failed")
        first = next(store.tasks(job.id, states=("failed",), kinds=("file",), page=1), None) if failed else None
        return JobRow(
            id=job.id,
            state=job.state,
            message=job.message,
            sources=tuple(job.sources),
            dest=job.dest,
            verify=job.options.verify,
            files_total=c.files,
            files_done=c.count("done") + c.count("skipped"),
            files_failed=failed,
            files_skipped=c.count("skipped"),
            bytes_total=c.bytes,
            bytes_done=min(done_bytes, c.bytes) if c.bytes else done_bytes,
            planned=job.planned,
            created=job.created,
            finished=job.finished,
            watch=read_counters(store, job.id),
            # Counted once, when the job has finished (finished rows are cached): a query
            # over every task per poll would cost a big running job more than it tells.
            outcomes=store.outcome_counts(job.id) if finished else None,
            error_action=job.error_action,
            error_kind=job.error_kind,
            started=job.started,
            partial_bytes=partial,
            bytes_copied=c.size("done"),
            route=job.route,
            route_reason=job.route_reason,
            tuning=_tuning(store, job.id) if job.route != "direct" and (job.state == "running" or finished) else None,
            problem_kind=first.error_kind if first is not None else None,
            problem=first.error if first is not None else None,
        )

    def _speed(self, job_id: int, running: bool, now: float, live: bool, value: int) -> float:
        """Bytes per second over the last few seconds: files finish in bursts, so one poll's
        change would jump between zero and several times the real rate."""
        history = self._last.setdefault(job_id, deque())
        kind = self._speed_kind.get(job_id)
        if not running or kind != live or (history and value < history[-1][1]):
            history.clear()  # not running, or a new run (or another process's) counts anew
        self._speed_kind[job_id] = live
        if not running:
            return 0.0
        history.append((now, value))
        while len(history) > 2 and now - history[0][0] > SPEED_WINDOW:
            history.popleft()
        if len(history) > 1 and now > history[0][0]:
            return max(0.0, (value - history[0][1]) / (now - history[0][0]))
        return 0.0


def _saved_sites() -> list[Site]:
    """The saved sites, or none where the file cannot be read (the rows then show addresses)."""
    try:
        return SiteStore().list()
    except (FerryError, OSError):
        return []


def site_form(address: str, sites: list[Site]) -> str:
    """``address`` as ``site:rest`` under the saved site whose base holds it (the deepest one),
    as the panes and ``ferry cp`` write it; the address itself where none does, or where two
    sites share that base (which one the person meant is unknown)."""
    best: list[tuple[int, Site]] = []
    for site in sites:
        base = site.address.rstrip("/")
        if base and (address == base or address.startswith(base + "/")):
            best.append((len(base), site))
    if not best:
        return address
    depth = max(n for n, _ in best)
    found = [site for n, site in best if n == depth]
    if len(found) > 1:
        return address
    return f"{found[0].name}:{address[depth:].lstrip('/')}"


def _tuning(store: Store, job_id: int) -> str | None:
    """Files at once and why; then how the last big file moved, where one did in parallel."""
    raw = store.job_value(job_id, TUNING_KEY)
    choice = Choice.from_json(raw) if raw else None
    streams = store.job_value(job_id, STREAMS_KEY)
    said = [choice.describe()] if choice is not None else []
    if streams:
        said.append(f"big files: {streams}")
    return "; ".join(said) or None


def _saved_partial(store: Store, job: Job) -> int:
    """Bytes in flight the job's runner saved (another process's, or when it let go: a paused
    job's partial files)."""
    if job.state not in ("running", "queued", "paused"):
        return 0
    value = store.job_value(job.id, PARTIAL_BYTES_KEY)
    try:
        return max(0, int(value)) if value else 0
    except ValueError:
        return 0
