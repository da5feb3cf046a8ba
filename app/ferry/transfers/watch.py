"""Watch a folder and ship each file as soon as it is complete (``ferry watch``; the GUI's
"Watch this folder").

A file is *complete* when it has not changed for the settle time, or — on Linux, where inotify
says so — when its writer closed it (or renamed it into place) and nothing touched it for a short
grace after that (so a writer that closes and at once renames or deletes a temporary file is not
caught half way). Polling is always there as well: it is the only way on other platforms and on
network file systems, and a safety net for inotify's lost events.

Complete files become tasks of one **live job** in the ordinary queue (see
:mod:`ferry.transfers.watch_live`), run by the ordinary scheduler: the same verification,
conflict policies, retries, pause/cancel from ``ferry queue``, and crash recovery as any copy.
The job is found again by (source, destination, recursive, patterns), so restarting the same
watch after ``kill -9`` takes the job over: tasks that were running resume, verified files are
never sent again (their rows are in the store), unsent ones are still queued or still waiting in
the folder.

With ``delete_after_verify`` the source is removed only after its task is recorded *done* with a
checksum match, and only if the source still hashes to what was verified (so a file rewritten
after shipping is kept and shipped again). "Size only" verification deletes nothing unless the
caller explicitly allowed it.

Counters (seen, shipped, verified, deleted, failed, ...) are in :meth:`Watcher.counters`, and are
also written to the store every second (``job_values['watch.counters']``), so another process —
``ferry queue show``, the GUI's transfers panel — can read them with :func:`read_counters`.

GUI use::

    w = Watcher(WatchSpec("/data/run42", "archive:/run42", settle=30), store)
    w.start()                    # returns at once; threads do the work
    snap = w.counters()          # on a 250-500 ms timer
    w.stop()                     # Ctrl+C-like: the job stays in the queue, restart continues it
    w.stop(drain=True)           # or: stop watching, finish shipping what was queued
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime

from ferry.backends.base import Backend, Entry
from ferry.core.address import Address
from ferry.core.errors import FerryError, NotFound, UsageError
from ferry.core.outcomes import Level
from ferry.transfers import watch_live
from ferry.transfers.copy import AskFn
from ferry.transfers.options import JobOptions
from ferry.transfers.planner import mtime_us
from ferry.transfers.scheduler import Listener, NullListener, RunConfig, Runner
from ferry.transfers.store import NewTask, Store, Task, TaskResult, runner_id
from ferry.transfers.watch_delete import Deleter
from ferry.transfers.watch_detect import Candidate, Detector

log = logging.getLogger(__name__)

DEFAULT_SETTLE = 30.0
SPEC_KEY = "watch"
COUNTERS_KEY = "watch.counters"
SAFETY_RESCAN = 30.0  # with inotify: a full rescan this often anyway (lost events, NFS)
PERSIST_EVERY = 1.0


@dataclass(frozen=True)
class WatchSpec:
    source: str  # a folder: local path or any address Ferry understands (polled if not local)
    dest: str
    recursive: bool = False
    patterns: tuple[str, ...] = ()  # on the file name; none: every file
    settle: float = DEFAULT_SETTLE
    delete_after_verify: bool = False
    allow_size_only_delete: bool = False
    until_idle: float | None = None
    until_file: str | None = None
    options: JobOptions = field(default_factory=JobOptions)
    use_inotify: bool = True

    @property
    def close_grace(self) -> float:
        """How long a file its writer closed must then stay untouched before it is queued: long
        enough for "close, then rename or delete the temporary file" and for writers that reopen
        a file to append every so often, short enough not to delay shipping noticeably."""
        return min(1.0, self.settle / 2)

    @property
    def rename_grace(self) -> float:
        """The same for a file renamed into place: the writer's own signal that it is complete."""
        return min(0.25, self.settle / 4)


