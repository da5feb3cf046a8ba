"""The scheduler: feeds queued tasks from the store to worker threads and records what happened.

One coordinator (the thread that calls :meth:`Runner.run`) owns every write to the store except
the planners' batched inserts: it claims tasks in small batches, hands them to a pool of workers
through a bounded queue, and writes their results back in batches, so a million small files do
not mean a million transactions. Workers never touch the database.

Limits: a global worker count (``--parallel``), per-endpoint semaphores (a backend's
``max_connections``), token buckets for ``--bwlimit``. Transient errors (a dropped or refused
connection, a server restarting, S3 500/503 storms) retry with exponential backoff and jitter:
``max_attempts`` times, and beyond that for as long as the job's *patience* lasts (``--patience``,
by default an hour for ``ferry queue run``), counted from the first of these failures in a row;
each attempt reconnects as needed. A job that cannot start or be walked for such a reason waits
the same way. Permanent errors leave the task FAILED with a message and retryable; a full
destination pauses the job. Pause, resume and cancel from another process (``ferry queue pause``)
are seen within half a second through the store.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from ferry.backends.base import Backend, NoDirectRoute, temp_name
from ferry.backends.registry import BackendPool
from ferry.core.address import parse_address
from ferry.core.cancel import CancelToken
from ferry.core.errors import (
    Action,
    Cancelled,
    ChecksumMismatch,
    FerryError,
    NoSpace,
    NotFound,
    Transient,
    UsageError,
    action_for_kind,
    describe,
    error_kind,
    from_oserror,
)
from ferry.core.outcomes import SkipReason
from ferry.core.progress import Accounting
from ferry.core.schedule import Window, now_local, parse_window
from ferry.transfers import batch, move, sync, sync_delete, watch_live
from ferry.transfers.bandwidth import Limiters, TokenBucket
from ferry.transfers.copy import AskFn, CopyContext, Outcome, run_task
from ferry.transfers.delegated import DelegatedRun, Delegation, choose_route, job_route
from ferry.transfers.options import Route
from ferry.transfers.planner import Root, destination_roots, expand, from_us
from ferry.transfers.store import Job, NewTask, Store, Task, TaskResult, runner_id
from ferry.transfers.tuning import STREAMS_KEY, TUNING_KEY, Choice, Gate, Tuner

log = logging.getLogger(__name__)
NO_NETWORK = frozenset({"local", "memory"})  # schemes whose files wait on no round trip (tuning)
STREAM_PLAN_MIN = 64 << 20  # files from this size may move in parallel streams (Backend.stream_plan)

TICK = 0.1
IDLE_WAIT = 0.02  # the longest the coordinator waits for a result before looking at the store again
BATCH_GAP = 0.02  # while results stream in, the least time between two writes of them (as the old tick)
POLL_JOBS = 0.5
PARTIAL_BYTES_KEY = "partial_bytes"  # job value: bytes in flight when last saved (see _record_partials)
FIRST_PLAN_BATCH = 16  # tasks in the planner's first insert; each next one is 4x bigger up to plan_batch
HEARTBEAT = 5.0
DEFAULT_PATIENCE = 3600.0  # seconds a queue run keeps retrying transient failures (a night's outage)


class Listener(Protocol):
    def task_finished(self, job_id: int, task: Task | NewTask, result: TaskResult) -> None: ...
    def job_changed(self, job_id: int, state: str, message: str | None) -> None: ...
    def waiting(self, until: datetime | None, why: str) -> None: ...


class NullListener:
    def task_finished(self, job_id: int, task: Task | NewTask, result: TaskResult) -> None:
        pass

    def job_changed(self, job_id: int, state: str, message: str | None) -> None:
        pass

    def waiting(self, until: datetime | None, why: str) -> None:
        pass


@dataclass
class RunConfig:
    parallel: int = 4  # with auto_parallel: the most it may try
    auto_parallel: bool = False
    bwlimit: int | None = None
    window: Window | None = None
    start_at: datetime | None = None
    job_ids: list[int] | None = None  # only these jobs (``ferry cp`` runs its own)
    # Never these jobs: another Runner of this process feeds and runs them (the window's folder
    # watches); the set may grow while this Runner runs.
    skip_job_ids: Container[int] = frozenset()
    max_attempts: int = 5  # transient failures are retried at least this often ...
    # ... and beyond that while this many seconds have not passed since the first of them (a
    # job's own --patience wins); None: max_attempts only.
    patience: float | None = None
    backoff_base: float = 1.0
    backoff_cap: float = 60.0  # also at most a sixth of the patience, so a short one still retries often
    plan_batch: int = 1000


@dataclass
class RunSummary:
    jobs: dict[int, str] = field(default_factory=dict)  # final state per job touched
    stopped: str = ""  # why the run ended early: "interrupted", "window", or ""


@dataclass
class _JobRun:
    job: Job
    src: Backend
    dst: Backend
    ctx: CopyContext
    cancel: CancelToken
    window: Window | None
    planner: threading.Thread | None = None
    planner_error: BaseException | None = None
    planned: bool = False
    inflight: int = 0
    stopping: str = ""  # pause, cancel, window, shutdown, no-space
    stop_message: str | None = None
    failed: int = 0
    tokens: dict[int, CancelToken] = field(default_factory=dict)
    delegated: bool = False  # a service moves the bytes (Globus): no tasks for our workers
    stream_plan: str | None = None  # the last big file's connections and streams, as recorded
    sems: list[threading.Semaphore] = field(default_factory=list)  # per-endpoint connection limits
    mover: threading.Thread | None = None  # a Move job deleting its proven sources (move.run_move)
    move_error: BaseException | None = None
    syncer: threading.Thread | None = None  # a --delete sync making its deletions (sync_delete)
    sync_note: str = ""  # what they did, for the job's message


@dataclass
class _Waiting:
    """A job that could not start or be walked for a transient reason, waiting to try again."""

    first: float  # wall time of the first of these failures in a row
    attempts: int = 0
    not_before: float = 0.0


@dataclass
class _Done:
    run: _JobRun
    task: Task
    outcome: Outcome | None
    error: BaseException | None


class Runner:
    def __init__(
        self,
        store: Store,
        config: RunConfig,
        *,
        listener: Listener | None = None,
        ask: AskFn | None = None,
        pool: BackendPool | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.listener: Listener = listener or NullListener()
        self.ask = ask
        self.pool = pool or BackendPool()
        self.accounting = Accounting()
        self.runner = runner_id()
        self._stop = CancelToken()
        # Always present, so a limit set while the run goes on applies to it (None lets all through).
        self._global_bucket = TokenBucket(config.bwlimit)
        self._runs: dict[int, _JobRun] = {}
        # (sized for 16 at once: with --parallel auto, config.parallel is the most it may try, 128,
        # and claiming 8,192 tasks before the first file starts cost small-file runs time)
        ahead = max(1024, min(config.parallel, 16) * 64)
        self._work: queue.Queue[tuple[_JobRun, Task] | None] = queue.Queue(maxsize=ahead)
        # Claimed from the store ahead of the workers: enough that small files never wait on the
        # database, few enough that a pause hands back little.
        self._claim_batch = ahead
        # Results from the workers; None is a wake-up (a planner queued new tasks).
        self._done: queue.Queue[_Done | None] = queue.Queue()
        self._last_write = 0.0
        self._sems: dict[str, threading.Semaphore] = {}
        self._sem_lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._summary = RunSummary()
        # Transient failures in a row, by task id and by job id (wall time of the first): how long
        # the patience has been tried. Kept for this run only: a new run is patient anew.
        self._first_transient: dict[int, float] = {}
        self._waiting: dict[int, _Waiting] = {}
        self._gate = Gate(config.parallel)
        self.tuner = Tuner(self._gate, config.parallel) if config.auto_parallel else None

    # ---- control from other threads ----
    def set_limits(self, *, parallel: int | None = None, bwlimit: int | None = None) -> None:
        """Apply new limits to this run as it goes: the bandwidth limit from the next chunk on, a
        lower worker count as running files finish (never more workers than the run started);
        ``parallel=0`` hands the count to the tuner (``--parallel auto``)."""
        self._global_bucket.set_rate(bwlimit)
        if parallel is None:
            return
        if parallel == 0:  # auto: tune within the workers this run started
            if self.tuner is None:
                self.tuner = Tuner(self._gate, max(1, self.config.parallel))
            return
        self.tuner = None
        self._gate.set_limit(min(parallel, max(1, self.config.parallel)))

    def stop(self, reason: str = "interrupted") -> None:
        """Stop soon: running files keep their partial data and go back to the queue."""
        self._summary.stopped = self._summary.stopped or reason
        self._stop.cancel("shutdown")

    def _ensure_workers(self) -> None:
        """Worker threads up to the gate's limit, never more than the run's ``--parallel``: a tuned
        run starts 4 and adds threads as the tuner allows more. (128 threads waiting at the gate
        from the start cost a small-file run between local disks a tenth of its time: each file's
        hand-off woke one of them.) Threads stay once started; the gate holds the surplus back."""
        want = min(self._gate.limit, max(1, self.config.parallel))
        while len(self._workers) < want:
            w = threading.Thread(target=self._worker, name=f"ferry-worker-{len(self._workers)}", daemon=True)
            self._workers.append(w)
            w.start()

    # ---- main loop ----
    def run(self) -> RunSummary:
        self._ensure_workers()
        try:
            self._loop()
        finally:
            self._shutdown()
        return self._summary

    def _loop(self) -> None:
        if self.config.start_at is not None:
            self._wait_until(self.config.start_at, "waiting for the start time")
        window = self.config.window
        if window is not None and not window.contains(now_local()):
            self._wait_until(window.next_open(now_local()), f"waiting for the time window {window}")
        last_poll = last_beat = 0.0
        buffered: list[tuple[_JobRun, Task]] = []
        while not self._stop.cancelled:
            now = time.monotonic()
            if window is not None and not window.contains(now_local()):
                self.stop("window")
                break
            if now - last_poll >= POLL_JOBS:
                last_poll = now
                self._poll_jobs()
                self._admit_jobs()
            if now - last_beat >= HEARTBEAT:
                last_beat = now
                self.store.heartbeat(self._runs, self.runner)
                self._record_partials(self._runs)
            buffered = self._feed(buffered)
            self._collect(TICK)
            tuner = self.tuner
            if tuner is not None:
                a = self.accounting
                runs = self._runs.values()
                network = not runs or any({r.src.scheme, r.dst.scheme} - NO_NETWORK for r in runs)
                choice = tuner.observe(a.bytes_done, a.files_done, a.active, network=network)
                if choice is not None:
                    self._record_tuning(choice, self._runs)
            self._ensure_workers()  # the tuner (or the window's setting) may allow more now
            self._finish_jobs()
            if not self._runs and not buffered:
                next_wake = self._next_wake()
                if next_wake is None:
                    break
                self._wait_until(*next_wake)
                last_poll = 0.0
        # Hand back what we had buffered but not started.
        self.store.unclaim(t.id for _, t in buffered)

    def _record_tuning(self, choice: Choice, runs: dict[int, _JobRun]) -> None:
        """The tuner's choice, with each job it applies to (``queue show``, the window's row)."""
        log.info("parallel %s", choice.describe())
        text = choice.to_json()
        for job_id, run in runs.items():
            if not run.delegated:  # a direct job's bytes are the service's or the host's to move
                self.store.set_job_value(job_id, TUNING_KEY, text)

    def _wait_until(self, when: datetime, why: str) -> None:
        self.listener.waiting(when, why)
        while not self._stop.cancelled:
            left = (when - now_local()).total_seconds()
            if left <= 0:
                break
            self._stop.wait(min(left, 1.0))
        self.listener.waiting(None, "")

    def _next_wake(self) -> tuple[datetime, str] | None:
        """The next moment a waiting job can run and what it waits for, or None when the queue has
        nothing left for us."""
        best: tuple[datetime, str] | None = None
        now = now_local()
        for job in self._candidates():
            wait = self._job_wait(job, now)
            if wait is not None and (best is None or wait[0] < best[0]):
                best = wait
        if best is not None and self.config.window is not None:
            closes = self.config.window.closes_at(now)
            if closes is not None and best[0] >= closes:
                return None  # nothing can start before our own window ends
        return best

    # ---- jobs ----
    def _candidates(self) -> list[Job]:
        jobs = self.store.jobs(("queued", "running"))
        if self.config.job_ids is not None:
            wanted = set(self.config.job_ids)
            jobs = [j for j in jobs if j.id in wanted]
        return [
            j
            for j in jobs
            if j.id not in self._runs
            and j.id not in self.config.skip_job_ids
            and (j.state == "queued" or not j.runner_alive or j.runner == self.runner)
        ]

    def _job_ready_at(self, job: Job, now: datetime) -> datetime | None:
        """When ``job`` may run: now, later (window/start time/retry backoff), or None if never."""
        wait = self._job_wait(job, now)
        return None if wait is None else wait[0]

    def _job_wait(self, job: Job, now: datetime) -> tuple[datetime, str] | None:
        """When ``job`` may run and, if later than now, what it waits for (said while the run
        waits): the server (a job that could not start or be walked, or files retrying a
        transient failure; ``ready`` is then the next try), its start time or its time window."""
        ready, why = now, ""
        waiting = self._waiting.get(job.id)
        if waiting is not None and waiting.not_before > time.time():
            ready = datetime.fromtimestamp(waiting.not_before).astimezone()
            why = f"waiting for the server: job {job.id} {job.message or 'could not reach it'}"
        if job.options.start_at and job.options.start_at > ready.timestamp():
            ready = datetime.fromtimestamp(job.options.start_at).astimezone()
            why = f"waiting for job {job.id}'s start time"
        if job.options.window:
            opens = parse_window(job.options.window).next_open(ready)
            if opens > ready:
                ready, why = opens, f"waiting for job {job.id}'s time window {job.options.window}"
        if job.planned:
            retry = self.store.next_retry_time([job.id])
            if retry is None and not self.store.open_task_count(job.id):
                return now, ""  # only finishing left to do
            if retry is not None and retry > max(time.time(), ready.timestamp()):
                ready = datetime.fromtimestamp(retry).astimezone()
                why = f"waiting for the server: job {job.id}'s files are tried again after a transient failure"
        return ready, why

    def _admit_jobs(self) -> None:
        now = now_local()
        for job in self._candidates():
            ready = self._job_ready_at(job, now)
            if ready is None or ready > now:
                continue
            if not self.store.claim_job(job.id, self.runner):
                continue
            try:
                self._start_job(self.store.job(job.id))
            except FerryError as exc:
                self._runs.pop(job.id, None)
                if not self._wait_job(job, exc, "could not start"):
                    self._end_job_early(job.id, "failed", exc)

    def _patience(self, job: Job) -> float | None:
        return job.options.patience if job.options.patience is not None else self.config.patience

    def _backoff(self, job: Job, first: float, attempts: int) -> float | None:
        """Seconds to wait before trying again after ``attempts`` transient failures in a row (the
        first at wall time ``first``), or None to give up: at least ``max_attempts`` tries, then
        more while the job's patience lasts. Exponential with jitter, so parallel retries do not
        stampede a server that just came back."""
        patience = self._patience(job)
        cap = self.config.backoff_cap
        if patience:
            cap = min(cap, max(self.config.backoff_base, patience / 6))
        delay = min(cap, self.config.backoff_base * 2.0 ** min(attempts - 1, 30)) * random.uniform(0.5, 1.0)
        if attempts < self.config.max_attempts:
            return delay
        left = first + (patience or 0.0) - time.time()
        return None if left <= 0 else min(delay, left)

    def _wait_job(self, job: Job, exc: BaseException, what: str) -> bool:
        """A job that could not start or be walked for a transient reason (the server is down or
        restarting) goes back to the queue and tries again later while its patience lasts (only
        with a patience: without one it fails at once, as before). False: give up."""
        if not isinstance(exc, Transient) or isinstance(exc, ChecksumMismatch) or not self._patience(job):
            return False
        waiting = self._waiting.setdefault(job.id, _Waiting(time.time()))
        waiting.attempts += 1
        delay = self._backoff(job, waiting.first, waiting.attempts)
        if delay is None:
            self._waiting.pop(job.id, None)
            return False
        waiting.not_before = time.time() + delay
        message = f"{what}: {describe(exc)}; trying again (attempt {waiting.attempts + 1})"
        self.store.release_job(job.id, "queued", message, error_kind=exc.kind, error_action=exc.action)
        self.listener.job_changed(job.id, "queued", message)
        return True

    def _end_job_early(self, job_id: int, state: str, exc: FerryError) -> None:
        message = exc.message
        self.store.release_job(job_id, state, message, error_kind=exc.kind, error_action=exc.action)
        self._summary.jobs[job_id] = state
        self.listener.job_changed(job_id, state, message)

    def _start_job(self, job: Job) -> None:
        # Jobs store canonical addresses (sites already resolved), so no site lookup is needed.
        src = self.pool.get(parse_address(job.sources[0]))
        dst = self.pool.get(parse_address(job.dest))
        # Before planning: may the whole job go to a service that moves the bytes itself? (May
        # raise with the reason, e.g. a policy the service cannot honour: the job fails early.)
        opts = job.options
        choice = choose_route(src, dst, job_route(opts, src, dst))  # direct without one: UsageError, job fails
        self.store.set_route(job.id, choice.route.value, choice.reason)
        if choice.reason and choice.reason != job.route_reason:
            self.listener.job_changed(job.id, "running", f"relay: {choice.reason}")
        delegation = choice.delegation
        if delegation is not None and opts.move and not opts.allow_unverified_move:
            raise UsageError(
                "A move deletes each source only after Ferry's own checksum check, and this job is moved and "
                "checked by the transfer service: copy it instead, or accept the service's check with "
                "--allow-unverified-move"
            )
        bucket = TokenBucket(opts.bwlimit) if opts.bwlimit else None
        # The job writes through a view of its destination that never follows a link below the
        # folders its sources land in (local disks; other backends are themselves).
        dst = dst.confined(destination_roots(dst, job.roots, parse_address(job.dest).path))
        ctx = CopyContext(
            src, dst, opts, self.accounting, Limiters(bucket, self._global_bucket), self.ask, store=self.store
        )
        window = parse_window(opts.window) if opts.window else None
        run = _JobRun(job, src, dst, ctx, CancelToken(self._stop), window)
        run.sems = self._semaphores(run)
        self._runs[job.id] = run
        if self.tuner is not None and delegation is None:
            self._record_tuning(self.tuner.choice, {job.id: run})
        counts = self.store.counts(job.id)
        self.accounting.add_total(counts.files, counts.bytes)
        self.accounting.add_finished(
            files=counts.count("done") + counts.count("skipped"),
            size=counts.size("done") + counts.size("skipped"),
            failed=counts.count("failed"),
        )
        self.listener.job_changed(job.id, "running", None)
        if delegation is not None:
            run.delegated = True
            run.planner = threading.Thread(
                target=self._delegate, args=(run, delegation), name=f"ferry-delegate-{job.id}", daemon=True
            )
            run.planner.start()
        elif job.planned:
            run.planned = True
        elif watch_live.is_live(self.store, job.id):
            pass  # tasks come from a feeder (ferry watch, Shipper); planned when it closes the job
        else:
            run.planner = threading.Thread(target=self._plan, args=(run,), name=f"ferry-plan-{job.id}", daemon=True)
            run.planner.start()
        self._update_planning()

    def _update_planning(self) -> None:
        self.accounting.planning = any(not r.planned for r in self._runs.values())

    def _plan(self, run: _JobRun) -> None:
        """Plan the job on its own thread: a queued sync by comparing, any other by walking its
        sources; planned unless cancelled, else the planner's error (the coordinator decides)."""
        if sync.is_queued_sync(self.store, run.job.id):
            self._planning(run, "comparing for sync", lambda: self._plan_sync(run))
        else:
            self._planning(run, "planning", lambda: self._walk(run))

    def _planning(self, run: _JobRun, what: str, plan: Callable[[], None]) -> None:
        try:
            plan()
            if not run.cancel.cancelled:
                self.store.mark_planned(run.job.id)
                run.planned = True
        except Cancelled:
            pass
        except BaseException as exc:
            run.planner_error = exc
            log.exception("%s job %s failed", what, run.job.id)

    def _walk(self, run: _JobRun) -> None:
        """Walk the job's sources and insert tasks in batches."""
        roots: list[Root] = []
        for src_path, dst_path, rel in run.job.roots:
            try:
                entry = run.src.stat(src_path)
            except NotFound:
                self._record_planned(
                    run,
                    [
                        NewTask(
                            "file",
                            src_path,
                            dst_path,
                            rel,
                            None,
                            None,
                            state="failed",
                            error=f"Source not found: {run.src.display(src_path)}",
                            error_kind=NotFound.kind,
                        )
                    ],
                )
                continue
            roots.append(Root(run.src, entry, run.dst, dst_path, rel))
        batch: list[NewTask] = []
        last = time.monotonic()
        # Small first batches so the first files start at once; bigger ones after (each
        # batch is one transaction).
        size = min(FIRST_PLAN_BATCH, self.config.plan_batch)
        for task in expand(roots, run.cancel):
            batch.append(task)
            if len(batch) >= size or time.monotonic() - last > 0.2:
                self._record_planned(run, batch)
                batch, last = [], time.monotonic()
                size = min(size * 4, self.config.plan_batch)
        self._record_planned(run, batch)

    def _plan_sync(self, run: _JobRun) -> None:
        """A sync queued with 'ferry queue add --sync': compared now, its copies recorded as they
        are found, its deletions kept with the job for its end (sync_delete)."""
        note = sync.plan_queued_sync(
            self.pool, self.store, run.job.id, lambda batch: self._record_planned(run, batch), run.cancel
        )
        if note is not None:
            run.sync_note = f"; {note}"
            self.listener.job_changed(run.job.id, "running", note)

    def _delegate(self, run: _JobRun, delegation: Delegation) -> None:
        """Hand the job to the service and follow it (on the planning thread); it records its rows."""
        try:
            delegation.run_job(DelegatedRun(run.job, self.store, self.accounting, self.listener, run.cancel))
            if not run.cancel.cancelled:
                self.store.mark_planned(run.job.id)
                run.planned = True
        except Cancelled:
            pass
        except NoDirectRoute as exc:
            # Found on the way (the store refused a part copy): the rest goes through Ferry, unless
            # the person asked for direct only. Rows already copied stay done; the planner skips them.
            if run.job.options.route == Route.DIRECT:
                run.planner_error = UsageError(f"--route direct: {exc.reason}")
                return
            self.store.set_route(run.job.id, Route.RELAY.value, exc.reason)
            self.listener.job_changed(run.job.id, "running", f"relay: {exc.reason}")
            run.delegated = False
            self._plan(run)
        except BaseException as exc:
            run.planner_error = exc
            log.exception("delegated job %s failed", run.job.id)

    def _record_planned(self, run: _JobRun, batch: list[NewTask]) -> None:
        new = self.store.add_tasks(run.job.id, batch)
        if new:
            self._done.put(None)  # wake the coordinator: these can start now, not a tick later
        files = [t for t in new if t.kind == "file"]
        self.accounting.add_total(len(files), sum(t.size or 0 for t in files))
        for t in new:
            if t.state != "queued":
                res = TaskResult(
                    0,
                    t.state,
                    0,
                    error_kind=None if t.state == "skipped" else (t.error_kind or "error"),
                    error=t.error,
                    skip_reason=t.skip_reason,
                )
                if t.kind == "file":
                    self.accounting.file_finished(t.state, t.size or 0)
                if t.state == "failed":
                    run.failed += 1
                self.listener.task_finished(run.job.id, t, res)

    def _poll_jobs(self) -> None:
        """See pause/cancel requests from other processes (``ferry queue pause``)."""
        if not self._runs:
            return
        for job in self.store.jobs(ids=list(self._runs)):
            run = self._runs.get(job.id)
            if run is None or run.stopping:
                continue
            if not run.planned and run.planner is None and watch_live.feed_closed(self.store, job):
                run.planned = True  # a live job whose feeder closed it (or died): finish what is queued
            if job.state in ("paused", "cancelled"):
                self._stop_job(run, "pause" if job.state == "paused" else "cancel", job.message)
            elif run.window is not None and not run.window.contains(now_local()):
                self._stop_job(run, "window", f"waiting for its time window {run.window}")

    def _stop_job(self, run: _JobRun, reason: str, message: str | None) -> None:
        run.stopping = reason
        run.stop_message = message
        run.cancel.cancel(reason)

    def _finish_jobs(self) -> None:
        for job_id, run in list(self._runs.items()):
            if run.inflight:
                continue
            if run.stopping:
                for thread in (run.planner, run.mover, run.syncer):
                    if thread is not None:
                        thread.join()
                self._release(run)
                continue
            if run.planner_error is not None:
                err = run.planner_error
                if self._wait_job(run.job, err, "listing the sources stopped"):
                    del self._runs[job_id]
                    continue
                self._release(
                    run,
                    "failed",
                    f"Planning failed: {describe(err)}",
                    error_kind=error_kind(err),
                    error_action=err.action if isinstance(err, FerryError) else Action.RETRY,
                )
                continue
            if not run.planned:
                continue
            self._waiting.pop(job_id, None)
            if self.store.open_task_count(job_id):
                continue
            if run.job.options.move and not self._moved(run):
                continue
            if self._sync_deleting(run):
                continue
            self._complete(run)
        self._update_planning()

    def _moved(self, run: _JobRun) -> bool:
        """Whether a Move job has dealt with its sources: started on a thread of its own once its
        last file finished (re-hashing sources takes a while), so other jobs go on meanwhile."""
        if run.mover is None:
            run.mover = threading.Thread(target=self._move, args=(run,), name=f"ferry-move-{run.job.id}", daemon=True)
            run.mover.start()
            return False
        return not run.mover.is_alive()

    def _move(self, run: _JobRun) -> None:
        try:
            move.run_move(self.store, run.job, run.src, run.dst, run.cancel)
        except Cancelled:
            pass
        except BaseException as exc:
            run.move_error = exc
            log.exception("deleting the moved sources of job %s failed", run.job.id)
        self._done.put(None)  # wake the coordinator to complete the job

    def _sync_deleting(self, run: _JobRun) -> bool:
        """Whether a --delete sync is still making its deletions: started, on a thread of its
        own, once every copy has an outcome (only if all verified: sync_delete decides)."""
        if run.syncer is None:
            if not sync_delete.pending_deletions(self.store, run.job.id):
                return False
            run.syncer = threading.Thread(
                target=self._sync_delete, args=(run,), name=f"ferry-sync-delete-{run.job.id}", daemon=True
            )
            run.syncer.start()
            return True
        return run.syncer.is_alive()

    def _sync_delete(self, run: _JobRun) -> None:
        try:
            run.sync_note = sync_delete.run_pending_deletions(self.store, run.job.id, run.job.options, run.dst)
        except BaseException as exc:
            run.sync_note = f"; the deletions stopped: {describe(exc)}"
            log.exception("the deletions of sync job %s failed", run.job.id)
        self._done.put(None)  # wake the coordinator to complete the job

    def _release(
        self,
        run: _JobRun,
        state: str | None = None,
        message: str | None = None,
        *,
        error_kind: str | None = None,
        error_action: Action | None = None,
    ) -> None:
        job_id = run.job.id
        if state is None and run.stopping == "no-space":
            error_kind, error_action = NoSpace.kind, NoSpace.action
        del self._runs[job_id]
        if state is None:
            state, message = {
                "pause": ("paused", run.stop_message),
                "no-space": ("paused", run.stop_message),
                "cancel": ("cancelled", run.stop_message or "cancelled"),
                "window": ("queued", run.stop_message),
                "shutdown": (
                    "queued",
                    "stopped at the end of the time window; the next 'ferry queue run' continues it"
                    if self._summary.stopped == "window"
                    else "interrupted; 'ferry queue run' continues it",
                ),
            }[run.stopping]
        if state == "cancelled":
            self._remove_partials(run)
            self.store.cancel_open_tasks(job_id)
        # A pause asked for in the store may be taken back (resume: 'queued') while this run is
        # still stopping the job's files; then the job stays queued and runs on (its files kept
        # their partial data). Written over with 'paused', it stayed paused for good.
        self.store.release_job(
            job_id,
            state,
            message,
            unless="queued" if run.stopping == "pause" else None,
            error_kind=error_kind,
            error_action=error_action,
        )
        held = self.accounting.partial_tasks(job_id) if state == "paused" else []
        self._record_partials([job_id], finished=state in ("done", "failed", "cancelled"))
        if held:
            self._record_partials_held(run, held)
        self._summary.jobs[job_id] = state
        self.listener.job_changed(job_id, state, message)

    def _record_partials(self, job_ids: Iterable[int], *, finished: bool = False) -> None:
        """Save the bytes in flight of jobs (in running files, and in the partial files stopped
        ones kept) for any process's view of the queue: the window adds them to the finished
        files' bytes, so a paused or remotely run job does not read 0 % until a file completes."""
        flight = self.accounting.partial_bytes()
        for job_id in list(job_ids):
            n = None if finished else flight.get(job_id, 0)
            self.store.set_job_value(job_id, PARTIAL_BYTES_KEY, str(n) if n else None)
            if finished or job_id not in self._runs:
                self.accounting.forget_job(job_id)

    def _record_partials_held(self, run: _JobRun, task_ids: list[int]) -> None:
        """A paused job's bytes are what its partial files hold, read from the destination: the
        bytes counted as they were handed on include writes a server had not yet acknowledged
        when the job stopped (SFTP pipelines them), which the paused row would overstate."""
        if run.dst.keeps_resume_state:
            return  # S3 keeps whole parts in its upload, counted as they complete
        held = 0
        for task_id in task_ids:
            task = self.store.task(task_id)
            if task is None:
                continue
            folder, name = run.dst.split(task.dst)
            try:
                kept = run.dst.partial_kept(run.dst.join(folder, temp_name(name, str(task.id))), task.size)
            except (FerryError, OSError):
                continue
            held += kept or 0
        self.store.set_job_value(run.job.id, PARTIAL_BYTES_KEY, str(held) if held else None)

    def _remove_partials(self, run: _JobRun) -> None:
        for task in self.store.tasks(run.job.id, states=PARTIAL_STATES, kinds=("file",)):
            remove_partial(run.dst, task, self.store)

    def _complete(self, run: _JobRun) -> None:
        job_id = run.job.id
        if run.job.options.preserve_mtime and run.dst.capabilities.set_mtime:
            # Folder times last, deepest first: writing into a folder changes its mtime.
            for task in self.store.tasks(job_id, states=("done",), kinds=("dir",), order_desc=True):
                mt = from_us(task.mtime_us)
                if mt is not None:
                    try:
                        run.dst.set_mtime(task.dst, mt, _folder_ns(run, task.src))
                    except FerryError:
                        pass
        counts = self.store.counts(job_id)
        failed = _failed_items(self.store, job_id, counts.count("failed"))
        moved = _move_note(self.store, run) + run.sync_note
        if failed:
            kinds = self.store.outcome_counts(job_id).failed
            kind = max(kinds, key=lambda k: kinds[k]) if kinds else "error"
            self._release(
                run,
                "failed",
                f"{failed} failed; 'ferry queue retry {job_id}' tries them again" + moved,
                error_kind=kind,
                error_action=action_for_kind(kind),
            )
        elif run.move_error is not None:
            err = run.move_error
            self._release(
                run,
                "failed",
                f"Deleting the moved sources stopped: {describe(err)}; 'ferry queue retry {job_id}' continues",
                error_kind=error_kind(err),
                error_action=Action.RETRY,
            )
        else:
            self._release(run, "done", moved.removeprefix("; ") or None)

    # ---- feeding and collecting ----
    def _feed(self, buffered: list[tuple[_JobRun, Task]]) -> list[tuple[_JobRun, Task]]:
        if not buffered:
            active = [jid for jid, r in self._runs.items() if not r.stopping and not r.delegated]
            if active:
                for task in self.store.claim_tasks(active, self._claim_batch):
                    buffered.append((self._runs[task.job_id], task))
        while buffered:
            run, task = buffered[0]
            if run.stopping:
                self.store.unclaim([task.id])
                buffered.pop(0)
                continue
            try:
                self._work.put_nowait((run, task))
            except queue.Full:
                break
            run.inflight += 1
            buffered.pop(0)
        return buffered

    def _drain(self, items: list[_Done]) -> None:
        try:
            while len(items) < 2000:
                item = self._done.get_nowait()
                if item is not None:
                    items.append(item)
        except queue.Empty:
            pass

    def _collect(self, timeout: float) -> None:
        """Take the results that are ready and record them in one transaction.

        The coordinator waits for the first result (or a planner's wake-up), so a short copy's
        last file is recorded at once rather than a timer later. While results stream in it
        gathers them for at least ``BATCH_GAP`` between writes: with thousands of small files a
        wake-up and a transaction per file would cost more than the copies. The work queue holds
        enough tasks that workers never wait for it.
        """
        try:
            first = self._done.get(timeout=min(timeout, IDLE_WAIT)) if timeout > 0 else self._done.get_nowait()
        except queue.Empty:
            return
        items: list[_Done] = [] if first is None else [first]
        self._drain(items)
        if not items:
            return
        if len(items) < sum(r.inflight for r in self._runs.values()):
            # More are on their way: let them gather instead of writing one at a time.
            gap = BATCH_GAP - (time.monotonic() - self._last_write)
            if gap > 0 and not self._stop.wait(gap):
                self._drain(items)
        results = []
        for item in items:
            results.append(self._result(item))
            item.run.inflight -= 1
        self.store.finish_tasks(results)
        self._last_write = time.monotonic()
        for item, res in zip(items, results, strict=True):  # the store counts them from now on
            self.accounting.settle(item.task.id, kept=res.state == "queued" and item.run.dst.capabilities.resume_write)
            if res.state == "done" and (item.task.size or 0) >= STREAM_PLAN_MIN:
                self._record_stream_plan(item.run)

    def _record_stream_plan(self, run: _JobRun) -> None:
        """How the job's last big file moved (TCP connections, streams and why), as the backend
        that chose it says: ``queue show`` and the window show it beside the files at once."""
        plan = run.src.stream_plan() or run.dst.stream_plan()
        if plan is not None and plan != run.stream_plan:
            run.stream_plan = plan
            self.store.set_job_value(run.job.id, STREAMS_KEY, plan)

    def _result(self, item: _Done) -> TaskResult:
        run, task = item.run, item.task
        attempts = task.attempts + 1
        if item.outcome is not None:
            self._first_transient.pop(task.id, None)
            o = item.outcome
            if o.state == "skipped":
                res = TaskResult.skipped(task.id, attempts, o.skip_reason or SkipReason.POLICY, o.verified)
            else:
                res = TaskResult.done(task.id, attempts, o.verification, o.hash, dst=o.dst, not_kept=tuple(o.not_kept))
            self.listener.task_finished(run.job.id, task, res)
            return res
        exc = item.error
        assert exc is not None
        if isinstance(exc, Cancelled):
            reason = run.cancel.reason or "shutdown"
            if reason == "cancel":
                remove_partial(run.dst, task, self.store)
                return TaskResult(task.id, "cancelled", task.attempts)
            return TaskResult(task.id, "queued", task.attempts)  # partial kept: resumes later
        if isinstance(exc, OSError) and not isinstance(exc, FerryError):
            exc = from_oserror(exc, run.dst.display(task.dst))
        if isinstance(exc, NoSpace):
            msg = (
                f"Destination full while writing {run.dst.display(task.dst)}: free some space, then "
                f"'ferry queue resume {run.job.id}'"
            )
            if not run.stopping:
                self._stop_job(run, "no-space", msg)
                self.store.set_job_state(
                    run.job.id, "paused", msg, error_kind=NoSpace.kind, error_action=NoSpace.action
                )
            return TaskResult(task.id, "queued", task.attempts, error_kind="no-space", error=msg)
        kind = error_kind(exc)
        message = describe(exc)
        if isinstance(exc, Transient) and not isinstance(exc, ChecksumMismatch):
            first = self._first_transient.setdefault(task.id, time.time())
            delay = self._backoff(run.job, first, attempts)
            if delay is not None:
                return TaskResult(
                    task.id,
                    "queued",
                    attempts,
                    error_kind=kind,
                    error=f"{message} (retry {attempts})",
                    not_before=time.time() + delay,
                )
        self._first_transient.pop(task.id, None)
        if not isinstance(exc, FerryError):
            log.error("unexpected error in task %s", task.id, exc_info=exc)
        if task.kind == "file":
            remove_empty_partial(run.dst, task)  # e.g. the source could not be read at all
        detail = exc.detail if isinstance(exc, FerryError) else ""  # else the message has it all
        res = TaskResult(task.id, "failed", attempts, error_kind=kind, error=message, error_detail=detail or None)
        run.failed += 1
        if task.kind == "file":
            self.accounting.file_finished("failed")
        self.listener.task_finished(run.job.id, task, res)
        return res

    def _worker(self) -> None:
        while True:
            # The gate comes first, so with --parallel auto only as many workers as the tuner
            # allows compete for tasks; the others sleep without holding one.
            self._gate.acquire()
            try:
                item = self._work.get()
                if item is None:
                    return
                run, task = item
                if not batch.batchable(run.ctx, task):
                    self._done.put(self._execute(run, task))
                    continue
                tasks, after, stop = self._gather(run, task)
                for done in self._execute_batch(run, tasks):
                    self._done.put(done)
                if after is not None:
                    self._done.put(self._execute(*after))
                if stop:
                    return
            finally:
                self._gate.release()

    def _gather(self, run: _JobRun, first: Task) -> tuple[list[Task], tuple[_JobRun, Task] | None, bool]:
        """More small files of the same job for one batch (``ferry.transfers.batch``): taken
        from the queue while they fit. The first item that does not fit is returned to run
        after the batch (never dropped, order otherwise kept); a stop signal met on the way is
        honoured after both."""
        tasks, size = [first], first.size or 0
        # While the planner is still walking, the queue fills a few tasks at a time and idle
        # workers would each take one (no batch at all): wait a moment for company.
        deadline = time.monotonic() + batch.GATHER_WAIT
        limit = batch.max_bytes(run.ctx)
        while len(tasks) < batch.MAX_FILES and size < limit:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    item = self._work.get(timeout=left)
                except queue.Empty:
                    break
            if item is None:
                return tasks, None, True
            if item[0] is not run or not batch.batchable(run.ctx, item[1]):
                return tasks, item, False
            tasks.append(item[1])
            size += item[1].size or 0
        return tasks, None, False

    def _execute_batch(self, run: _JobRun, tasks: list[Task]) -> list[_Done]:
        """As :meth:`_execute` for several tasks at once; still exactly one result per task."""
        if len(tasks) == 1:
            return [self._execute(run, tasks[0])]
        token = run.cancel
        for s in run.sems:
            s.acquire()
        self.accounting.active_delta(len(tasks))
        try:
            token.check()
            results = batch.run_batch(tasks, run.ctx, token)
        except BaseException as exc:
            results = [(None, exc)] * len(tasks)
        finally:
            self.accounting.active_delta(-len(tasks))
            for s in reversed(run.sems):
                s.release()
        return [_Done(run, task, outcome, error) for task, (outcome, error) in zip(tasks, results, strict=True)]

    def _execute(self, run: _JobRun, task: Task) -> _Done:
        outcome: Outcome | None = None
        error: BaseException | None = None
        token = run.cancel  # job-wide: pause/cancel/shutdown stop every file of the job at once
        sems = run.sems
        for s in sems:
            s.acquire()
        self.accounting.active_delta(1)
        try:
            token.check()
            outcome = run_task(task, run.ctx, token)
        except BaseException as exc:
            error = exc
        finally:
            self.accounting.active_delta(-1)
            for s in reversed(sems):
                s.release()
        return _Done(run, task, outcome, error)

    def _semaphores(self, run: _JobRun) -> list[threading.Semaphore]:
        out = []
        with self._sem_lock:
            for backend in sorted({run.src, run.dst}, key=lambda b: b.endpoint):
                limit = backend.capabilities.max_connections
                if limit is None:
                    continue
                sem = self._sems.get(backend.endpoint)
                if sem is None:
                    sem = self._sems[backend.endpoint] = threading.Semaphore(limit)
                out.append(sem)
        return out

    def _shutdown(self) -> None:
        self._stop.cancel("shutdown")
        for run in self._runs.values():
            if not run.stopping:
                run.stopping = "shutdown"
        # Drain: workers finish (cancelled) what they hold; results are recorded.
        while any(r.inflight for r in self._runs.values()):
            try:
                first = self._done.get(timeout=0.5)  # wake on the next result, not on a timer
            except queue.Empty:
                continue
            if first is not None:
                self._done.put(first)
            self._collect(0)
        try:
            while True:
                item = self._work.get_nowait()
                if item is not None:
                    self.store.unclaim([item[1].id])
                    item[0].inflight -= 1
        except queue.Empty:
            pass
        self._gate.set_limit(len(self._workers))  # let every worker reach its stop signal
        for _ in self._workers:
            self._work.put(None)
        for w in self._workers:
            w.join(timeout=5)
        for run in list(self._runs.values()):
            for thread in (run.planner, run.mover):
                if thread is not None:
                    thread.join(timeout=5)
            self._release(run)
        self.pool.close()


