"""Small helpers for the GUI tests: filling memory stores, waiting for jobs, measuring stalls."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from PySide6.QtCore import QElapsedTimer, QObject, QTimer

from ferry.backends.memory import _Dir, _File, get_store, reset_memory_stores
from ferry.transfers.store import Store


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


class StallMeter(QObject):
    """The longest gap between ticks of a 5 ms timer: how long the event loop was blocked."""

    def __init__(self) -> None:
        super().__init__()
        self.timer = QTimer(self)
        self.timer.setInterval(5)
        self.timer.timeout.connect(self._tick)
        self.clock = QElapsedTimer()
        self.longest_ms = 0
        self.ticks = 0

    def start(self) -> None:
        self.clock.start()
        self.timer.start()

    def _tick(self) -> None:
        gap = self.clock.restart()
        self.ticks += 1
        self.longest_ms = max(self.longest_ms, gap)

    def stop(self) -> None:
        self.timer.stop()


def spin_until(qtbot, cond: Callable[[], bool], timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        qtbot.wait(10)
