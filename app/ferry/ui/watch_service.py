"""The window's folder watches (no Qt here).

Each watch is a :class:`ferry.transfers.watch.Watcher` with its own runner threads; it is
started on a worker thread (it resolves and may log in to the destination). Its job is left out
of the window's queue runner (``skip``): two runners of one process would otherwise both claim
the live job. The transfers panel shows the counters the watcher saves in the queue every
second, so watches started by ``ferry watch`` in a terminal show there too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from ferry.transfers.copy import AskFn
from ferry.transfers.store import Store
from ferry.transfers.tuning import AUTO_MAX
from ferry.transfers.watch import Watcher, WatchResult, WatchSpec, is_watch_job

log = logging.getLogger(__name__)


class SkipJobs:
    """The jobs the window's queue runner must leave alone, as ``RunConfig.skip_job_ids``.

    A watch's job id is known only once ``Watcher.start()`` has created (or reopened) the job and
    started its own runner; in that moment the window's runner could claim it. So while a watch
    is starting, every watch job counts as skipped (a small read, only then)."""

    def __init__(self, store_path: Path | None) -> None:
        self.store_path = store_path
        self.ids: set[int] = set()
        self.starting = 0
        self._lock = threading.Lock()
        self._store: Store | None = None

    def __contains__(self, job_id: object) -> bool:
        if job_id in self.ids:
            return True
        if not self.starting or not isinstance(job_id, int):
            return False
        with self._lock:
            if self._store is None:
                self._store = Store(self.store_path)
            return is_watch_job(self._store, job_id)

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None


class WatchManager:
    def __init__(
        self,
        store_path: Path | None,
        *,
        parallel: Callable[[], int] = lambda: 0,  # files at once; 0: auto
        ask: AskFn | None = None,
        on_message: Callable[[str], object] | None = None,
    ) -> None:
        self.store_path = store_path
        self.parallel = parallel
        self.ask = ask
        self.on_message = on_message
        self.skip = SkipJobs(store_path)  # jobs the window's own queue runner must leave alone
        self._watchers: dict[int, Watcher] = {}
        # Watches being stopped: they count as running until stop() has let go of them (job out
        # of `skip`), so a caller that saw running() turn False may rely on that bookkeeping.
        self._stopping: set[int] = set()
        self._lock = threading.Lock()

    def start(self, spec: WatchSpec) -> int:
        """Start watching (call on a worker thread); returns the watch's job id.

        Raises :class:`ferry.core.errors.UsageError` (or another FerryError) with the reason when
        the folder or destination is unusable; nothing is started then."""
        store = Store(self.store_path)
        msg = self.on_message

        def say(text: str) -> None:
            if msg is not None:
                msg(text)

        n = self.parallel()
        watcher = Watcher(spec, store, parallel=n or AUTO_MAX, auto_parallel=n == 0, ask=self.ask, on_message=say)
        with self._lock:
            self.skip.starting += 1
        try:
            job_id = watcher.start()
        except BaseException:
            store.close()
            raise
        else:
            with self._lock:
                self.skip.ids.add(job_id)
                self._watchers[job_id] = watcher
        finally:
            with self._lock:
                self.skip.starting -= 1
        return job_id

    def running(self, job_id: int) -> bool:
        with self._lock:
            w = self._watchers.get(job_id)
            stopping = job_id in self._stopping
        return w is not None and (stopping or not w.finished)

    def watching(self) -> list[int]:
        with self._lock:
            return [j for j, w in self._watchers.items() if not w.finished]

    def watcher(self, job_id: int) -> Watcher | None:
        with self._lock:
            return self._watchers.get(job_id)

    def stop(self, job_id: int, timeout: float | None = 30.0) -> WatchResult | None:
        """Stop one watch now and wait for its threads (call on a worker thread). Files in flight
        keep their partial data; what was queued stays in the job, which the window's runner may
        then finish, and watching the same folder again continues it."""
        with self._lock:
            w = self._watchers.get(job_id)
            if w is not None:
                self._stopping.add(job_id)
        if w is None:
            return None
        w.stop()
        try:
            result = w.wait(timeout)
        finally:
            with self._lock:
                self._stopping.discard(job_id)
                if w.finished:
                    self._watchers.pop(job_id, None)
                    self.skip.ids.discard(job_id)
                    w.store.close()
        return result

    def stop_all(self, timeout: float = 15.0) -> None:
        for job_id in list(self._watchers):
            try:
                self.stop(job_id, timeout)
            except Exception:
                log.exception("stopping watch %s failed", job_id)
        self.skip.close()