# Tasks whose partial data may still be at the destination: unfinished ones, and failed ones
# (a file that failed mid-way keeps its partial for 'ferry queue retry' to continue).
PARTIAL_STATES = ("queued", "running", "failed")


class _ResumeRow:
    """A task's resume state in the queue (an S3 UploadId), as a backend's ResumeSlot."""

    def __init__(self, store: Store, task_id: int) -> None:
        self._store, self._id = store, task_id

    def load(self) -> dict[str, object] | None:
        return self._store.task_resume(self._id)

    def save(self, data: dict[str, object] | None) -> None:
        self._store.set_task_resume(self._id, data)


def remove_partial(dst: Backend, task: Task, store: Store | None = None) -> None:
    """Remove what an unfinished task left at the destination: its partial file and, where the
    destination keeps resume state in the queue (``store``), the upload it names (an S3 multipart
    upload, which costs storage until aborted): a writer opened afresh on that state aborts it."""
    folder, name = dst.split(task.dst)
    try:
        dst.remove(dst.join(folder, temp_name(name, str(task.id))))
    except (NotFound, FerryError, OSError):
        pass
    if store is None or not dst.keeps_resume_state or not store.task_resume(task.id):
        return
    kw: dict[str, object] = {"resume_slot": _ResumeRow(store, task.id)}
    try:
        dst.open_write(task.dst, size=task.size, token=str(task.id), resume=False, **kw).abort()  # type: ignore[arg-type]
    except (FerryError, OSError):
        pass
    store.set_task_resume(task.id, None)


