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

import fnmatch
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime

from ferry.backends.base import Backend, Entry, Kind
from ferry.core.address import Address
from ferry.core.errors import FerryError, NotFound, UsageError, describe
from ferry.core.outcomes import Level
from ferry.transfers import move, watch_live
from ferry.transfers import watch_inotify as wi
from ferry.transfers.copy import AskFn
from ferry.transfers.options import JobOptions
from ferry.transfers.planner import mtime_us, unsafe_reason
from ferry.transfers.scheduler import Listener, NullListener, RunConfig, Runner
from ferry.transfers.store import NewTask, Store, Task, TaskResult, runner_id
from ferry.transfers.watch_inotify import Event, Inotify, InotifyUnavailable

log = logging.getLogger(__name__)

DEFAULT_SETTLE = 30.0
SPEC_KEY = "watch"
COUNTERS_KEY = "watch.counters"
SAFETY_RESCAN = 30.0  # with inotify: a full rescan this often anyway (lost events, NFS)
PERSIST_EVERY = 1.0
SWEEP_EVERY = 10.0  # look for finished tasks the listener did not report (another runner, restart)


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


@dataclass
class _Candidate:
    path: str
    rel: str
    size: int | None
    mtime_us: int | None
    changed_at: float  # wall clock of the last change we know of
    closed: bool = False  # the writer closed it (inotify) and has not modified it since
    closed_at: float = 0.0
    renamed: bool = False  # completed by a rename into place (shorter grace than a close)
    requeue: int | None = None  # task id: a rewritten file already shipped once


@dataclass(frozen=True)
class WatchResult:
    job_id: int
    state: str  # the job's state at the end (done, failed, queued when stopped, cancelled, paused)
    counters: WatchCounters
    reason: str  # until-file, until-idle, stopped, cancelled


