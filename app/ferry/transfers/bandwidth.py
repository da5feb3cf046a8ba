"""A token bucket shared by every worker that moves bytes under one ``--bwlimit``.

Workers take tokens per chunk and may run into debt; the debt is slept off (cancellably), so the
average rate holds exactly while bursts stay within a quarter second of traffic.
"""

from __future__ import annotations

import threading
import time

from ferry.core.cancel import CancelToken


class TokenBucket:
    """``rate`` bytes/s; ``None`` lets everything through, and the rate may change while in use
    (the window's limit applies to transfers already running)."""

    def __init__(self, rate: float | None, burst_seconds: float = 0.25) -> None:
        self._burst_seconds = burst_seconds
        self._lock = threading.Lock()
        self.rate: float | None = None
        self.capacity = 0.0
        self._tokens = 0.0
        self._stamp = time.monotonic()
        self.set_rate(rate)

    def set_rate(self, rate: float | None) -> None:
        if rate is not None and rate <= 0:
            raise ValueError("rate must be positive")
        with self._lock:
            self.rate = float(rate) if rate is not None else None
            self.capacity = max(self.rate * self._burst_seconds, 64 * 1024) if self.rate else 0.0
            self._tokens = self.capacity
            self._stamp = time.monotonic()

    @property
    def active(self) -> bool:
        return self.rate is not None

    def chunk_hint(self, default: int) -> int:
        """Chunks small enough that one of them is not seconds of traffic at this rate."""
        rate = self.rate
        return max(16 * 1024, min(default, int(rate / 8))) if rate else default

    def consume(self, n: int, cancel: CancelToken | None = None) -> None:
        with self._lock:
            if self.rate is None:
                return
            now = time.monotonic()
            self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            self._tokens -= n
            debt = -self._tokens
            rate = self.rate
        if debt > 0:
            delay = debt / rate
            if cancel is not None:
                cancel.wait(delay)
            else:
                time.sleep(delay)


class Limiters:
    """All the buckets one transfer must pass through (the job's own and the run's global one)."""

    def __init__(self, *buckets: TokenBucket | None) -> None:
        self.buckets = [b for b in buckets if b is not None]

    def consume(self, n: int, cancel: CancelToken | None = None) -> None:
        for b in self.buckets:
            b.consume(n, cancel)

    def chunk_hint(self, default: int) -> int:
        for b in self.buckets:
            default = b.chunk_hint(default)
        return default

    def __bool__(self) -> bool:
        # Asked once per chunk by every worker: a plain loop, not a generator (3% of the CPU on
        # small files went to building and running the generator).
        for b in self.buckets:  # noqa: SIM110 - any() with a generator is the slower form
            if b.rate is not None:
                return True
        return False
