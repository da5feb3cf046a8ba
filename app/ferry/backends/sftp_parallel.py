"""Parallel byte-range reads of one big remote file over several SFTP channels of one transport.

One paramiko channel reading with read-ahead stays far below what the link and OpenSSH can do
(measured: one 2 GiB download at ~125 MB/s against scp's 342), because each channel's replies
are parsed one after another. Several channels, each with its own file handle and a bounded
number of requests in flight, fetch interleaved blocks (block ``i`` by stream ``i % n``); the
reader hands them out strictly in order, so the copy path still sees one sequential stream and
hashes it as it passes. Memory is bounded: a stream stays at most ``AHEAD`` blocks ahead of the
consumer.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

BLOCK = 8 << 20
AHEAD = 2  # blocks each stream may hold ahead of the consumer
REQUEST = 255 << 10  # OpenSSH's sftp-server takes reads/writes up to 256 KiB messages


class ParallelRangeReader:
    """Reads ``[offset, offset + length)`` of ``path`` through ``clients`` (one stream each).

    ``give_back(client, ok)`` returns a channel to its pool when the reader closes.
    """

    def __init__(
        self,
        clients: list[Any],
        path: bytes,
        offset: int,
        length: int,
        give_back: Callable[[Any, bool], None],
        depth: int,
        request: int = REQUEST,
    ) -> None:
        self._request = request  # bytes per READ: 255 KiB to OpenSSH, SFTP's portable 32 KiB elsewhere
        self._clients = clients
        self._give_back = give_back
        self._blocks = [(o, min(BLOCK, offset + length - o)) for o in range(offset, offset + length, BLOCK)]
        self._ready: dict[int, bytes] = {}
        self._next = 0  # index of the block the consumer needs next
        self._current = memoryview(b"")
        self._error: BaseException | None = None
        self._stop = False
        self._cond = threading.Condition()
        self._ok = [True] * len(clients)
        self._threads = [
            threading.Thread(target=self._stream, args=(k, path, depth), daemon=True, name=f"sftp-range-{k}")
            for k in range(len(clients))
        ]
        for t in self._threads:
            t.start()

    def _stream(self, k: int, path: bytes, depth: int) -> None:
        """Keep ``depth`` READs in flight on this channel, across block boundaries (paramiko's
        readv drains its pipeline at the end of every call and polls with sleeps), and reply
        parsing happens here, not in a helper thread per block."""
        from paramiko.sftp import CMD_DATA, CMD_READ, int64

        n = len(self._clients)
        client = self._clients[k]
        pieces = deque(
            (i, o, min(self._request, off + size - o))
            for i in range(k, len(self._blocks), n)
            for off, size in (self._blocks[i],)
            for o in range(off, off + size, self._request)
        )
        pending: deque[tuple[int, int, int]] = deque()  # (request id, block, bytes asked)
        parts: dict[int, list[bytes]] = {}
        f = None
        try:
            f = client.open(path, "rb")
            while True:
                while pieces and len(pending) < depth:
                    i = pieces[0][0]
                    with self._cond:
                        while not self._stop and i - self._next >= AHEAD * n and not pending:
                            self._cond.wait()
                        if self._stop:
                            return
                        allowed = i - self._next < AHEAD * n
                    if not allowed:
                        break  # receive what is in flight first
                    i, o, ln = pieces.popleft()
                    pending.append((client._async_request(type(None), CMD_READ, f.handle, int64(o), ln), i, ln))
                if not pending:
                    return
                num, i, ln = pending.popleft()
                t, msg = client._read_response(num)
                data = msg.get_binary() if t == CMD_DATA else b""
                if len(data) != ln:
                    raise EOFError(f"short read in block {i}: {len(data)} of {ln} bytes (file shrank?)")
                parts.setdefault(i, []).append(data)
                if not any(p[1] == i for p in pending) and not (pieces and pieces[0][0] == i):
                    block = b"".join(parts.pop(i))
                    with self._cond:
                        self._ready[i] = block
                        self._cond.notify_all()
        except BaseException as exc:
            with self._cond:
                self._ok[k] = False
                if self._error is None:
                    self._error = exc
                self._cond.notify_all()
        finally:
            if f is not None:
                try:
                    # Replies still in flight are read (and dropped) by close's own wait.
                    f.close()
                except Exception:
                    self._ok[k] = False

    def readinto(self, buf: memoryview | bytearray) -> int:
        view = memoryview(buf)
        if not len(self._current):
            if self._next >= len(self._blocks):
                return 0
            with self._cond:
                while self._next not in self._ready:
                    if self._error is not None:
                        raise self._error
                    self._cond.wait()
                self._current = memoryview(self._ready.pop(self._next))
                self._next += 1
                self._cond.notify_all()
        n = min(len(view), len(self._current))
        view[:n] = self._current[:n]
        self._current = self._current[n:]
        return n

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for t in self._threads:
            t.join()
        for client, ok in zip(self._clients, self._ok, strict=True):
            self._give_back(client, ok)
        self._clients = []