class Watcher:
    """Feeds one live job from a folder and runs it in this process."""

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
        self._runner_thread: threading.Thread | None = None
        self._thread: threading.Thread | None = None
        self._deleter: threading.Thread | None = None
        self._heartbeat: watch_live.Heartbeat | None = None
        self._stop = threading.Event()
        self._stop_drain = False
        self._finished = threading.Event()
        self._lock = threading.Lock()
        self._pending: dict[str, _Candidate] = {}
        self._known: dict[str, tuple[int, int | None, int | None]] = {}  # src -> (task id, size, mtime_us)
        self._finished_at: dict[int, float] = {}  # task id -> when we learned it finished
        self._deletions: queue.Queue[int | None] = queue.Queue()
        self._handled: set[int] = set()  # done tasks whose source we have dealt with
        self._persisted = WatchCounters()
        self._verified = 0
        self._state = "starting"
        self._reason = ""
        self._final_state = ""
        self._error: BaseException | None = None
        self._inotify: Inotify | None = None
        self._delete_lock = threading.Lock()
        self._retry_at = 0.0
        self._retry_delay = 1.0
        self._last_activity = clock()
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
        self._load_known()
        self._heartbeat = watch_live.Heartbeat(self.store, self.job_id)
        self._heartbeat.start()
        self._start_runner()
        self._use_inotify()
        self._thread = threading.Thread(target=self._main, name=f"ferry-watch-{self.job_id}", daemon=True)
        self._deleter = threading.Thread(target=self._delete_loop, name=f"ferry-watch-del-{self.job_id}", daemon=True)
        self._state = "watching"
        self._thread.start()
        self._deleter.start()
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
        with self._lock:
            pending = len(self._pending)
            known = len(self._known)
        p = self._persisted
        return WatchCounters(
            seen=known + pending + p.vanished,
            pending=pending,
            queued=(c.count("queued") + c.count("running")) if c else 0,
            shipped=c.count("done") if c else 0,
            verified=self._verified,
            skipped=c.count("skipped") if c else 0,
            deleted=p.deleted,
            kept=p.kept,
            failed=c.count("failed") if c else 0,
            vanished=p.vanished,
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

    def _load_known(self) -> None:
        now = self.clock()
        verified = 0
        for t in self.store.tasks(self.job_id, kinds=("file",)):
            self._known[t.src] = (t.id, t.size, t.mtime_us)
            if t.state not in ("queued", "running"):
                self._finished_at[t.id] = now
            if t.state == "done" and _checksum_verified(t):
                verified += 1
            if t.state == "done" and self.spec.delete_after_verify:
                self._deletions.put(t.id)  # a crash may have come between verification and deletion
        self._verified = verified

    def _use_inotify(self) -> None:
        if not (self.spec.use_inotify and self.src.scheme == "local"):
            return
        try:
            ino = Inotify()
        except InotifyUnavailable as exc:
            log.info("inotify unavailable, polling: %s", exc)
            return
        if not ino.add(self.src_root):
            ino.close()
            return
        self._inotify = ino

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
        ino = self._inotify
        if ino is not None:
            ino.wake()

    # ------------------------------------------------------------ the loop
    def _main(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            log.exception("watch failed")
            self._error = exc
            self._halt_runner()
        finally:
            self._deletions.put(None)
            if self._deleter is not None:
                self._deleter.join()
            self._persist(force=True)
            if self._heartbeat is not None:
                self._heartbeat.stop()
            ino = self._inotify
            if ino is not None:
                ino.close()
            self.pool.release()
            self._finished.set()

    def _tick(self) -> float:
        # Often enough to notice settling promptly; rarely enough to cost nothing on a quiet folder.
        return min(1.0, max(0.05, self.spec.settle / 4))

    def _grace(self, cand: _Candidate) -> float:
        return self.spec.rename_grace if cand.renamed else self.spec.close_grace

    def _next_timeout(self) -> float:
        """Sleep until the next candidate may be complete (events wake us earlier), at most a tick."""
        now = self.clock()
        soonest = self._tick()
        with self._lock:
            for c in self._pending.values():
                due = c.closed_at + self._grace(c) if c.closed else c.changed_at + self.spec.settle
                soonest = min(soonest, due - now)
        return max(0.05, soonest)  # a file that cannot be statted must not make this spin

    def _loop(self) -> None:
        spec = self.spec
        self._scan_all()
        last_scan = last_persist = self.clock()
        while not self._stop.is_set():
            ino = self._inotify
            if ino is not None:
                self._handle_events(ino.read(self._next_timeout()))
                if ino.overflowed:
                    ino.overflowed = False
                    self._scan_all()
                    last_scan = self.clock()
            else:
                self._stop.wait(self._tick())
            now = self.clock()
            rescan = SAFETY_RESCAN if ino is not None else min(2.0, max(0.1, spec.settle / 2))
            if now - last_scan >= rescan:
                self._scan_all()
                last_scan = now
            self._settle(now)
            if now - last_persist >= PERSIST_EVERY:
                self._persist()
                last_persist = now
            if not self._supervise():
                return
            if any(os.path.exists(m) for m in self._markers):
                # The writer says it is done: everything still waiting is complete now.
                self._scan_all()
                self._settle(self.clock(), flush=True)
                self._reason = "until-file"
                self._stop_drain = True
                break
            if spec.until_idle is not None and not self._pending and now - self._last_activity >= spec.until_idle:
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
            self._sweep_deletions()
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

    # ------------------------------------------------------------ seeing files
    def _wanted(self, name: str, path: str | None = None) -> bool:
        if name.endswith(".ferry-part") or name.endswith(".ferry-tmp"):
            return False
        if path is not None and self._markers and os.path.abspath(path) in self._markers:
            return False  # the --until marker is a signal to the watch, not data
        if self.spec.patterns:
            return any(fnmatch.fnmatchcase(name, p) for p in self.spec.patterns)
        return not name.startswith(".")  # hidden names are writers' temporary files by convention

    def _scan_all(self) -> None:
        found: dict[str, tuple[str, Entry]] = {}
        stack: list[tuple[str, str]] = [(self.src_root, "")]
        ino = self._inotify
        while stack:
            folder, rel = stack.pop()
            try:
                entries = list(self.src.list(folder))
            except NotFound:
                continue
            except FerryError as exc:
                self.on_message(f"cannot list {self.src.display(folder)}: {describe(exc)}")
                continue
            for e in entries:
                r = f"{rel}/{e.name}" if rel else e.name
                if e.kind is Kind.DIR:
                    if self.spec.recursive and not e.name.startswith(".") and unsafe_reason(e.name) is None:
                        if ino is not None:
                            ino.add(e.path)
                        stack.append((e.path, r))
                elif e.kind is Kind.FILE and self._wanted(e.name, e.path):
                    found[e.path] = (r, e)
        now = self.clock()
        with self._lock:
            for path in [p for p in self._pending if p not in found]:
                self._vanish(path)
            for path, (r, e) in found.items():
                self._observe(path, r, e, now)

    def _observe(self, path: str, rel: str, e: Entry, now: float) -> None:
        """Record what a listing or stat showed (holding ``_lock``)."""
        mt = mtime_us(e.mtime)
        cand = self._pending.get(path)
        if cand is None:
            known = self._known.get(path)
            requeue = None
            if known is not None:
                task_id, size, kmt = known
                finished = self._finished_at.get(task_id)
                if finished is None or (size == e.size and kmt == mt):
                    return  # queued or in transfer (the copier reads it fresh), or unchanged
                if mt is not None and mt / 1e6 <= finished:
                    return  # last written before it was shipped
                requeue = task_id
            reason = unsafe_reason(e.name)
            if reason:
                return
            changed = now
            if self.src.scheme == "local" and mt is not None:
                # Untouched for long already (found at start, or moved in with its old time): no
                # need to wait the whole settle time again, only long enough to see it is not
                # growing (a copier that set an old time first would otherwise be caught).
                confirm = min(self.spec.settle, 1.0)
                changed = max(min(now, mt / 1e6), now - self.spec.settle + confirm)
            self._pending[path] = _Candidate(path, rel, e.size, mt, changed, requeue=requeue)
            self._last_activity = now
            return
        if (cand.size, cand.mtime_us) != (e.size, mt):
            cand.size, cand.mtime_us = e.size, mt
            if not cand.closed:
                cand.changed_at = now
            self._last_activity = now

    def _vanish(self, path: str) -> None:
        if self._pending.pop(path, None) is not None:
            p = self._persisted
            self._persisted = replace(p, vanished=p.vanished + 1)

    def _handle_events(self, events: list[Event]) -> None:
        if not events:
            return
        now = self.clock()
        for ev in events:
            path = ev.path
            if ev.name == "":
                if ev.mask & (wi.IN_DELETE_SELF | wi.IN_MOVE_SELF):
                    if ev.folder == self.src_root:
                        self.on_message(f"the watched folder {self.src_root} was removed or moved")
                    ino = self._inotify
                    if ino is not None:
                        ino.forget(ev.folder)
                continue
            if ev.is_dir:
                if self.spec.recursive and ev.mask & (wi.IN_CREATE | wi.IN_MOVED_TO) and not ev.name.startswith("."):
                    ino = self._inotify
                    if ino is not None:
                        ino.add(path)
                    self._scan_all()  # files written before the watch was added
                elif ev.mask & (wi.IN_DELETE | wi.IN_MOVED_FROM):
                    with self._lock:
                        prefix = path.rstrip(os.sep) + os.sep
                        for p in [p for p in self._pending if p.startswith(prefix)]:
                            self._vanish(p)
                continue
            if not self._wanted(ev.name, path):
                continue
            with self._lock:
                if ev.mask & (wi.IN_DELETE | wi.IN_MOVED_FROM):
                    self._vanish(path)
                    continue
                cand = self._pending.get(path)
            if cand is None:
                try:
                    e = self.src.stat(path)
                except FerryError:
                    continue
                if e.kind is not Kind.FILE:
                    continue
                rel = os.path.relpath(path, self.src_root).replace(os.sep, "/")
                with self._lock:
                    self._observe(path, rel, e, now)
                    cand = self._pending.get(path)
                    if cand is not None and ev.mask & wi.IN_CREATE:
                        cand.changed_at = now  # just created: its mtime says nothing yet
            if cand is None:
                continue
            with self._lock:
                if ev.mask & wi.IN_MODIFY:
                    cand.closed = cand.renamed = False
                    cand.changed_at = now
                if ev.mask & (wi.IN_CLOSE_WRITE | wi.IN_MOVED_TO):
                    cand.closed = True
                    cand.closed_at = now
                    cand.renamed = bool(ev.mask & wi.IN_MOVED_TO)
                self._last_activity = now

    def _settle(self, now: float, *, flush: bool = False) -> None:
        """Queue the candidates that are complete (all of them with ``flush``)."""
        with self._lock:
            cands = list(self._pending.values())
        ready: list[tuple[_Candidate, Entry]] = []
        for cand in cands:
            try:
                e = self.src.stat(cand.path)
            except NotFound:
                with self._lock:
                    self._vanish(cand.path)
                continue
            except FerryError:
                continue
            if e.kind is not Kind.FILE:
                with self._lock:
                    self._vanish(cand.path)
                continue
            with self._lock:
                before = (cand.size, cand.mtime_us)
                self._observe(cand.path, cand.rel, e, now)
                if flush:
                    ready.append((cand, e))
                elif (cand.size, cand.mtime_us) != before and not cand.closed:
                    continue
                elif (cand.closed and now - cand.closed_at >= self._grace(cand)) or (
                    now - cand.changed_at >= self.spec.settle
                ):
                    ready.append((cand, e))
        if ready:
            self._queue(ready)

    def _queue(self, ready: list[tuple[_Candidate, Entry]]) -> None:
        new: list[NewTask] = []
        for cand, e in ready:
            if cand.requeue is not None:
                self.store.requeue_task(cand.requeue, e.size, mtime_us(e.mtime))
                with self._lock:
                    self._known[cand.path] = (cand.requeue, e.size, mtime_us(e.mtime))
                    self._finished_at.pop(cand.requeue, None)
                    self._handled.discard(cand.requeue)
                    self._pending.pop(cand.path, None)
                continue
            parts = cand.rel.split("/")
            dst = self.dst.join(self.dst_root, *parts)
            new.append(NewTask("file", cand.path, dst, cand.rel, e.size, mtime_us(e.mtime)))
        added = self.store.add_tasks(self.job_id, new) if new else []
        runner = self.runner
        if runner is not None and added:
            runner.accounting.add_total(len(added), sum(t.size or 0 for t in added))
        ids = self._task_ids([t.src for t in new])
        with self._lock:
            for t in new:
                task_id = ids.get(t.src)
                if task_id is not None:
                    self._known[t.src] = (task_id, t.size, t.mtime_us)
                self._pending.pop(t.src, None)

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

    # ------------------------------------------------------------ results and deletion
    def _task_finished(self, task: Task | NewTask, result: TaskResult) -> None:
        if not isinstance(task, Task) or task.kind != "file":
            return
        self._last_activity = self.clock()
        self._finished_at[task.id] = self.clock()
        if result.state == "done":
            if result.hash and result.level is Level.CHECKSUM:
                self._verified += 1
            if self.spec.delete_after_verify:
                self._deletions.put(task.id)

    def _delete_loop(self) -> None:
        last_sweep = self.clock()
        while True:
            try:
                task_id = self._deletions.get(timeout=1.0)
            except queue.Empty:
                task_id = -1
            if task_id is None:
                self._drain_deletions()
                return
            if task_id >= 0:
                self._delete_if_verified(task_id)
            if self.spec.delete_after_verify and self.clock() - last_sweep >= SWEEP_EVERY:
                last_sweep = self.clock()
                self._sweep_deletions()

    def _drain_deletions(self) -> None:
        while True:
            try:
                task_id = self._deletions.get_nowait()
            except queue.Empty:
                return
            if task_id is not None and task_id >= 0:
                self._delete_if_verified(task_id)

    def _sweep_deletions(self) -> None:
        if not self.spec.delete_after_verify:
            return
        for t in self.store.tasks(self.job_id, states=("done",), kinds=("file",)):
            if t.id not in self._handled:
                self._finished_at.setdefault(t.id, self.clock())
                self._delete_if_verified(t.id)

    def _delete_if_verified(self, task_id: int) -> None:
        with self._delete_lock:  # the deleter thread and the final sweep never race on one file
            self._delete_one(task_id)

    def _delete_one(self, task_id: int) -> None:
        """Remove a source whose copy is recorded verified, if it still is what was verified
        (the rule Move jobs follow too: :func:`ferry.transfers.move.remove_source`)."""
        if task_id in self._handled:
            return
        task = None
        for _ in range(50):
            # The scheduler reports a result just before writing it: wait for the row to say done.
            task = self.store.task(task_id)
            if task is None or task.state not in ("queued", "running"):
                break
            time.sleep(0.02)
        if task is None or task.state != "done":
            return
        self._handled.add(task_id)
        lowest = Level.SIZE if self.spec.allow_size_only_delete else Level.CHECKSUM
        removal = move.remove_source(self.src, self.dst, task, lowest)
        if removal.result is move.Removed.KEPT:
            self._keep(f"kept {self.src.display(task.src)}: {removal.note}")
            return
        if removal.result is move.Removed.GONE:
            return  # removed already (by us before a crash, or by someone else)
        with self._lock:
            p = self._persisted
            self._persisted = replace(p, deleted=p.deleted + 1)
        self._persist(force=True)

    def _keep(self, message: str) -> None:
        with self._lock:
            p = self._persisted
            self._persisted = replace(p, kept=p.kept + 1)
        self.on_message(message)

    # ------------------------------------------------------------ persistence
    def _persist(self, force: bool = False) -> None:
        if not self.job_id:
            return
        try:
            self.store.set_job_value(self.job_id, COUNTERS_KEY, self.counters().to_json())
        except FerryError:
            if force:
                raise


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
