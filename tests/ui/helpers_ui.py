"""Small helpers for the GUI tests: filling memory stores, waiting for jobs, measuring stalls."""

from __future__ import annotations

import gc
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QElapsedTimer, QObject, QTimer

from ferry.backends.memory import _Dir, _File, get_store, reset_memory_stores
from ferry.transfers.store import Store

if TYPE_CHECKING:
    from pytestqt.qtbot import QtBot

    from ferry.ui.queue_model import QueueModel
    from ferry.ui.queue_panel import QueuePanel
    from ferry.ui.queue_service import QueueSnapshot


def fill_memory(name: str, folder: str, count: int, size: int = 0) -> None:
    """``count`` files in ``memory://name/folder`` (built directly: 100,000 writes would dominate)."""
    reset_memory_stores(name)
    store = get_store(name)
    now = datetime.now(UTC)
    with store.lock:
        node = store.root
        for part in [p for p in folder.split("/") if p]:
            child = _Dir(now)
            node.children[part] = child
            node = child
        payload = bytes(size)
        for i in range(count):
            node.children[f"file-{i:06d}.dat"] = _File(now, bytearray(payload))


def make_tree(root: Path, files: int, size: int = 16) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        sub = root / f"d{i // 1000:02d}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{i:05d}.txt").write_bytes(i.to_bytes(4, "big") * (size // 4))
    return root


def job_state(job_id: int) -> str:
    store = Store()
    try:
        return store.job(job_id).state
    finally:
        store.close()


def wait_job(qtbot, job_id: int, states: tuple[str, ...] = ("done",), timeout: int = 60_000) -> str:  # type: ignore[no-untyped-def]
    """Process events until the job reaches one of ``states`` (the window's runner moves it)."""
    found: list[str] = []

    def reached() -> None:
        s = job_state(job_id)
        found[:] = [s]
        assert s in states, s

    qtbot.waitUntil(reached, timeout=timeout)
    return found[0]


def wait_job_shown(qtbot, window, job_id: int, states: tuple[str, ...], timeout: int = 60_000) -> str:  # type: ignore[no-untyped-def]
    """Like :func:`wait_job`, but reads what the window's transfers panel shows (no database
    access on the UI thread, which would itself stall the event loop being measured)."""
    found: list[str] = []

    def reached() -> None:
        row = next((j for j in window.queue_model.all_jobs() if j.id == job_id), None)
        assert row is not None and row.state in states
        found[:] = [row.state]

    qtbot.waitUntil(reached, timeout=timeout)
    return found[0]


class StallMeter(QObject):
    """The longest gap between ticks of a 5 ms timer: how long the event loop was blocked.

    Besides the raw gap it keeps the gap *minus the time the kernel kept the UI thread waiting
    for a CPU* (run-queue delay, from ``/proc/self/task/TID/schedstat``): on a shared 2-core
    machine with other test suites running, the raw figure measures the machine's load; the
    adjusted one measures what Ferry did (blocking the UI thread, or starving it of the GIL —
    a thread waiting for the GIL sleeps, so that wait is *not* subtracted).
    """

    def __init__(self) -> None:
        super().__init__()
        self.timer = QTimer(self)
        self.timer.setInterval(5)
        self.timer.timeout.connect(self._tick)
        self.clock = QElapsedTimer()
        self.longest_ms = 0
        self.longest_own_ms = 0.0
        self.ticks = 0
        self._stat: str | None = None
        self._delay = 0

    def _run_delay(self) -> int:
        if self._stat is None:
            return 0
        try:
            with open(self._stat) as f:
                return int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            return 0

    def start(self) -> None:
        import threading

        stat = f"/proc/self/task/{threading.get_native_id()}/schedstat"
        self._stat = stat if Path(stat).exists() else None
        self._delay = self._run_delay()
        self.clock.start()
        self.timer.start()

    def _tick(self) -> None:
        gap = self.clock.restart()
        delay = self._run_delay()
        waited_for_cpu_ms = (delay - self._delay) / 1e6
        self._delay = delay
        self.ticks += 1
        self.longest_ms = max(self.longest_ms, gap)
        self.longest_own_ms = max(self.longest_own_ms, gap - waited_for_cpu_ms)

    def stop(self) -> None:
        self.timer.stop()

    def report(self) -> str:
        return (
            f"longest event-loop stall {self.longest_ms} ms raw, {self.longest_own_ms:.0f} ms without "
            f"time the kernel kept the UI thread waiting for a CPU, {self.ticks} ticks, "
            f"load average {os.getloadavg()[0]:.1f}"
        )


@contextmanager
def xvfb_display() -> Iterator[str]:
    """A fresh Xvfb (1280x800) for one test that drives the real window with xdotool: its name."""
    r, w = os.pipe()
    xvfb = subprocess.Popen(
        ["Xvfb", "-displayfd", str(w), "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
        pass_fds=(w,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(w)
    with os.fdopen(r) as f:
        number = f.readline().strip()
    try:
        yield f":{number}"
    finally:
        xvfb.terminate()
        xvfb.wait(10)


def settle(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    """Let a just-opened window finish starting before a measurement, as a person would: the
    first paint of every widget, both panes' first listings and the site picker's background
    look-ups happen once, when the event loop first runs, and are not what a stall test is
    about. The test's own set-up objects (a 100,000-entry memory folder) are collected too."""
    qtbot.waitExposed(window)
    qtbot.waitUntil(lambda: not window.left.loading and not window.right.loading, timeout=30_000)
    qtbot.wait(300)
    gc.collect()


def spin_until(qtbot, cond: Callable[[], bool], timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        qtbot.wait(10)


def panel_with_first_job_selected(qtbot: QtBot, snap: QueueSnapshot) -> tuple[QueueModel, QueuePanel]:
    """The Transfers panel over ``snap`` at 1024 px, its first job selected, as a person
    clicks it: (model, panel). The line under the panel is ``panel.fix_label``."""
    from ferry.ui.queue_model import QueueModel
    from ferry.ui.queue_panel import QueuePanel

    model = QueueModel()
    model.apply(snap)
    panel = QueuePanel(model)
    qtbot.addWidget(panel)
    panel.resize(1024, 200)
    panel.show()
    panel.view.setCurrentIndex(model.index(0, 0))
    return model, panel
