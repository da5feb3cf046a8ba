"""Parallel byte-range writes of one big upload over several SFTP channels of one transport.

Each SFTP channel is served by its own ``sftp-server`` process on the host, and each channel
has its own SSH window (OpenSSH gives a session channel 2 MiB): one channel's WRITEs wait for
that one process to write and for sshd to hand it the next window. Here the bytes the copy loop
hands over, in order (it hashes them in order as it reads the source: the stream hash stays
exact), are cut into blocks at absolute file offsets that are multiples of :data:`BLOCK`;
block ``i`` goes to stream ``i % n``, and each stream sends WRITEs at the block's offset on its
own handle to the same partial file, writing the range in place.

**Resume stays correct.** A stream may send block ``i`` only while ``i < lowest + LEAD``, where
``lowest`` is the first block not yet acknowledged in full. So if any byte of block ``j`` is in
the file, every block before ``j - LEAD + 1`` was acknowledged, i.e. written: a partial file
whose size ends in block ``j`` holds no hole before :func:`safe_resume_offset`, which the writer
resumes from (a crash, a ``kill -9`` or a dropped connection alike). What lies beyond it is
written again.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

BLOCK = 4 << 20
LEAD = 16  # blocks a stream may run ahead of the first unacknowledged one (64 MiB)
QUEUED = 2  # filled blocks waiting per stream (memory: (streams * QUEUED + 1) * BLOCK at most)
DEPTH = 32  # WRITE requests in flight per stream before it waits for the oldest reply


def safe_resume_offset(size: int) -> int:
    """Where to resume a partial file of ``size`` bytes that parallel streams may have written:
    the start of the block ``LEAD - 1`` blocks before the one holding its last byte (below it
    there is no hole, see the module's notes)."""
    if size <= 0:
        return 0
    return max(0, ((size - 1) // BLOCK - LEAD + 1) * BLOCK)


class ParallelRangeWriter:
    """Writes the bytes :meth:`put` is given, from file offset ``start`` on, through ``clients``
    (one stream each; ``handles[k]`` is stream ``k``'s open handle on the partial file, or None
    for the stream to open it with ``open_handle``).

    ``send_write(client, handle, pos, data) -> request number`` sends one WRITE;
    ``read_reply(client, num)`` waits for its reply (raising a failure). ``on_acknowledged(n)``
    is called with the length of the acknowledged prefix of the file as it grows (from the
    stream threads, one at a time).
    """

    def __init__(
        self,
        clients: list[Any],
        handles: list[bytes | None],
        start: int,
        step: int,
        send_write: Callable[[Any, bytes, int, memoryview], int],
        read_reply: Callable[[Any, int], object],
        open_handle: Callable[[Any], bytes],
        close_handle: Callable[[Any, bytes], object],
        recv_ready: Callable[[Any], bool],
        on_acknowledged: Callable[[int], None] | None = None,
    ) -> None:
        self._clients = clients
        self._send_write = send_write
        self._read_reply = read_reply
        self._open_handle = open_handle
        self._close_handle = close_handle
        self._recv_ready = recv_ready
        self._on_ack = on_acknowledged
        self._step = step
        self._pos = start  # file offset of the next byte put
        self._fill: bytearray | None = None
        self._fill_at = start  # file offset of the block being filled
        self._fill_len = 0
        self._spare: list[bytearray] = []
        self._queues: list[deque[tuple[int, int, memoryview] | None]] = [deque() for _ in clients]
        self._cond = threading.Condition()
        self._ack_lock = threading.Lock()
        self._lowest = start // BLOCK  # first block not acknowledged in full
        self._done_blocks: set[int] = set()
        self._ends: dict[int, int] = {}  # block -> its end offset (known once it is filled)
        self._acked = start  # bytes of the file acknowledged from 0 on, without a gap
        self._error: BaseException | None = None
        self._closed = False
        self.handles_open = [h is not None for h in handles]
        self._threads = [
            threading.Thread(target=self._stream, args=(k, handles[k]), daemon=True, name=f"sftp-wrange-{k}")
            for k in range(len(clients))
        ]
        for t in self._threads:
            t.start()

    @property
    def acknowledged(self) -> int:
        return self._acked

    # ---- the copy loop's side ----
    def put(self, data: bytes | bytearray | memoryview) -> None:
        """Copy ``data`` into blocks (the caller reuses its buffer at once) and hand full blocks
        to their streams; raises a stream's failure."""
        view = memoryview(data).cast("B")
        while len(view):
            if self._fill is None:
                self._fill = self._take_buffer()
                self._fill_at = self._pos
                self._fill_len = 0
            room = BLOCK - (self._fill_at % BLOCK) - self._fill_len  # up to the next block boundary
            n = min(room, len(view))
            self._fill[self._fill_len : self._fill_len + n] = view[:n]
            self._fill_len += n
            self._pos += n
            view = view[n:]
            if n == room:
                self._hand_over()

    def _take_buffer(self) -> bytearray:
        with self._cond:
            self._raise_failure()
            if self._spare:
                return self._spare.pop()
        return bytearray(BLOCK)  # a stream's buffers come back once sent (fresh ones page-fault)

    def _hand_over(self) -> None:
        buf, self._fill = self._fill, None
        if buf is None or not self._fill_len:
            if buf is not None:
                self._spare.append(buf)
            return
        i = self._fill_at // BLOCK
        q = self._queues[i % len(self._queues)]
        with self._cond:
            while len(q) >= QUEUED and self._error is None:
                self._cond.wait()
            self._raise_failure()
            self._ends[i] = self._fill_at + self._fill_len
            q.append((i, self._fill_at, memoryview(buf)[: self._fill_len]))
            self._cond.notify_all()

    def _raise_failure(self) -> None:
        """(the caller holds ``_cond``)"""
        if self._error is not None:
            raise self._error

    def close(self, *, discard: bool = False) -> None:
        """Send what is left (unless ``discard``), wait for every reply, close the streams'
        handles; raises the first failure unless discarding."""
        if self._closed:
            return
        self._closed = True
        if not discard:
            try:
                self._hand_over()
            except BaseException:
                discard = True
        with self._cond:
            if discard and self._error is None:
                self._error = _Discarded()
            for q in self._queues:
                if discard:
                    q.clear()
                q.append(None)
            self._cond.notify_all()
        for t in self._threads:
            t.join()
        if not discard and self._error is not None:
            raise self._error

    # ---- the streams ----
    def _stream(self, k: int, handle: bytes | None) -> None:
        client = self._clients[k]
        pending: deque[tuple[int, int]] = deque()  # (request, block)
        left: dict[int, int] = {}  # block -> WRITEs not yet acknowledged
        try:
            if handle is None:
                handle = self._open_handle(client)
                self.handles_open[k] = True
            self._send_blocks(k, client, handle, pending, left)
            self._ack_all(client, pending, left)  # even after a failure: the channel stays in step
        except BaseException as exc:
            with self._cond:
                if self._error is None or isinstance(self._error, _Discarded):
                    self._error = exc
                self._cond.notify_all()
            while pending:  # what is still in flight, if the channel still answers
                try:
                    self._read_reply(client, pending.popleft()[0])
                except BaseException:
                    pass
        finally:
            if handle is not None and self.handles_open[k] and k > 0:
                self._close_stream_handle(k, client, handle)

    def _send_blocks(
        self, k: int, client: Any, handle: bytes, pending: deque[tuple[int, int]], left: dict[int, int]
    ) -> None:
        """Send stream ``k``'s blocks as they are queued, until the end or a failure (any
        stream's), taking replies whenever there is nothing to send."""
        q = self._queues[k]
        while True:
            with self._cond:
                while not q and not pending and self._error is None:
                    self._cond.wait()
                failed = self._error is not None
                item = q[0] if q else None
                more = bool(q)
            if failed:
                return
            if not more:  # nothing new yet: take a reply meanwhile
                self._ack(client, pending, left)
                continue
            if item is None:  # the end
                return
            if not self._within_lead(item[0], client, pending, left):
                return
            self._send_block(client, handle, item, pending, left)
            with self._cond:
                q.popleft()
                if len(self._spare) < len(self._queues) + 1:
                    self._spare.append(item[2].obj)  # type: ignore[arg-type]  # every byte is in packets by now
                self._cond.notify_all()

    def _within_lead(self, i: int, client: Any, pending: deque[tuple[int, int]], left: dict[int, int]) -> bool:
        """Wait (taking replies) until block ``i`` is within LEAD blocks of the first one not
        acknowledged in full; False if a stream failed meanwhile."""
        while True:
            with self._cond:
                if self._error is not None or i < self._lowest + LEAD:
                    break
                if not pending:
                    self._cond.wait()
                    continue
            self._ack(client, pending, left)
        return self._error is None

    def _send_block(
        self,
        client: Any,
        handle: bytes,
        item: tuple[int, int, memoryview],
        pending: deque[tuple[int, int]],
        left: dict[int, int],
    ) -> None:
        """WRITEs of one block at its offset, reading replies already here (and the oldest once
        DEPTH are out)."""
        i, at, data = item
        left[i] = (len(data) + self._step - 1) // self._step
        for s in range(0, len(data), self._step):
            piece = data[s : s + self._step]
            pending.append((self._send_write(client, handle, at + s, piece), i))
            while pending and (len(pending) > DEPTH or self._recv_ready(client)):
                self._ack(client, pending, left)

    def _ack_all(self, client: Any, pending: deque[tuple[int, int]], left: dict[int, int]) -> None:
        """Read every outstanding reply; the first failure is raised after all are read."""
        failure: BaseException | None = None
        while pending:
            try:
                self._ack(client, pending, left)
            except BaseException as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def _close_stream_handle(self, k: int, client: Any, handle: bytes) -> None:
        """Close a handle this stream opened (stream 0's belongs to the writer)."""
        try:
            self._close_handle(client, handle)
            self.handles_open[k] = False
        except BaseException as exc:
            with self._cond:
                if self._error is None:
                    self._error = exc
                self._cond.notify_all()

    def _ack(self, client: Any, pending: deque[tuple[int, int]], left: dict[int, int]) -> None:
        num, i = pending.popleft()
        self._read_reply(client, num)
        left[i] -= 1
        if left[i]:
            return
        del left[i]
        with self._cond:
            self._done_blocks.add(i)
            advanced = False
            while self._lowest in self._done_blocks:
                self._done_blocks.discard(self._lowest)
                self._acked = self._ends.pop(self._lowest)
                self._lowest += 1
                advanced = True
            acked = self._acked
            self._cond.notify_all()
        if advanced and self._on_ack is not None:
            with self._ack_lock:
                self._on_ack(acked)


class _Discarded(Exception):
    """The writer was closed without sending the rest (an aborted file)."""