def remove_empty_partial(dst: Backend, task: Task) -> None:
    """A failed file's partial that holds nothing (its source could not be read) is removed: it
    is no start for a retry, only litter."""
    folder, name = dst.split(task.dst)
    path = dst.join(folder, temp_name(name, str(task.id)))
    try:
        entry = dst.stat(path)
        if entry.is_file and entry.size == 0:
            dst.remove(path)
    except (FerryError, OSError):
        pass


def _folder_ns(run: _JobRun, src: str) -> int | None:
    """A source folder's time to the nanosecond, where both ends keep more than microseconds
    (local disks; the queue keeps microseconds)."""
    if max(run.src.capabilities.mtime_precision, run.dst.capabilities.mtime_precision) >= 1e-6:
        return None
    try:
        return run.src.stat(src).mtime_ns
    except FerryError:
        return None


def _move_note(store: Store, run: _JobRun) -> str:
    """ "; moved ... kept ..." for a Move job's message, else nothing."""
    if not run.job.options.move:
        return ""
    p = move.progress(store, run.job.id)
    return f"; {p.describe()}" if p is not None and p.finished else ""


def _failed_items(store: Store, job_id: int, files: int) -> str:
    """What failed, files and folders (and links) said apart, as the summary counts files:
    ``2 file(s) and 1 folder(s)``; empty when nothing failed."""
    others: dict[str, int] = {}
    for t in store.tasks(job_id, states=("failed",)):
        if t.kind != "file":
            others[t.kind] = others.get(t.kind, 0) + 1
    parts = [f"{files:,} file(s)"] if files else []
    parts += [f"{n:,} {_KIND_WORDS.get(kind, kind)}(s)" for kind, n in sorted(others.items())]
    return " and ".join(parts)


_KIND_WORDS = {"dir": "folder", "link": "link"}


def default_parallel() -> int:
    return max(2, min(8, (os.cpu_count() or 2) * 2))
