"""Reading objects: a GetObject body as a reader, a small object's rest after the bytes stat()
saw, and a large object as parallel ranged GETs, handed to the copy in order.

Why the ranged reader's shape (measured on one 256 MiB object against ``rclone serve s3`` on loopback, 2 cores):

* Each range lands in a buffer of a small pool that is reused range after range
  (:meth:`ferry.backends.s3.lean.LeanClient.get_range_into` reads the socket straight into it). A fresh
  16 MiB ``bytes`` per range made the kernel fault in and zero every page once more.
* The stream's hash can be computed here, on the fetching threads, in order (range ``k`` waits
  until range ``k-1`` is hashed; ``hashlib`` releases the GIL on buffers this size), instead of on
  the copy's own thread between reading and writing: the copy then only copies and writes, and
  hashing overlaps the writing. :meth:`RangedReader.feed_hasher` is how the copy hands its hasher
  over; every byte the reader returns has entered that hasher, in order, before it is returned.

Fetching starts at the first :meth:`readinto` or :meth:`feed_hasher`, whichever comes first, so
the choice of hasher is made before any range is hashed and no fetching thread ever waits for it.
"""

from __future__ import annotations

import io
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ferry.backends.base import Reader
from ferry.core.hashing import Hasher

# fetch(lo, into): fill ``into`` with the object's bytes from ``lo`` (exactly len(into) of them) or raise.
Fetch = Callable[[int, memoryview], None]


class RangedReader(io.RawIOBase):
    """Bytes ``[start, end)`` of an object: ``head`` first (bytes already fetched, e.g. by stat),
    then ranges of ``range_size`` fetched ``depth`` at a time on ``executor``, returned in order."""

    def __init__(
        self,
        fetch: Fetch,
        start: int,
        end: int,
        *,
        head: bytes = b"",
        range_size: int,
        depth: int,
        executor: ThreadPoolExecutor,
    ) -> None:
        self._fetch = fetch
        self._head = memoryview(head)
        self._next = start + len(head)  # first byte not yet asked for
        self._end = end
        self._range = range_size
        self._depth = max(1, depth)
        self._executor = executor
        self._free: list[bytearray] = []  # buffers whose bytes have been handed over
        self._made = 0  # buffers allocated so far (at most depth + 1)
        # (future of the range's byte count, its buffer) in order
        self._queue: deque[tuple[Future[int], bytearray]] = deque()
        self._current = memoryview(b"")
        self._current_buf: bytearray | None = None
        self._hasher: Hasher | None = None
        self._started = False
        self._stop = False  # start no more ranges (one failed, or the reader closed)
        self._closed = False
        # Offset of the first range that failed: only ranges after it are abandoned. A range
        # before it still hashes and reads, so the copy meets the failure itself (its message
        # names the object), not an "abandoned" that a later range's failure caused.
        self._failed_from = end
        self._hashed = threading.Event()  # set once everything before the next range is hashed
        self._hashed.set()

    def readable(self) -> bool:
        return True

    def feed_hasher(self, hasher: Hasher) -> bool:
        """Hash every byte this reader returns into ``hasher``, in order, on the fetching threads.
        Accepted only before the first byte is read (True); the caller hashes otherwise."""
        if self._started:
            return False
        self._hasher = hasher
        if self._head:
            hasher.update(self._head)
        self._start()
        return True

    def _start(self) -> None:
        self._started = True
        self._fill()

    def _fill(self) -> None:
        while len(self._queue) < self._depth and self._next < self._end and not self._stop:
            if self._free:
                buf = self._free.pop()
            elif self._made <= self._depth:
                # Full-sized, but for a last range that needs less: a buffer of its size, since no
                # range after it could want a bigger one.
                buf = bytearray(min(self._range, self._end - self._next))
                self._made += 1
            else:
                return  # every buffer is queued or being read by the copy
            lo, hi = self._next, min(self._next + self._range, self._end)
            before, after = self._hashed, threading.Event()
            self._hashed = after
            self._queue.append((self._executor.submit(self._one, lo, memoryview(buf)[: hi - lo], before, after), buf))
            self._next = hi

    def _one(self, lo: int, into: memoryview, before: threading.Event, after: threading.Event) -> int:
        try:
            self._fetch(lo, into)
            hasher = self._hasher
            if hasher is not None:
                before.wait()  # the range before this one is hashed, or failed
                if self._closed or self._failed_from < lo:
                    raise OSError("read abandoned")  # nobody will read it; never hash past a gap
                hasher.update(into)
            return len(into)
        except BaseException:
            self._failed_from = min(self._failed_from, lo)
            self._stop = True  # the copy fails at this range: later ones neither hash nor start
            raise
        finally:
            after.set()  # releases the next range either way: no thread waits on a failed one

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        if not self._started:
            self._start()  # from here on no hasher is taken: the copy hashes what it reads
        if self._head:
            n = min(len(view), len(self._head))
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        while not self._current:
            if self._current_buf is not None:
                self._free.append(self._current_buf)  # its bytes are handed over: reuse it
                self._current_buf = None
                self._fill()
            if not self._queue:
                return 0
            future, data = self._queue.popleft()
            n = future.result()
            self._current = memoryview(data)[:n]
            self._current_buf = data
            self._fill()
        n = min(len(view), len(self._current))
        view[:n] = self._current[:n]
        self._current = self._current[n:]
        return n

    def next_view(self) -> memoryview:
        """The next bytes as a view of this reader's own buffer, without copying them: valid
        until the next call (which recycles the buffer), empty at the end. With a hasher fed,
        they are the very bytes it hashed, so a writer may compare what lands with them."""
        if not self._started:
            self._start()
        if self._head:
            view, self._head = self._head, memoryview(b"")
            return view
        if self._current:  # left by a readinto
            view, self._current = self._current, memoryview(b"")
            return view
        if self._current_buf is not None:
            self._free.append(self._current_buf)  # the caller is done with it: reuse it
            self._current_buf = None
            self._fill()
        if not self._queue:
            return memoryview(b"")
        future, data = self._queue.popleft()
        n = future.result()
        self._current_buf = data
        self._fill()
        return memoryview(data)[:n]

    def close(self) -> None:
        self._stop = self._closed = True  # ranges still running neither hash nor start more
        for future, _ in self._queue:
            future.cancel()
        self._queue.clear()
        self._current = memoryview(b"")
        super().close()


