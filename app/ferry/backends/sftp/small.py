"""Uploads of small files over SFTP in as few round trips as the protocol allows.

A 4 KiB upload through the general writer cost six round trips after the copy's own ``lstat``
of the destination: a STAT of the partial file (to resume it), OPEN, the pipelined WRITEs, the
read-back READs, CLOSE, then SETSTAT+RENAME at commit. Profiled (py-spy, 2,000 x 4 KiB to the
loopback sshd, four workers) the workers spent most of their time waiting on those replies:
round trips, not bytes, are what a small file costs. Here a file that fits in one SFTP request
at the portable size (:data:`SMALL_MAX`) takes three:

1. OPEN (the handle is the server's, so nothing can be sent before it answers); a missing
   folder is reported here, as the copy expects, so it can make the folder and try again;
2. WRITE, the read-back READs and CLOSE all in flight together: the server answers in order,
   so the READs see the bytes just written and the CLOSE follows them;
3. SETSTAT+RENAME at commit (the general writer's commit, unchanged).

Resuming is not worth a round trip for a file this small: an interrupted partial file is simply
written again from its first byte (``O_TRUNC``), so the copy re-reads and re-hashes the whole
source and verification still covers every byte. The read-back hashes what the *server* holds
(its READ replies), never Ferry's own buffer, exactly as the general writer's read-back does.
"""

from __future__ import annotations

import logging
import posixpath
import stat as stat_mod
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ferry.backends.base import Entry, Kind, temp_name
from ferry.backends.sftp import backend as _sftp
from ferry.backends.sftp.backend import SFTPWriter, _b, _map_error
from ferry.core.errors import Transient
from ferry.core.hashing import new_hasher
from ferry.core.outcomes import Evidence

if TYPE_CHECKING:
    from ferry.backends.sftp.backend import SFTPBackend

log = logging.getLogger("ferry.sftp")

# One WRITE and one READ at SFTP's portable request size (32 KiB), whatever the server is;
# bigger files keep the general writer (resume, remote hash for big ones, its own tests).
SMALL_MAX = 32 << 10


def is_small(size: int | None) -> bool:
    # Only files the general writer would verify by read-back too: bigger ones get a remote hash.
    return size is not None and size <= min(SMALL_MAX, _sftp.READBACK_MAX)


class SmallFileWriter(SFTPWriter):
    """An :class:`SFTPWriter` for a small file: same partial name, same commit, fewer waits.

    WRITE requests go out as the copy hands over bytes and their replies are read at
    :meth:`finish`/close, together with the read-back and CLOSE: one wait for all of them.
    """

    evidence = (Evidence.READBACK,)  # what landed is read back over SFTP and hashed here

    def __init__(self, backend: SFTPBackend, final_path: str, token: str, readback: str | None) -> None:
        from paramiko.sftp import (
            CMD_HANDLE,
            CMD_OPEN,
            SFTP_FLAG_CREATE,
            SFTP_FLAG_READ,
            SFTP_FLAG_TRUNC,
            SFTP_FLAG_WRITE,
        )
        from paramiko.sftp_attr import SFTPAttributes

        self.backend = backend
        folder, name = posixpath.split(final_path)
        self.final_path = final_path
        self.temp_path = posixpath.join(folder, temp_name(name, token))
        self.offset = 0
        self._written = 0
        self.verified_note = ""
        self._readback = readback
        self._replies: list[int] = []  # WRITEs whose status has not been read yet
        self._closed = False
        self._cm: Any = backend._host.sftp()
        self._client = self._cm.__enter__()
        self._step = backend._host.request_size
        flags = SFTP_FLAG_WRITE | SFTP_FLAG_CREATE | SFTP_FLAG_TRUNC | (SFTP_FLAG_READ if readback else 0)
        try:
            t, msg = self._client._request(CMD_OPEN, _b(self.temp_path), flags, SFTPAttributes())
            if t != CMD_HANDLE:
                raise OSError(f"Expected a file handle for {self.temp_path}")
            self._handle: bytes = msg.get_binary()
        except BaseException as exc:
            self._cm.__exit__(type(exc), exc, None)
            self._cm = None
            raise _map_error(exc, final_path) from exc

    def write(self, data: bytes | bytearray | memoryview) -> None:
        from paramiko.sftp import CMD_WRITE, int64

        view = memoryview(data)
        try:
            for start in range(0, len(view), self._step):
                piece = bytes(view[start : start + self._step])
                pos = self._written
                self._replies.append(
                    self._client._async_request(type(None), CMD_WRITE, self._handle, int64(pos), piece)
                )
                self._written += len(piece)
        except Exception as exc:
            raise _map_error(exc, self.final_path) from exc

    def _flight(self, read_back: bool) -> str | None:
        """Send the read-back READs (if asked) and CLOSE behind the WRITEs, then read every
        reply in order. The first failure is raised after all are read: the channel stays in
        step for the next file. Returns the digest of what the server sent back."""
        from paramiko.sftp import CMD_CLOSE, CMD_READ, int64

        client, handle, size = self._client, self._handle, self._written
        writes, self._replies = self._replies, []
        reads = []
        if read_back:
            reads = [
                client._async_request(type(None), CMD_READ, handle, int64(o), min(self._step, size - o))
                for o in range(0, size, self._step)
            ]
        close = client._async_request(type(None), CMD_CLOSE, handle)
        self._closed = True
        failure: BaseException | None = None
        for num in writes:
            try:
                client._read_response(num)
            except Exception as exc:
                failure = failure or exc
        hasher = new_hasher(self._readback) if read_back and self._readback else None
        return _sftp.read_back_replies(client, reads, close, hasher, size, failure)

    def finish(self) -> str | None:
        if self._closed:
            return None
        try:
            return self._flight(self._readback is not None)
        except Exception as exc:
            raise _map_error(exc, self.final_path) from exc

    def _close_file(self) -> None:
        if not self._closed:
            try:
                self._flight(False)
            except Exception as exc:
                raise _map_error(exc, self.final_path) from exc

    def commit(self, *, overwrite: bool, mtime: datetime | None = None) -> None:
        try:
            super().commit(overwrite=overwrite, mtime=mtime)
        except Transient:
            if not self._renamed_before_the_drop():
                raise
            log.info("the connection dropped after %s was renamed into place; it is there", self.final_path)

    def _renamed_before_the_drop(self) -> bool:
        """The connection dropped while committing: did the server do the RENAME before it went?
        If so, a retry would find "its own" file in the way and apply the conflict policy to
        it. It did when the partial name (it carries this task's token; only this rename takes
        it away) is gone and the final name holds a regular file of exactly the bytes written
        (which were verified before the rename was sent). Asked on a fresh connection."""
        try:
            with self.backend._host.sftp() as c:
                try:
                    c.lstat(_b(self.temp_path))
                    return False
                except FileNotFoundError:
                    pass
                attr = c.lstat(_b(self.final_path))
                return stat_mod.S_ISREG(attr.st_mode or 0) and attr.st_size == self._written
        except Exception:
            return False


