"""The one place where threads meet Qt.

Worker threads never touch widgets. They hand results back with :meth:`Bridge.post`, which
queues a callable onto the UI thread through a single signal (a queued connection), and they
ask the person questions with :meth:`Bridge.ask_blocking`, which shows a dialog on the UI thread
and blocks only the asking worker until it is answered. Slow calls (listing a folder, logging
in, creating a job, reading the queue store) go through :meth:`Bridge.run`, whose result comes
back on the UI thread. Everything started here is tracked so :meth:`Bridge.shutdown` can cancel
and join it before the window goes away (a late signal must never reach a deleted object).
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from PySide6.QtCore import QObject, QThread, Signal, Slot

from ferry.core.cancel import CancelToken

log = logging.getLogger(__name__)

T = TypeVar("T")
SWITCH_INTERVAL = 0.0005
WORKER_NICE = 5


def background_priority() -> None:
    """Make the calling (worker) thread yield the CPU to the UI thread when cores are busy.

    On Linux nice values are per thread and inherited by threads it starts, so calling this at
    the top of a worker also covers the transfer workers a Runner starts from it. The UI thread
    keeps its priority: under load it gets the CPU first and the window stays responsive.
    """
    if os.environ.get("FERRY_UI_NO_NICE"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WORKER_NICE)
    except (AttributeError, OSError):  # not Linux, or not allowed: nothing to do
        pass


class PaintGate:
    """Background Python work steps aside while a busy view paints.

    Painting a listing calls into Python once per visible cell, and each call must take the GIL.
    While a worker thread runs Python, every one of those calls waits for the GIL to be handed
    over (and, on a loaded machine, for the kernel to wake the UI thread): a hundred cells became
    a freeze of a tenth of a second or more. Views close the gate around their paint; workers
    that produce lots of Python objects (listings) call :meth:`wait` between small chunks.
    """

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()
        self._depth = 0

    def close(self) -> None:
        self._depth += 1
        self._open.clear()

    def open(self) -> None:
        self._depth = max(0, self._depth - 1)
        if not self._depth:
            self._open.set()

    def wait(self, timeout: float = 0.25) -> None:
        """Block while a paint is in progress (never for long: a paint takes milliseconds)."""
        self._open.wait(timeout)


PAINT_GATE = PaintGate()


class _Cancelled(Exception):
    """The bridge shut down while a worker was waiting for an answer."""


class Bridge(QObject):
    """Lives on the UI thread; any thread may call :meth:`post`, :meth:`run` and :meth:`ask_blocking`."""

    _deliver = Signal(object)
    # Emitted on the UI thread when a question dialog opens (tests answer it through the UI).
    prompt_shown = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        # Every call from Qt into Python (a model's data() while painting, a slot) must take the
        # GIL; while a worker thread runs Python it hands the GIL over only every switch
        # interval (5 ms by default), so a repaint of a few hundred cells could wait for seconds
        # behind a busy listing or transfer. A 0.5 ms interval keeps each wait short.
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        self._deliver.connect(self._on_deliver)
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._work: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._idle = 0  # workers waiting for a job
        self._closing = CancelToken()
        self._waiting: set[threading.Event] = set()
        self._finished: list[Callable[[], None]] = []  # done jobs, released on the UI thread

    # ---- UI thread <- any thread ----
    def post(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the UI thread soon (never synchronously, even from the UI thread)."""
        if not self._closing.cancelled:
            try:
                self._deliver.emit(fn)
            except RuntimeError:  # the application is being torn down
                pass

    @Slot(object)
    def _on_deliver(self, fn: Callable[[], object]) -> None:
        if self._closing.cancelled:
            return
        try:
            fn()
        except Exception:  # a bug in one callback must not take the window down
            log.exception("UI callback failed")

    def on_ui_thread(self) -> bool:
        return QThread.currentThread() is self.thread()

    # ---- background work ----
    def run(
        self,
        fn: Callable[[], T],
        on_done: Callable[[T], object] | None = None,
        on_error: Callable[[BaseException], object] | None = None,
        name: str = "ferry-ui-work",
    ) -> None:
        """Run ``fn`` on a worker thread; its result or error comes back on the UI thread.

        Workers are kept and reused: ``Thread.start()`` blocks its caller until the new thread
        has been scheduled, which on a loaded machine froze the window for a tenth of a second
        per folder opened. A new thread is started only when every worker is busy.
        """

        def body() -> None:
            try:
                result = fn()
            except BaseException as exc:  # reported to the UI, never lost
                if on_error is not None:
                    err = exc
                    self.post(lambda: on_error(err))
                else:
                    log.error("background task %s failed: %s", name, exc)
            else:
                if on_done is not None:
                    self.post(lambda: on_done(result))

        with self._lock:
            self._work.put(body)
            if self._idle > 0:
                self._idle -= 1
                return
            t = threading.Thread(target=self._worker, name=f"ferry-ui-worker-{len(self._threads)}", daemon=True)
            self._threads.add(t)
        t.start()

    def _worker(self) -> None:
        background_priority()
        while True:
            job = self._work.get()
            if job is None:
                return
            try:
                job()
            finally:
                # The job's closures (its work, on_done, on_error) may hold the last reference to
                # a Qt object, say a pane closed while its listing ran. Dropped here, that object
                # would be destroyed on this worker thread, which crashed the process (SIGSEGV in
                # this loop). The references go to the UI thread, which lets go of them there.
                with self._lock:
                    self._idle += 1
                    self._finished.append(job)
                job = None
                self.post(self._release)

    def _release(self) -> None:
        """Drop finished jobs' references on the UI thread (see :meth:`_worker`)."""
        with self._lock:
            done, self._finished = self._finished, []
        done.clear()

    # ---- questions from workers ----
    def ask_blocking(self, show: Callable[[Callable[[Any], None]], object], default: T) -> T:
        """Ask on the UI thread and wait for the answer (from a worker thread only).

        ``show(reply)`` runs on the UI thread: it opens a (non-modal-blocking) dialog and calls
        ``reply(answer)`` once. ``default`` is returned if the window closes first.
        """
        if self.on_ui_thread():
            raise RuntimeError("ask_blocking() would deadlock on the UI thread")
        done = threading.Event()
        box: list[Any] = [default]

        def reply(answer: Any) -> None:
            box[0] = answer
            done.set()

        with self._lock:
            self._waiting.add(done)
        try:
            self.post(lambda: show(reply))
            while not done.wait(0.25):
                if self._closing.cancelled:
                    return default
            result: T = box[0]
            return result
        finally:
            with self._lock:
                self._waiting.discard(done)

    # ---- shutdown ----
    @property
    def closing(self) -> CancelToken:
        return self._closing

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop delivering, release waiting workers, and join what is still running."""
        self._closing.cancel("shutdown")
        with self._lock:
            for ev in self._waiting:
                ev.set()
            threads = list(self._threads)
        for _ in threads:
            self._work.put(None)
        for t in threads:
            t.join(timeout / max(1, len(threads)))