@dataclass(frozen=True)
class WatchCounters:
    seen: int = 0  # distinct files that matched (queued or not)
    pending: int = 0  # seen, not yet complete
    queued: int = 0  # complete, waiting for or in transfer
    shipped: int = 0  # arrived (verified or as the job's verification allows)
    verified: int = 0  # arrived and checked by checksum
    skipped: int = 0  # left alone by the conflict policy
    deleted: int = 0  # sources removed after verification
    kept: int = 0  # not deleted: not checksum-verified, or changed after shipping
    failed: int = 0
    vanished: int = 0  # deleted or renamed away before they were complete
    bytes_shipped: int = 0
    state: str = "starting"  # starting, watching, paused, draining, finished, stopped, cancelled
    updated: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> WatchCounters:
        data = json.loads(text)
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def read_counters(store: Store, job_id: int) -> WatchCounters | None:
    """The counters a watch last wrote for ``job_id`` (None if it is not a watch job)."""
    text = store.job_value(job_id, COUNTERS_KEY)
    return None if text is None else WatchCounters.from_json(text)


def is_watch_job(store: Store, job_id: int) -> bool:
    return store.job_value(job_id, SPEC_KEY) is not None


@dataclass(frozen=True)
class WatchResult:
    job_id: int
    state: str  # the job's state at the end (done, failed, queued when stopped, cancelled, paused)
    counters: WatchCounters
    reason: str  # until-file, until-idle, stopped, cancelled


