"""Progress as data: thread-safe counters that workers add to and views read as snapshots.

Workers call :meth:`Accounting.add_bytes` per chunk (a lock and two additions); the CLI renders
and the GUI repaints from :meth:`Accounting.snapshot` on a timer, never once per chunk. A retry
rewinds its bytes, so bars can move back: progress that never lies.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Snapshot:
    bytes_done: int
    bytes_total: int
    files_done: int
    files_failed: int
    files_skipped: int
    files_total: int
    planning: bool
    speed: float  # bytes per second over the last few seconds
    elapsed: float
    active: int

    @property
    def eta(self) -> float | None:
        if self.speed <= 0 or self.planning:
            return None
        return max(0.0, (self.bytes_total - self.bytes_done) / self.speed)

    @property
    def fraction(self) -> float:
        if self.bytes_total > 0:
            return min(1.0, self.bytes_done / self.bytes_total)
        return 1.0 if self.files_total and self.files_done >= self.files_total else 0.0


class Accounting:
    """Counters for one run (a job, or a whole ``queue run``)."""

    WINDOW = 5.0  # seconds of history behind the speed figure

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes_done = 0
        self.bytes_total = 0
        self.files_done = 0
        self.files_failed = 0
        self.files_skipped = 0
        self.files_total = 0
        self.planning = True
        self.active = 0
        self._start = time.monotonic()
        self._samples: deque[tuple[float, int]] = deque()

    def add_total(self, files: int, size: int) -> None:
        with self._lock:
            self.files_total += files
            self.bytes_total += size

    def add_bytes(self, n: int) -> None:
        with self._lock:
            self.bytes_done += n

    def file_finished(self, state: str, size_if_skipped: int = 0) -> None:
        with self._lock:
            if state == "done":
                self.files_done += 1
            elif state == "skipped":
                self.files_skipped += 1
                self.files_done += 1
                self.bytes_done += size_if_skipped
            else:
                self.files_failed += 1

    def add_finished(self, files: int, size: int, failed: int) -> None:
        """Work finished before this run (a resumed job) counts as done from the start."""
        with self._lock:
            self.files_done += files
            self.bytes_done += size
            self.files_failed += failed

    def active_delta(self, n: int) -> None:
        with self._lock:
            self.active += n

    def snapshot(self) -> Snapshot:
        now = time.monotonic()
        with self._lock:
            samples = self._samples
            samples.append((now, self.bytes_done))
            while len(samples) > 2 and now - samples[0][0] > self.WINDOW:
                samples.popleft()
            t0, b0 = samples[0]
            speed = (self.bytes_done - b0) / (now - t0) if now - t0 > 0.2 else 0.0
            if speed <= 0 and now - self._start > 0.2 and len(samples) <= 2:
                speed = self.bytes_done / (now - self._start)
            return Snapshot(
                bytes_done=self.bytes_done,
                bytes_total=self.bytes_total,
                files_done=self.files_done,
                files_failed=self.files_failed,
                files_skipped=self.files_skipped,
                files_total=self.files_total,
                planning=self.planning,
                speed=max(0.0, speed),
                elapsed=now - self._start,
                active=self.active,
            )
