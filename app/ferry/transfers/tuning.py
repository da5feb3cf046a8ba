"""``--parallel auto``: find the number of simultaneous transfers that moves data fastest.

The field reports behind Ferry saw throughput rise with parallel workers for many small objects,
plateau, then fall; for one large object a single stream can already fill the link. So the
right number depends on the link, the server and the file sizes, and changes during a run.
:class:`Tuner` hill-climbs: every interval it compares throughput with the last interval and
keeps going in the direction that helped, turning back when it hurt.

Throughput counts bytes plus a per-file cost (``FILE_COST`` bytes), so a run of small files is
judged by files per second and a run of large ones by bytes per second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

FILE_COST = 256 * 1024


class Gate:
    """At most ``limit`` holders at once; the limit may change while workers wait."""

    def __init__(self, limit: int) -> None:
        self._cond = threading.Condition()
        self._limit = max(1, limit)
        self._held = 0

    @property
    def limit(self) -> int:
        return self._limit

    def set_limit(self, limit: int) -> None:
        with self._cond:
            self._limit = max(1, limit)
            self._cond.notify_all()

    def acquire(self) -> None:
        with self._cond:
            while self._held >= self._limit:
                self._cond.wait()
            self._held += 1

    def release(self) -> None:
        with self._cond:
            self._held -= 1
            self._cond.notify()


class Tuner:
    def __init__(
        self,
        gate: Gate,
        maximum: int,
        interval: float = 3.0,
        start: int = 2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gate = gate
        self.clock = clock
        self.maximum = maximum
        self.interval = interval
        self.direction = 1
        self.history: list[tuple[int, float]] = []  # (limit, rate) per interval, for the log
        self._last_t = clock()
        self._last_units: float | None = None
        self._last_rate: float | None = None
        gate.set_limit(min(start, maximum))

    def observe(self, bytes_done: int, files_done: int, busy: bool) -> None:
        """Call often (each coordinator tick); acts once per interval while work is running."""
        now = self.clock()
        units = bytes_done + files_done * FILE_COST
        if self._last_units is None or not busy:
            self._last_units, self._last_t = units, now
            return
        if now - self._last_t < self.interval:
            return
        rate = (units - self._last_units) / (now - self._last_t)
        self._last_units, self._last_t = units, now
        limit = self.gate.limit
        self.history.append((limit, rate))
        if self._last_rate is not None:
            if rate < self._last_rate * 0.93:
                self.direction = -self.direction  # that step hurt: go back
            elif rate < self._last_rate * 1.07:
                self._last_rate = rate
                return  # a plateau: stay
        self._last_rate = rate
        new = min(self.maximum, max(1, limit + self.direction))
        if new == limit:
            self.direction = -self.direction
        self.gate.set_limit(new)
