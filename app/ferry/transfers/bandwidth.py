"""A token bucket shared by every worker that moves bytes under one ``--bwlimit``.

Workers take tokens per chunk and may run into debt; the debt is slept off (cancellably), so the
average rate holds exactly while bursts stay within a quarter second of traffic.
"""

from __future__ import annotations

import threading
import time

from ferry.core.cancel import CancelToken


class TokenBucket:
    def __init__(self, rate: float, burst_seconds: float = 0.25) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = float(rate)
        self.capacity = max(self.rate * burst_seconds, 64 * 1024)
        self._tokens = self.capacity
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    def chunk_hint(self, default: int) -> int:
        """Chunks small enough that one of them is not seconds of traffic at this rate."""
        return max(16 * 1024, min(default, int(self.rate / 8)))

    def consume(self, n: int, cancel: CancelToken | None = None) -> None:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            self._tokens -= n
            debt = -self._tokens
        if debt > 0:
            delay = debt / self.rate
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
        return bool(self.buckets)