# ---- answers without a round trip ----
#
# A small file's copy starts with a stat: of the source (a download: the copy wants the size and
# time as they are now) or of the destination (an upload: is the name taken?). Against a host
# that is a round trip per file, a third of a small download's and a quarter of a small upload's.
# Two things this process already knows answer most of them:
#
# * a file's attributes from the listing the planner made moments ago (READDIR returns them):
#   used once, then forgotten, and only for FRESH seconds, so a retried file asks the server;
# * a folder this process created itself moments ago holds only the names this process wrote
#   into it: any other name is absent. Every name Ferry may create there (a writer's final name,
#   a folder, a link, a rename's target) is noted *before* the request goes out, so a name that
#   might exist is always asked for. If another program puts a file into such a folder within
#   FRESH seconds, nothing is overwritten: the commit's RENAME never replaces, so that file ends
#   "already exists" instead of following the conflict policy.

FRESH = 10.0  # seconds a listing's attributes or a new folder's emptiness is trusted
_LISTED_MAX = 8192  # attributes kept from listings (the oldest go first)


class KnownNames:
    """What one host's connection knows about names without asking (see above)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._fresh: dict[str, float] = {}  # folders created here -> when
        # Every name Ferry may have created -> when. Kept for all folders, fresh or not: a worker
        # may touch a name just before another worker's mkdir of its folder is recorded.
        self._touched: dict[str, float] = {}
        self._listed: OrderedDict[str, tuple[Entry, float]] = OrderedDict()
        self._prune_fresh_at = 4096
        self._prune_touched_at = 50_000

    def _prune(self, now: float) -> None:
        # A touch matters only while its folder is fresh: FRESH seconds after a creation that
        # came at most moments after the touch. Twice that is a wide margin. The next prune waits
        # until the table has doubled, so a fast run never pays for one per name.
        if len(self._fresh) > self._prune_fresh_at:
            self._fresh = {p: t for p, t in self._fresh.items() if now - t <= FRESH}
            self._prune_fresh_at = max(4096, 2 * len(self._fresh))
        if len(self._touched) > self._prune_touched_at:
            self._touched = {n: t for n, t in self._touched.items() if now - t <= 2 * FRESH}
            self._prune_touched_at = max(50_000, 2 * len(self._touched))

    def created_folder(self, path: str) -> None:
        with self._lock:
            now = self._clock()
            self._prune(now)
            self._fresh[path.rstrip("/") or "/"] = now

    def touch(self, path: str) -> None:
        """``path`` may exist from now on: always ask the server about it."""
        path = path.rstrip("/") or "/"
        with self._lock:
            now = self._clock()
            self._prune(now)
            self._touched[path] = now
            self._listed.pop(path, None)

    def absent(self, path: str) -> bool:
        path = path.rstrip("/") or "/"
        with self._lock:
            made = self._fresh.get(posixpath.dirname(path))
            if made is None or path in self._touched:
                return False
            if self._clock() - made > FRESH:
                del self._fresh[posixpath.dirname(path)]
                return False
            return True

    def listed(self, entry: Entry) -> None:
        if entry.kind is not Kind.FILE:
            return
        with self._lock:
            self._listed[entry.path] = (entry, self._clock())
            if len(self._listed) > _LISTED_MAX:
                self._listed.popitem(last=False)

    def take_listed(self, path: str) -> Entry | None:
        with self._lock:
            got = self._listed.pop(path, None)
        if got is None or self._clock() - got[1] > FRESH:
            return None
        return got[0]

    def forget(self) -> None:
        with self._lock:
            self._fresh.clear()
            self._touched.clear()
            self._listed.clear()


_known: weakref.WeakKeyDictionary[Any, KnownNames] = weakref.WeakKeyDictionary()
_known_lock = threading.Lock()


def known(host: Any) -> KnownNames:
    """The :class:`KnownNames` of one host connection (``sftp._Host``)."""
    with _known_lock:
        k = _known.get(host)
        if k is None:
            k = _known[host] = KnownNames()
        return k