def total_size(content_range: str | None, offset: int, length: int) -> int:
    """The object's size from a ranged answer's ``Content-Range`` (``bytes 0-9/1234``)."""
    if content_range and "/" in content_range:
        tail = content_range.rsplit("/", 1)[1]
        if tail.isdigit():
            return int(tail)
    return offset + length


class BodyReader(io.RawIOBase):
    """A GetObject body as a raw binary file with ``readinto`` (what the copy loop uses)."""

    def __init__(self, body: Any, first: bytes = b"") -> None:
        self._body = body
        self._pending = memoryview(first)

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        if self._pending:
            n = min(len(view), len(self._pending))
            view[:n] = self._pending[:n]
            self._pending = self._pending[n:]
            return n
        if self._body is None:
            return 0
        data = self._body.read(len(view))
        if not data:
            return 0
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if self._body is not None:
            self._body.close()
            self._body = None
        super().close()


class RestReader(io.RawIOBase):
    """An object whose first bytes came with stat(): those, then the rest in one ranged GET made on
    the first ``readinto`` whose buffer has room for all of it, read from the socket straight into
    that buffer (behind the first bytes). A 1 MiB download then reaches the copy as one 1 MiB
    chunk (one write, one hash update) instead of a 768 KiB ``bytes`` per file, allocated,
    page-faulted and copied again: those faults were ~0.2 ms of CPU per 1 MiB file. ``fetch``
    holds the GET to the stat's ETag (``If-Match``), so the two halves are one version of the
    object. A smaller buffer gets the rest as a stream, from ``open_rest(offset, length)``."""

    def __init__(self, fetch: Fetch, open_rest: Callable[[int, int], Reader], first: bytes, total: int) -> None:
        self._fetch, self._open_rest = fetch, open_rest
        self._pending = memoryview(first)
        self._lo, self._hi = len(first), total
        self._rest: Reader | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        n = min(len(view), len(self._pending))
        if n:
            view[:n] = self._pending[:n]
            self._pending = self._pending[n:]
        left = self._hi - self._lo
        if self._pending or not left:
            return n
        if self._rest is None and len(view) - n >= left:
            self._fetch(self._lo, view[n : n + left])
            self._lo = self._hi
            return n + left
        if n:
            return n
        if self._rest is None:
            self._rest = self._open_rest(self._lo, left)
        return self._rest.readinto(view) or 0

    def close(self) -> None:
        if self._rest is not None:
            self._rest.close()
            self._rest = None
        super().close()