class Watcher:
    """Feeds one live job from a folder and runs it in this process.

    It supervises: it finds or creates the job, runs the job's runner (again after a pause is
    lifted or the job failed to start), turns complete files into tasks, and ends by an until
    condition or :meth:`stop`. Which files are complete is the :class:`Detector`'s to say
    (:mod:`ferry.transfers.watch_detect`); removing verified sources is the :class:`Deleter`'s
    (:mod:`ferry.transfers.watch_delete`), on its own thread.
    """

    def __init__(
        self,
        spec: WatchSpec,
        store: Store | None = None,
        *,
        parallel: int = 4,
        auto_parallel: bool = False,
        bwlimit: int | None = None,
        listener: Listener | None = None,
        ask: AskFn | None = None,
        on_message: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        _check_spec(spec)
        self.spec = spec
        self.store = store or Store()
        self.parallel = parallel
        self.auto_parallel = auto_parallel
        self.bwlimit = bwlimit
        self.extra_listener: Listener = listener or NullListener()
        self.ask = ask
        self.on_message = on_message or (lambda text: log.warning("%s", text))
        self.clock = clock
        self.pool = watch_live.LentPool()  # scanning, deleting and every runner share the logins
        self.job_id = 0
        self.runner: Runner | None = None
        self.detector: Detector | None = None  # from start()
        self.deleter: Deleter | None = None  # from start()
        self._runner_thread: threading.Thread | None = None
        self._thread: threading.Thread | None = None
        self._heartbeat: watch_live.Heartbeat | None = None
        self._stop = threading.Event()
        self._stop_drain = False
        self._finished = threading.Event()
        self._lock = threading.Lock()
        self._persisted = WatchCounters()  # what an earlier run of this watch counted
        self._verified = 0
        self._state = "starting"
        self._reason = ""
        self._final_state = ""
        self._error: BaseException | None = None
        self._retry_at = 0.0
        self._retry_delay = 1.0
        self._markers: list[str] = [os.path.abspath(spec.until_file)] if spec.until_file else []

    # ------------------------------------------------------------ public
    def start(self) -> int:
        """Validate, find or create the job, start the threads; returns the job id."""
        spec = self.spec
        from ferry.transfers.jobs import canonical, resolve

        src_addr, dst_addr = resolve(spec.source), resolve(spec.dest)
        self.src = self.pool.get(src_addr)
        self.dst = self.pool.get(dst_addr)
        self.src_root, self.dst_root = src_addr.path, dst_addr.path
        if spec.until_file and not os.path.isabs(spec.until_file) and self.src.scheme == "local":
            # "--until DONE": DONE here, or DONE in the watched folder, whichever appears first.
            self._markers.append(os.path.abspath(os.path.join(self.src_root, spec.until_file)))
        self._check(src_addr, dst_addr)
        key = json.dumps(
            {
                "source": canonical(src_addr),
                "dest": canonical(dst_addr),
                "recursive": spec.recursive,
                "patterns": sorted(spec.patterns),
            },
            sort_keys=True,
        )
        self.job_id = self._job_for(key, canonical(src_addr), canonical(dst_addr))
        detector = self.detector = Detector(
            spec,
            self.src,
            self.src_root,
            lock=self._lock,
            clock=self.clock,
            on_message=self.on_message,
            markers=self._markers,
            vanished=self._persisted.vanished,
        )
        self.deleter = Deleter(
            self.store,
            self.job_id,
            self.src,
            self.dst,
            enabled=spec.delete_after_verify,
            allow_size_only=spec.allow_size_only_delete,
            clock=self.clock,
            on_message=self.on_message,
            on_deleted=lambda: self._persist(force=True),
            on_done_seen=lambda task_id, at: detector.finished_at.setdefault(task_id, at),
            deleted=self._persisted.deleted,
            kept=self._persisted.kept,
        )
        self._load_known(detector, self.deleter)
        self._heartbeat = watch_live.Heartbeat(self.store, self.job_id)
        self._heartbeat.start()
        self._start_runner()
        detector.use_inotify()
        self._thread = threading.Thread(target=self._main, name=f"ferry-watch-{self.job_id}", daemon=True)
        self._state = "watching"
        self._thread.start()
        self.deleter.start(f"ferry-watch-del-{self.job_id}")
        return self.job_id

    def stop(self, *, drain: bool = False) -> None:
        """Stop watching. ``drain``: close the job and wait until what was queued has shipped;
        otherwise stop at once (running files keep their partial data; the job stays queued and
        the same watch started again continues it)."""
        self._stop_drain = drain
        self._reason = self._reason or "stopped"
        self._stop.set()
        self._wake()

    def wait(self, timeout: float | None = None) -> WatchResult | None:
        """Block until the watch has ended (by an until condition or :meth:`stop`)."""
        if not self._finished.wait(timeout):
            return None
        if self._error is not None:
            raise self._error
        return WatchResult(self.job_id, self._final_state, self.counters(), self._reason)

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    def counters(self) -> WatchCounters:
        """A snapshot for a progress line or the GUI (a few small queries; call it a few times a second)."""
        c = self.store.counts(self.job_id) if self.job_id else None
        detector, deleter, p = self.detector, self.deleter, self._persisted
        with self._lock:
            pending = len(detector.pending) if detector is not None else 0
            known = len(detector.known) if detector is not None else 0
            vanished = detector.vanished if detector is not None else p.vanished
        return WatchCounters(
            seen=known + pending + vanished,
            pending=pending,
            queued=(c.count("queued") + c.count("running")) if c else 0,
            shipped=c.count("done") if c else 0,
            verified=self._verified,
            skipped=c.count("skipped") if c else 0,
            deleted=deleter.deleted if deleter is not None else p.deleted,
            kept=deleter.kept if deleter is not None else p.kept,
            failed=c.count("failed") if c else 0,
            vanished=vanished,
            bytes_shipped=c.size("done") if c else 0,
            state=self._state,
            updated=self.clock(),
        )

    def speed(self) -> float:
        runner = self.runner
        return runner.accounting.snapshot().speed if runner is not None else 0.0

    # ------------------------------------------------------------ setup
    def _check(self, src_addr: Address, dst_addr: Address) -> None:
        try:
            entry = self.src.stat(self.src_root)
        except NotFound:
            raise UsageError(f"Folder to watch not found: {self.spec.source}") from None
        except FerryError as exc:
            raise UsageError(f"Cannot read {self.spec.source}: {exc.message}") from None
        if not entry.is_dir:
            raise UsageError(f"{self.spec.source} is not a folder (ferry watch watches a folder)")
        try:
            dentry: Entry | None = self.dst.stat(self.dst_root)
        except NotFound:
            dentry = None
        except FerryError as exc:
            raise UsageError(f"Cannot write to {self.spec.dest}: {exc.message}") from None
        if dentry is not None and not dentry.is_dir:
            raise UsageError(f"Destination {self.spec.dest} is a file; give a folder")
        if self.src.endpoint == self.dst.endpoint and _inside(self.src, self.dst_root, self.src_root):
            raise UsageError(
                f"Destination {self.spec.dest} is inside the watched folder {self.spec.source}: "
                "every shipped file would be seen again"
            )
        if dentry is None:
            try:
                self.dst.mkdir(self.dst_root, parents=True, exist_ok=True)
            except FerryError as exc:
                raise UsageError(f"Cannot create {self.spec.dest}: {exc.message}") from None
        elif self.dst.scheme == "local" and not os.access(self.dst_root, os.W_OK | os.X_OK):
            raise UsageError(f"Cannot write to {self.spec.dest}: permission denied")

    def _job_for(self, key: str, source: str, dest: str) -> int:
        """The job of an earlier run of this same watch (taken over), or a new one."""
        store = self.store
        me = runner_id()
        for job in reversed(store.jobs()):
            if job.state == "cancelled" or store.job_value(job.id, SPEC_KEY) != key:
                continue
            if job.state == "running" and job.runner_alive and job.runner != me:
                raise UsageError(
                    f"{self.spec.source} is already being watched into {self.spec.dest} as job {job.id} "
                    f"by {job.runner}; stop that one first"
                )
            store.update_job_options(job.id, self.spec.options)
            if job.state in ("done", "failed", "paused"):
                if job.state == "paused":
                    self.on_message(f"job {job.id} was paused; watching again resumes it")
                store.retry_failed(job.id)  # unsent files are not forgotten: failed ones go again
                store.set_job_state(job.id, "queued", None, planned=0, finished=None)
            elif job.planned:  # closed by a runner that found the last watcher gone: open it again
                store.set_job_state(
                    job.id, job.state, job.message, error_kind=job.error_kind, error_action=job.error_action, planned=0
                )
            text = store.job_value(job.id, COUNTERS_KEY)
            if text:
                self._persisted = WatchCounters.from_json(text)
            if not store.claim_job(job.id, me):
                raise UsageError(f"Job {job.id} for this watch is being run by another ferry; stop that one first")
            return job.id
        job_id = store.create_job([source], dest, self.spec.options, [], state="running", runner=me)
        store.set_job_value(job_id, SPEC_KEY, key)
        watch_live.open_feed(store, job_id)
        return job_id

    def _load_known(self, detector: Detector, deleter: Deleter) -> None:
        now = self.clock()
        verified = 0
        for t in self.store.tasks(self.job_id, kinds=("file",)):
            detector.known[t.src] = (t.id, t.size, t.mtime_us)
            if t.state not in ("queued", "running"):
                detector.finished_at[t.id] = now
            if t.state == "done" and _checksum_verified(t):
                verified += 1
            if t.state == "done":
                deleter.put(t.id)  # a crash may have come between verification and deletion
        self._verified = verified

    def _start_runner(self) -> None:
        config = RunConfig(
            parallel=self.parallel, auto_parallel=self.auto_parallel, bwlimit=self.bwlimit, job_ids=[self.job_id]
        )
        runner = Runner(self.store, config, listener=_Feedback(self), ask=self.ask, pool=self.pool)
        self.runner = runner
        self._runner_thread = threading.Thread(target=self._run_runner, args=(runner,), name="ferry-watch-run")
        self._runner_thread.daemon = True
        self._runner_thread.start()

    def _run_runner(self, runner: Runner) -> None:
        try:
            runner.run()
        except BaseException as exc:  # recorded; the supervisor reports it
            log.exception("the watch's runner failed")
            self._error = exc
        finally:
            self._wake()

    def _wake(self) -> None:
        if self.detector is not None:
            self.detector.wake()

    # ------------------------------------------------------------ the loop
    def _main(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            log.exception("watch failed")
            self._error = exc
            self._halt_runner()
        finally:
            if self.deleter is not None:
                self.deleter.finish()
            self._persist(force=True)
            if self._heartbeat is not None:
                self._heartbeat.stop()
            if self.detector is not None:
                self.detector.close()
            self.pool.release()
            self._finished.set()

    def _loop(self) -> None:
        spec = self.spec
        detector = self.detector
        assert detector is not None
        detector.scan_all()
        last_scan = last_persist = self.clock()
        while not self._stop.is_set():
            ino = detector.inotify
            if ino is not None:
                detector.handle_events(ino.read(detector.next_timeout()))
                if ino.overflowed:
                    ino.overflowed = False
                    detector.scan_all()
                    last_scan = self.clock()
            else:
                self._stop.wait(detector.tick())
            now = self.clock()
            rescan = SAFETY_RESCAN if ino is not None else min(2.0, max(0.1, spec.settle / 2))
            if now - last_scan >= rescan:
                detector.scan_all()
                last_scan = now
            self._queue(detector.settle(now))
            if now - last_persist >= PERSIST_EVERY:
                self._persist()
                last_persist = now
            if not self._supervise():
                return
            if any(os.path.exists(m) for m in self._markers):
                # The writer says it is done: everything still waiting is complete now.
                detector.scan_all()
                self._queue(detector.settle(self.clock(), flush=True))
                self._reason = "until-file"
                self._stop_drain = True
                break
            idle = now - detector.last_activity
            if spec.until_idle is not None and not detector.pending and idle >= spec.until_idle:
                self._reason = "until-idle"
                self._stop_drain = True
                break
        self._end()

    def _end(self) -> None:
        if self._stop_drain:
            self._state = "draining"
            self._persist(force=True)
            watch_live.close_feed(self.store, self.job_id)
            self._wake_runner()
            self._wait_runner()
            job = self.store.job(self.job_id)
            if job.state == "queued" and self.store.open_task_count(self.job_id):
                # Paused and resumed meanwhile, or the runner stopped: run once more to the end.
                self._start_runner()
                self._wait_runner()
            if self.deleter is not None:
                self.deleter.sweep()
            self._final_state = self.store.job(self.job_id).state
            self._state = "finished" if self._final_state == "done" else self._final_state
        else:
            self._halt_runner()
            if self._heartbeat is not None:
                self._heartbeat.stop()
            watch_live.release_feed(self.store, self.job_id)
            self._final_state = self.store.job(self.job_id).state
            self._state = "stopped"

    def _wake_runner(self) -> None:
        pass  # the runner polls its jobs twice a second and sees the closed feed

    def _wait_runner(self) -> None:
        t = self._runner_thread
        if t is not None:
            t.join()

    def _halt_runner(self) -> None:
        if self.runner is not None:
            self.runner.stop("interrupted")
        self._wait_runner()

    def _supervise(self) -> bool:
        """Restart the runner after a pause is lifted; False when the job was cancelled."""
        t = self._runner_thread
        if t is not None and t.is_alive():
            return True
        if self._error is not None:
            raise self._error
        job = self.store.job(self.job_id)
        if job.state == "cancelled":
            self._reason = "cancelled"
            self._final_state = "cancelled"
            self._state = "cancelled"
            return False
        if job.state == "paused":
            if self._state != "paused":
                self._state = "paused"
                self.on_message(
                    f"job {self.job_id} paused{': ' + job.message if job.message else ''}; still watching, "
                    f"'ferry queue resume {self.job_id}' ships again"
                )
            return True
        if job.state in ("done", "failed"):
            # The runner could not start the job (destination unreachable, say) or another runner
            # finished it meanwhile: open it again, with a growing pause between attempts.
            now = self.clock()
            if now < self._retry_at:
                return True
            if job.state == "failed" and job.message:
                self.on_message(f"job {self.job_id}: {job.message}; trying again in {self._retry_delay:.0f} s")
            self._retry_at = now + self._retry_delay
            self._retry_delay = min(60.0, self._retry_delay * 2)
            self.store.retry_failed(self.job_id)
            self.store.set_job_state(self.job_id, "queued", None, planned=0, finished=None)
            job = self.store.job(self.job_id)
        else:
            self._retry_delay = 1.0
        if (
            job.state in ("queued", "running")
            and (job.state == "queued" or not job.runner_alive)
            and self.store.claim_job(self.job_id, runner_id())
        ):
            self._state = "watching"
            self._start_runner()
        return True

    # ------------------------------------------------------------ complete files become tasks
    def _queue(self, ready: list[tuple[Candidate, Entry]]) -> None:
        if not ready:
            return
        detector, deleter = self.detector, self.deleter
        assert detector is not None and deleter is not None
        new: list[NewTask] = []
        for cand, e in ready:
            if cand.requeue is not None:
                self.store.requeue_task(cand.requeue, e.size, mtime_us(e.mtime))
                detector.shipped(cand.path, cand.requeue, e.size, mtime_us(e.mtime))
                deleter.forget(cand.requeue)
                continue
            parts = cand.rel.split("/")
            dst = self.dst.join(self.dst_root, *parts)
            new.append(NewTask("file", cand.path, dst, cand.rel, e.size, mtime_us(e.mtime)))
        added = self.store.add_tasks(self.job_id, new) if new else []
        runner = self.runner
        if runner is not None and added:
            runner.accounting.add_total(len(added), sum(t.size or 0 for t in added))
        ids = self._task_ids([t.src for t in new])
        for t in new:
            detector.shipped(t.src, ids.get(t.src), t.size, t.mtime_us)

    def _task_ids(self, srcs: list[str]) -> dict[str, int]:
        if not srcs:
            return {}
        wanted = set(srcs)
        out: dict[str, int] = {}
        # Newest first: the rows just inserted are at the end of the job's task list.
        for t in self.store.tasks(self.job_id, kinds=("file",), order_desc=True, page=max(64, len(wanted))):
            if t.src in wanted:
                out[t.src] = t.id
                if len(out) == len(wanted):
                    break
        return out

    # ------------------------------------------------------------ results
    def _task_finished(self, task: Task | NewTask, result: TaskResult) -> None:
        if not isinstance(task, Task) or task.kind != "file":
            return
        if self.detector is not None:
            self.detector.task_done(task.id, self.clock())
        if result.state == "done":
            if result.hash and result.level is Level.CHECKSUM:
                self._verified += 1
            if self.deleter is not None:
                self.deleter.put(task.id)

    # ------------------------------------------------------------ persistence
    def _persist(self, force: bool = False) -> None:
        if not self.job_id:
            return
        try:
            self.store.set_job_value(self.job_id, COUNTERS_KEY, self.counters().to_json())
        except FerryError:
            if force:
                raise


def _check_spec(spec: WatchSpec) -> None:
    """Refuse a watch that could delete sources without the verification the person asked for."""
    if spec.settle <= 0:
        raise UsageError("The settle time must be longer than zero")
    if spec.allow_size_only_delete and not spec.delete_after_verify:
        raise UsageError("--allow-size-only-delete only makes sense with --delete-after-verify")
    if spec.delete_after_verify and spec.options.verify == "none":
        raise UsageError("--delete-after-verify needs verification: --verify none would delete unchecked files")
    if spec.delete_after_verify and spec.options.verify == "size" and not spec.allow_size_only_delete:
        raise UsageError(
            "--delete-after-verify deletes only files verified by checksum, and --verify size compares sizes "
            "only; add --allow-size-only-delete to delete on matching sizes anyway"
        )


class _Feedback:
    """The runner's listener: counts for the watch, then passes events on (CLI output)."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def task_finished(self, job_id: int, task: Task | NewTask, result: TaskResult) -> None:
        self.watcher._task_finished(task, result)
        self.watcher.extra_listener.task_finished(job_id, task, result)

    def job_changed(self, job_id: int, state: str, message: str | None) -> None:
        self.watcher.extra_listener.job_changed(job_id, state, message)
        self.watcher._wake()

    def waiting(self, until: datetime | None, why: str) -> None:
        self.watcher.extra_listener.waiting(until, why)


def _checksum_verified(task: Task) -> bool:
    return task.checksum_verified


def _inside(backend: Backend, child: str, parent: str) -> bool:
    if backend.scheme == "local":
        child, parent = os.path.realpath(child), os.path.realpath(parent)
        return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)
    parent = parent.rstrip("/")
    return child == parent or child.startswith(parent + "/")
