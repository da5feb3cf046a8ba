"""The cyclic garbage collector, run by the UI thread in small steps instead of by whichever
thread happens to allocate.

Python's automatic collector runs inside the allocation that crosses its threshold, on any
thread, holding the GIL for the whole pass. For the window that is wrong twice over:

* **Freezes.** A worker building a 100,000-entry listing triggered young-generation passes of
  20-30 ms each while the view was painting (every paint call waits for the GIL), and an
  occasional full pass over the whole heap (0.1-0.2 s). Measured: the longest event-loop gap of
  a 100,000-entry listing came from these passes.
* **Qt objects destroyed on the wrong thread.** A pass on a worker thread that frees a cycle
  holding a Qt wrapper destroys the Qt object there; Qt objects must die on their own thread.

So while a window is open the automatic collector is off and :class:`Collector` runs it from a
UI-thread timer: the young generation as soon as a few thousand objects have accumulated (a
pass over them takes a millisecond or two), the middle generation every few young passes, and
a full pass only when the window has been idle for a moment, or at the latest every few
minutes so that long transfers never grow the heap without bound. This is the well-known recipe
for PyQt/PySide applications (gc.disable() plus a GUI-thread timer); here it is driven by the
collector's own counts. The automatic collector is switched back on when the last window
closes (the same process may go on as a test runner or a headless engine).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer

TICK_MS = 20
YOUNG = 5_000  # objects allocated (net) since the last young pass
MIDDLE = 10  # young passes since the last middle pass
OLD = 10  # middle passes since the last full pass ...
OLD_IDLE_S = 1.0  # ... and the window idle for this long,
OLD_MAX_S = 300.0  # ... or this long since the last full pass whatever the window does

_open = 0  # collectors running: the automatic collector is off while any is
_was_enabled = True  # the automatic collector's state before the first of them started


class Collector(QObject):
    """Runs the cyclic collector on the UI thread while it is alive (see the module's doc).

    ``busy`` says whether the window is doing something a full pass would interrupt (a listing
    filling in, a drag); it is asked only when a full pass is due.
    """

    def __init__(self, parent: QObject | None = None, busy: Callable[[], bool] | None = None) -> None:
        super().__init__(parent)
        global _open, _was_enabled
        self._busy = busy or (lambda: False)
        if not _open:
            _was_enabled = gc.isenabled()
        _open += 1
        gc.disable()
        held = self._held = [True]
        self._last_full = time.monotonic()
        self._quiet_since = time.monotonic()
        self.passes = [0, 0, 0]  # how many of each generation this collector ran (for tests)
        self.timer = QTimer(self)
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self.step)
        self.timer.start()
        # A window closed without stop() still gives the collector back (no reference to self
        # in the slot: it runs while the object is being destroyed).
        self.destroyed.connect(lambda *_: _let_go(held))

    def step(self) -> None:
        """One look at the counts: collect the generations that are due, youngest first."""
        young, middle, old = gc.get_count()
        now = time.monotonic()
        if self._busy():
            self._quiet_since = now
        if young >= YOUNG:
            gc.collect(0)
            self.passes[0] += 1
            middle += 1
        if middle >= MIDDLE:
            gc.collect(1)
            self.passes[1] += 1
            old += 1
        if old >= OLD and (now - self._quiet_since >= OLD_IDLE_S or now - self._last_full >= OLD_MAX_S):
            gc.collect(2)
            self.passes[2] += 1
            self._last_full = now

    def stop(self) -> None:
        """Stop; the automatic collector comes back when no other collector runs."""
        self.timer.stop()
        _let_go(self._held)


def _let_go(held: list[bool]) -> None:
    global _open
    if not held[0]:
        return
    held[0] = False
    _open -= 1
    if not _open and _was_enabled:
        gc.enable()
