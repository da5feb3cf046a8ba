"""Delete-after-verify for a folder watch (the deletion half of :mod:`ferry.transfers.watch`).

:class:`Deleter` runs on its own thread. It is handed the id of every task that finished *done*
and removes that task's source only if the copy is recorded verified (by checksum, or by size
where the person allowed it) and the source still is what was verified: the rule Move jobs follow
too (:func:`ferry.transfers.move.remove_source`). Every ten seconds it also sweeps the job for
done tasks nobody reported (another runner finished them, or this process restarted).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from ferry.backends.base import Backend
from ferry.core.outcomes import Level
from ferry.transfers import move
from ferry.transfers.store import Store

SWEEP_EVERY = 10.0  # look for finished tasks the listener did not report (another runner, restart)


class Deleter:
    def __init__(
        self,
        store: Store,
        job_id: int,
        src: Backend,
        dst: Backend,
        *,
        enabled: bool,
        allow_size_only: bool,
        clock: Callable[[], float],
        on_message: Callable[[str], None],
        on_deleted: Callable[[], None],
        on_done_seen: Callable[[int, float], object],
        deleted: int = 0,
        kept: int = 0,
    ) -> None:
        self.store = store
        self.job_id = job_id
        self.src = src
        self.dst = dst
        self.enabled = enabled  # delete_after_verify
        self.lowest = Level.SIZE if allow_size_only else Level.CHECKSUM
        self.clock = clock
        self.on_message = on_message
        self.on_deleted = on_deleted  # after each deletion (the watch persists its counters)
        self.on_done_seen = on_done_seen  # a sweep found a done task (task id, when)
        self.deleted = deleted
        self.kept = kept  # not deleted: not verified well enough, or changed after shipping
        self._queue: queue.Queue[int | None] = queue.Queue()
        self._handled: set[int] = set()  # done tasks whose source we have dealt with
        self._lock = threading.Lock()  # the thread and the final sweep never race on one file
        self._counts = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self, name: str) -> None:
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def put(self, task_id: int) -> None:
        """A task finished done: delete its source (if deletion is on)."""
        if self.enabled:
            self._queue.put(task_id)

    def forget(self, task_id: int) -> None:
        """The task's file is shipped again (it was rewritten): decide about it afresh when it is done."""
        self._handled.discard(task_id)

    def finish(self) -> None:
        """Delete what is still waiting, then stop the thread (and wait for it)."""
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        last_sweep = self.clock()
        while True:
            try:
                task_id = self._queue.get(timeout=1.0)
            except queue.Empty:
                task_id = -1
            if task_id is None:
                self._drain()
                return
            if task_id >= 0:
                self.delete_if_verified(task_id)
            if self.enabled and self.clock() - last_sweep >= SWEEP_EVERY:
                last_sweep = self.clock()
                self.sweep()

    def _drain(self) -> None:
        while True:
            try:
                task_id = self._queue.get_nowait()
            except queue.Empty:
                return
            if task_id is not None and task_id >= 0:
                self.delete_if_verified(task_id)

    def sweep(self) -> None:
        if not self.enabled:
            return
        for t in self.store.tasks(self.job_id, states=("done",), kinds=("file",)):
            if t.id not in self._handled:
                self.on_done_seen(t.id, self.clock())
                self.delete_if_verified(t.id)

    def delete_if_verified(self, task_id: int) -> None:
        with self._lock:
            self._delete_one(task_id)

    def _delete_one(self, task_id: int) -> None:
        """Remove a source whose copy is recorded verified, if it still is what was verified."""
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
        removal = move.remove_source(self.src, self.dst, task, self.lowest)
        if removal.result is move.Removed.KEPT:
            with self._counts:
                self.kept += 1
            self.on_message(f"kept {self.src.display(task.src)}: {removal.note}")
            return
        if removal.result is move.Removed.GONE:
            return  # removed already (by us before a crash, or by someone else)
        with self._counts:
            self.deleted += 1
        self.on_deleted()
