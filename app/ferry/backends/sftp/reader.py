"""Reading a remote file: a small one whole in one round trip with its size, the rest as a
stream of pipelined READs, a big one as parallel byte ranges on spare channels."""

from __future__ import annotations

import stat as stat_mod
from typing import Any

from ferry.backends.sftp import limits
from ferry.backends.sftp import paramiko_adapter as adapter
from ferry.backends.sftp.errors import map_error
from ferry.backends.sftp.host import Host
from ferry.backends.sftp.parallel_read import ParallelRangeReader
from ferry.backends.sftp.protocol import stat_and_first_read, wire
from ferry.core.errors import IsADirectory


class SFTPReader:
    """A remote file opened for reading, borrowing one SFTP channel until closed."""

    def __init__(self, host: Host, path: str, offset: int, length: int | None) -> None:
        self._cm: Any = host.pool.sftp()
        client = self._cm.__enter__()
        try:
            self._f = client.open(wire(path), "rb", bufsize=1 << 20)
            st, head = stat_and_first_read(client, self._f, offset, host.request_size)
            if stat_mod.S_ISDIR(st.st_mode or 0):
                self._f.close()
                raise IsADirectory(f"Is a folder: {path}")
            size = st.st_size or 0
            adapter.set_request_size(self._f, host.request_size)
            want = (size - offset) if length is None else min(length, size - offset)
            self._left = max(0, want)
            self._head = memoryview(b"")
            self._parallel: ParallelRangeReader | None = None
            if self._left <= len(head):
                # A small file arrived whole with the size: close without waiting for the
                # reply (it is skipped later), one round trip less per file.
                self._head = memoryview(head)[: self._left]
                adapter.send(client, adapter.CMD_CLOSE, adapter.handle_of(self._f))
                adapter.closed_by_request(self._f)
                self._cm.__exit__(None, None, None)
                self._cm = None
                self.path = path
                return
            # The rest streams with READ_DEPTH requests in flight (paramiko's prefetch polls
            # with sleeps); files of PARALLEL_MIN and more also on spare channels, in parallel.
            self._head = memoryview(head)
            start, rest = offset + len(head), self._left - len(head)
            extra = host.stream_channels(up=False, size=rest, label=path) if rest >= limits.PARALLEL_MIN else []
            adapter.send(client, adapter.CMD_CLOSE, adapter.handle_of(self._f))  # the streams open their own
            adapter.closed_by_request(self._f)
            self._parallel = ParallelRangeReader(
                [client, *extra],
                wire(path),
                start,
                rest,
                lambda c, ok: None if c is client else host.pool.give_back(c, ok),
                limits.READ_DEPTH,
                host.request_size,
                in_order=host.request_size == limits.REQUEST,  # an OpenSSH server: replies come in order
            )
        except BaseException as exc:
            self._cm.__exit__(type(exc), exc, None)
            raise map_error(exc, path) from exc
        self.path = path

    def readinto(self, buf: memoryview | bytearray) -> int:
        if self._left <= 0:
            return 0
        view = memoryview(buf)
        if len(self._head):
            n = min(len(view), len(self._head))
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            self._left -= n
            return n
        try:
            if self._parallel is not None:
                got = self._parallel.readinto(view[: self._left])
                self._left -= got
                return got
            data = self._f.read(min(len(view), self._left))
        except Exception as exc:
            self._failed = map_error(exc, self.path)
            raise self._failed from exc
        n = len(data)
        view[:n] = data
        self._left -= n
        return n

    def read(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        n = self._left if n < 0 else min(n, self._left)
        if self._parallel is not None or len(self._head):
            buf = bytearray(n)
            got = 0
            while got < n:
                k = self.readinto(memoryview(buf)[got:])
                if not k:
                    break
                got += k
            return bytes(buf[:got])
        data: bytes = self._f.read(n)
        self._left -= len(data)
        return data

    def close(self) -> None:
        if self._cm is None:  # a small file, already closed
            return
        try:
            if self._parallel is not None:
                self._parallel.close()
            else:
                self._f.close()
        finally:
            # A read that failed hands its channel back as failed: a dropped connection's channel
            # must not wait in the idle pool for the next file (paramiko may not yet have marked
            # the transport inactive, so the pool cannot tell by itself).
            failed = getattr(self, "_failed", None)
            self._cm.__exit__(type(failed) if failed else None, failed, None)
            self._cm = None

    def __enter__(self) -> SFTPReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
