"""Progress as data: thread-safe counters that workers add to and views read as snapshots.

Workers call :meth:`Accounting.add_bytes` per chunk (a lock and two additions); the CLI renders
and the GUI repaints from :meth:`Accounting.snapshot` on a timer, never once per chunk. A retry
rewinds its bytes, so bars can move back: progress that never lies.

Per job, the counters also know the bytes *in flight*: written by files still running, and left in
partial files by files that stopped to resume later (pause, shutdown). A job's row adds them to
the bytes of its finished files, so one big file does not read 0 % until it completes, and a
paused job shows what its partial files already hold.
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
        # task id → (job id, bytes): files running, or stopped with their partial file kept
        self._flight: dict[int, tuple[int, int]] = {}
        self._moved: dict[int, int] = {}  # job id → bytes its files moved in this run (its speed)

    def add_total(self, files: int, size: int) -> None:
        with self._lock:
            self.files_total += files
            self.bytes_total += size

    def add_bytes(self, n: int, job: int | None = None, task: int | None = None) -> None:
        """``n`` bytes moved; with ``job`` and ``task``, by that file (counted in flight until
        :meth:`settle`)."""
        with self._lock:
            self.bytes_done += n
            if task is not None and job is not None:
                _, had = self._flight.get(task, (job, 0))
                self._flight[task] = (job, had + n)
                self._moved[job] = self._moved.get(job, 0) + n

    def begin(self, job: int, task: int) -> None:
        """A file starts an attempt: what it had in flight is counted again from here."""
        with self._lock:
            self._flight[task] = (job, 0)

    def add_resumed(self, n: int, job: int, task: int) -> None:
        """A file resumes from a partial file of ``n`` bytes: counted as done and in flight, but
        not as speed (those bytes moved before)."""
        with self._lock:
            self.bytes_done += n
            _, had = self._flight.get(task, (job, 0))
            self._flight[task] = (job, had + n)
            self._samples = deque((t, b + n) for t, b in self._samples)

    def settle(self, task: int, *, kept: bool = False) -> None:
        """The store has recorded how a file's attempt ended: finished or failed (its bytes, if
        any, are the store's to count now), or back in the queue with its partial file ``kept``
        (its bytes stay in flight until the file runs again or the job is let go)."""
        with self._lock:
            if not kept:
                self._flight.pop(task, None)

    def job_partial_bytes(self, job: int) -> int:
        """Bytes of ``job`` in flight: in its running files and the partial files it kept."""
        return self.partial_bytes().get(job, 0)

    def partial_tasks(self, job: int) -> list[int]:
        """The tasks of ``job`` with bytes in flight (running, or stopped with a partial file)."""
        with self._lock:
            return [t for t, (j, n) in self._flight.items() if j == job and n > 0]

    def partial_bytes(self) -> dict[int, int]:
        """Bytes in flight by job (see :meth:`job_partial_bytes`)."""
        out: dict[int, int] = {}
        with self._lock:
            for job, n in self._flight.values():
                out[job] = out.get(job, 0) + max(0, n)
        return out

    def moved_bytes(self) -> dict[int, int]:
        """Bytes each job's files have moved in this run so far (a job's speed is its change;
        resumed partial files and skipped files are not in it)."""
        with self._lock:
            return dict(self._moved)

    def forget_job(self, job: int) -> None:
        """The run let go of ``job``: a later run counts its partial files again as it resumes them."""
        with self._lock:
            self._flight = {t: v for t, v in self._flight.items() if v[0] != job}
            self._moved.pop(job, None)

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
