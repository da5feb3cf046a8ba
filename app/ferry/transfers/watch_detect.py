"""Which files in a watched folder are complete (the detection half of :mod:`ferry.transfers.watch`).

:class:`Detector` keeps the *candidates*: files seen but not yet shipped, each with the last
change known of it. Listings (polling, always) and inotify events (Linux, local folders) update
them; :meth:`Detector.settle` hands back those that are complete: untouched for the settle time,
or closed (or renamed into place) by their writer and untouched for a short grace since. It also
remembers which files were shipped as which task, so a file rewritten after shipping is shipped
again and an unchanged one never is.

The watcher's loop thread calls everything here; the watcher's ``lock`` guards the candidates
against the threads that read counters.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ferry.backends.base import Backend, Entry, Kind
from ferry.core.errors import FerryError, NotFound, describe
from ferry.transfers import watch_inotify as wi
from ferry.transfers.planner import mtime_us, unsafe_reason
from ferry.transfers.watch_inotify import Event, Inotify, InotifyUnavailable

log = logging.getLogger(__name__)

GONE = wi.IN_DELETE | wi.IN_MOVED_FROM
ARRIVED = wi.IN_CREATE | wi.IN_MOVED_TO
COMPLETED = wi.IN_CLOSE_WRITE | wi.IN_MOVED_TO


@dataclass
class Candidate:
    path: str
    rel: str
    size: int | None
    mtime_us: int | None
    changed_at: float  # wall clock of the last change we know of
    closed: bool = False  # the writer closed it (inotify) and has not modified it since
    closed_at: float = 0.0
    renamed: bool = False  # completed by a rename into place (shorter grace than a close)
    requeue: int | None = None  # task id: a rewritten file already shipped once


class WatchedFolder(Protocol):
    """What detection reads of a :class:`~ferry.transfers.watch.WatchSpec`."""

    @property
    def recursive(self) -> bool: ...
    @property
    def patterns(self) -> tuple[str, ...]: ...
    @property
    def settle(self) -> float: ...
    @property
    def use_inotify(self) -> bool: ...
    @property
    def close_grace(self) -> float: ...
    @property
    def rename_grace(self) -> float: ...


class Detector:
    def __init__(
        self,
        spec: WatchedFolder,
        src: Backend,
        src_root: str,
        *,
        lock: threading.Lock,
        clock: Callable[[], float],
        on_message: Callable[[str], None],
        markers: list[str],
        vanished: int = 0,
    ) -> None:
        self.spec = spec
        self.src = src
        self.src_root = src_root
        self.lock = lock
        self.clock = clock
        self.on_message = on_message
        self.markers = markers  # --until files: signals to the watch, never data
        self.vanished = vanished  # candidates deleted or renamed away before they were complete
        self.pending: dict[str, Candidate] = {}
        self.known: dict[str, tuple[int, int | None, int | None]] = {}  # src -> (task id, size, mtime_us)
        self.finished_at: dict[int, float] = {}  # task id -> when we learned it finished
        self.last_activity = clock()
        self.inotify: Inotify | None = None

    # ---- setup and timing
    def use_inotify(self) -> None:
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
        self.inotify = ino

    def wake(self) -> None:
        ino = self.inotify
        if ino is not None:
            ino.wake()

    def close(self) -> None:
        ino = self.inotify
        if ino is not None:
            ino.close()

    def tick(self) -> float:
        # Often enough to notice settling promptly; rarely enough to cost nothing on a quiet folder.
        return min(1.0, max(0.05, self.spec.settle / 4))

    def grace(self, cand: Candidate) -> float:
        return self.spec.rename_grace if cand.renamed else self.spec.close_grace

    def next_timeout(self) -> float:
        """Sleep until the next candidate may be complete (events wake us earlier), at most a tick."""
        now = self.clock()
        soonest = self.tick()
        with self.lock:
            for c in self.pending.values():
                due = c.closed_at + self.grace(c) if c.closed else c.changed_at + self.spec.settle
                soonest = min(soonest, due - now)
        return max(0.05, soonest)  # a file that cannot be statted must not make this spin

    # ---- what was shipped
    def shipped(self, path: str, task_id: int | None, size: int | None, mt: int | None) -> None:
        """``path`` is now ``task_id``'s file (queued again for a rewritten file): no longer a candidate."""
        with self.lock:
            if task_id is not None:
                self.known[path] = (task_id, size, mt)
                self.finished_at.pop(task_id, None)
            self.pending.pop(path, None)

    def task_done(self, task_id: int, at: float) -> None:
        """A task finished: a later change to its file ships it again."""
        self.finished_at[task_id] = at
        self.last_activity = at

    # ---- seeing files
    def wanted(self, name: str, path: str | None = None) -> bool:
        if name.endswith(".ferry-part") or name.endswith(".ferry-tmp"):
            return False
        if path is not None and self.markers and os.path.abspath(path) in self.markers:
            return False  # the --until marker is a signal to the watch, not data
        if self.spec.patterns:
            return any(fnmatch.fnmatchcase(name, p) for p in self.spec.patterns)
        return not name.startswith(".")  # hidden names are writers' temporary files by convention

    def scan_all(self) -> None:
        found: dict[str, tuple[str, Entry]] = {}
        stack: list[tuple[str, str]] = [(self.src_root, "")]
        ino = self.inotify
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
                elif e.kind is Kind.FILE and self.wanted(e.name, e.path):
                    found[e.path] = (r, e)
        now = self.clock()
        with self.lock:
            for path in [p for p in self.pending if p not in found]:
                self.vanish(path)
            for path, (r, e) in found.items():
                self.observe(path, r, e, now)

    def observe(self, path: str, rel: str, e: Entry, now: float) -> None:
        """Record what a listing or stat showed (holding ``lock``)."""
        mt = mtime_us(e.mtime)
        cand = self.pending.get(path)
        if cand is None:
            self._first_sight(path, rel, e, mt, now)
            return
        if (cand.size, cand.mtime_us) != (e.size, mt):
            cand.size, cand.mtime_us = e.size, mt
            if not cand.closed:
                cand.changed_at = now
            self.last_activity = now

    def _first_sight(self, path: str, rel: str, e: Entry, mt: int | None, now: float) -> None:
        known = self.known.get(path)
        requeue = None
        if known is not None:
            task_id, size, kmt = known
            finished = self.finished_at.get(task_id)
            if finished is None or (size == e.size and kmt == mt):
                return  # queued or in transfer (the copier reads it fresh), or unchanged
            if mt is not None and mt / 1e6 <= finished:
                return  # last written before it was shipped
            requeue = task_id
        if unsafe_reason(e.name):
            return
        changed = now
        if self.src.scheme == "local" and mt is not None:
            # Untouched for long already (found at start, or moved in with its old time): no
            # need to wait the whole settle time again, only long enough to see it is not
            # growing (a copier that set an old time first would otherwise be caught).
            confirm = min(self.spec.settle, 1.0)
            changed = max(min(now, mt / 1e6), now - self.spec.settle + confirm)
        self.pending[path] = Candidate(path, rel, e.size, mt, changed, requeue=requeue)
        self.last_activity = now

    def vanish(self, path: str) -> None:
        """(holding ``lock``)"""
        if self.pending.pop(path, None) is not None:
            self.vanished += 1

    # ---- inotify
    def handle_events(self, events: list[Event]) -> None:
        if not events:
            return
        now = self.clock()
        for ev in events:
            if ev.name == "":
                self._folder_event(ev)
            elif ev.is_dir:
                self._subfolder_event(ev)
            elif self.wanted(ev.name, ev.path):
                self._file_event(ev, now)

    def _folder_event(self, ev: Event) -> None:
        """About a watched folder itself: gone or moved, it is watched no more."""
        if not ev.mask & (wi.IN_DELETE_SELF | wi.IN_MOVE_SELF):
            return
        if ev.folder == self.src_root:
            self.on_message(f"the watched folder {self.src_root} was removed or moved")
        ino = self.inotify
        if ino is not None:
            ino.forget(ev.folder)

    def _subfolder_event(self, ev: Event) -> None:
        if self.spec.recursive and ev.mask & ARRIVED and not ev.name.startswith("."):
            ino = self.inotify
            if ino is not None:
                ino.add(ev.path)
            self.scan_all()  # files written before the watch was added
        elif ev.mask & GONE:
            with self.lock:
                prefix = ev.path.rstrip(os.sep) + os.sep
                for p in [p for p in self.pending if p.startswith(prefix)]:
                    self.vanish(p)

    def _file_event(self, ev: Event, now: float) -> None:
        with self.lock:
            if ev.mask & GONE:
                self.vanish(ev.path)
                return
            cand = self.pending.get(ev.path)
        if cand is None:
            cand = self._stat_new(ev, now)
            if cand is None:
                return
        with self.lock:
            if ev.mask & wi.IN_MODIFY:
                cand.closed = cand.renamed = False
                cand.changed_at = now
            if ev.mask & COMPLETED:
                cand.closed = True
                cand.closed_at = now
                cand.renamed = bool(ev.mask & wi.IN_MOVED_TO)
            self.last_activity = now

    def _stat_new(self, ev: Event, now: float) -> Candidate | None:
        """An event about a file that is no candidate yet: look at it, and make it one if it should be."""
        try:
            e = self.src.stat(ev.path)
        except FerryError:
            return None
        if e.kind is not Kind.FILE:
            return None
        rel = os.path.relpath(ev.path, self.src_root).replace(os.sep, "/")
        with self.lock:
            self.observe(ev.path, rel, e, now)
            cand = self.pending.get(ev.path)
            if cand is not None and ev.mask & wi.IN_CREATE:
                cand.changed_at = now  # just created: its mtime says nothing yet
        return cand

    # ---- complete files
    def settle(self, now: float, *, flush: bool = False) -> list[tuple[Candidate, Entry]]:
        """The candidates that are complete (all of them with ``flush``), each with a fresh stat."""
        with self.lock:
            cands = list(self.pending.values())
        ready: list[tuple[Candidate, Entry]] = []
        for cand in cands:
            try:
                e = self.src.stat(cand.path)
            except NotFound:
                with self.lock:
                    self.vanish(cand.path)
                continue
            except FerryError:
                continue
            if e.kind is not Kind.FILE:
                with self.lock:
                    self.vanish(cand.path)
                continue
            with self.lock:
                before = (cand.size, cand.mtime_us)
                self.observe(cand.path, cand.rel, e, now)
                if flush or self._complete(cand, before, now):
                    ready.append((cand, e))
        return ready

    def _complete(self, cand: Candidate, before: tuple[int | None, int | None], now: float) -> bool:
        if (cand.size, cand.mtime_us) != before and not cand.closed:
            return False  # still changing
        return (cand.closed and now - cand.closed_at >= self.grace(cand)) or now - cand.changed_at >= self.spec.settle
