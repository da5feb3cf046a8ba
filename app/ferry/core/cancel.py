"""Cancellation tokens checked between chunks, with hooks to unblock a stuck read."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ferry.core.errors import Cancelled


class CancelToken:
    """Set once; checked by workers between chunks.

    ``reason`` distinguishes why a task stopped (``cancel``, ``pause``, ``window``, ``shutdown``) so
    the scheduler can decide whether to keep the partial file.
    """

    def __init__(self, parent: CancelToken | None = None) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._hooks: list[Callable[[], None]] = []
        self.reason = ""
        if parent is not None:
            parent.on_cancel(lambda: self.cancel(parent.reason))

    def cancel(self, reason: str = "cancel") -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            try:
                hook()
            except Exception:  # a hook that fails must not stop the others
                pass

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled(f"Stopped ({self.reason})")

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; return True early if cancelled."""
        return self._event.wait(timeout)

    def on_cancel(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` when cancelled (at once if already cancelled): e.g. close a stuck channel."""
        with self._lock:
            if not self._event.is_set():
                self._hooks.append(hook)
                return
        hook()
