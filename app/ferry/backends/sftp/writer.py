"""Writing a remote file under a partial name, renamed into place at commit.

:class:`SFTPWriter` sends pipelined WRITEs of the server's size and reads their replies as they
arrive; a big file goes out from a thread of its own (:class:`Sender`) or as parallel byte
ranges on spare channels (:mod:`~ferry.backends.sftp.parallel_write`), and is hashed on the
server as it lands (:class:`~ferry.backends.sftp.remote_hash.FollowingHash`); a small one is
read back on its handle. :class:`SmallFileWriter` takes a file that fits one request in as few
round trips as the protocol allows.

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

import errno
import logging
import posixpath
import stat as stat_mod
import threading
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol, cast

from ferry.backends.base import Capabilities, Writer, temp_name
from ferry.backends.sftp import limits
from ferry.backends.sftp import paramiko_adapter as adapter
from ferry.backends.sftp.errors import RefusedWithoutReason, is_failure, map_error, over_quota, refused_write
from ferry.backends.sftp.host import OnHost
from ferry.backends.sftp.parallel_write import ParallelRangeWriter, safe_resume_offset
from ferry.backends.sftp.protocol import ReadBackRefused, read_back_file, read_back_replies, setstat_then, wire
from ferry.backends.sftp.remote_hash import FollowingHash, follow_command
from ferry.backends.sftp.shell import HASH_TOOLS
from ferry.core.cancel import CancelToken
from ferry.core.errors import AlreadyExists, CommitInDoubt, FerryError, Transient
from ferry.core.hashing import new_hasher
from ferry.core.outcomes import Evidence

log = logging.getLogger("ferry.sftp")
_FLAG_EXCL = 0x20  # SSH_FXF_EXCL: a new partial file never opens through a link at its name


def _open_new(client: Any, path: bytes, flags: int) -> tuple[int, Any]:
    """OPEN a new partial file with CREAT|EXCL (O_TRUNC would write where a link standing at the
    name points). Something already there (an earlier try of this task, or a link) is REMOVEd,
    which never follows a link, and the OPEN sent once more."""
    flags = (flags & ~adapter.FLAG_TRUNC) | adapter.FLAG_CREATE | _FLAG_EXCL
    try:
        return adapter.request(client, adapter.CMD_OPEN, path, flags, adapter.no_attributes())
    except adapter.StatusError:
        try:
            client.remove(path)
        except OSError:
            pass  # nothing to remove: the OPEN's own answer below says what is wrong
    return adapter.request(client, adapter.CMD_OPEN, path, flags, adapter.no_attributes())


class WriterOwner(OnHost, Protocol):
    """What a writer needs of its backend: the host, how paths are shown, which checksums the
    host computes, and a remote hash."""

    @property
    def capabilities(self) -> Capabilities: ...

    def hash(self, path: str, algo: str, cancel: CancelToken | None = None) -> str: ...


def partial_path(final_path: str, token: str) -> str:
    """The partial file's path for ``final_path`` (``.NAME.TOKEN.ferry-part`` in its folder)."""
    folder, name = posixpath.split(final_path)
    return posixpath.join(folder, temp_name(name, token))


class Sender:
    """Runs ``send`` on a thread of its own for each chunk put in, in order, with at most
    SEND_AHEAD bytes waiting. A failure stops it; the next :meth:`put` (or :meth:`close`)
    raises it, so a full disk still fails the file early."""

    def __init__(self, send: Callable[[memoryview], None]) -> None:
        self._send = send
        self._queue: deque[memoryview] = deque()
        self._spare: list[bytearray] = []  # buffers already sent, reused (fresh ones page-fault)
        self._queued = 0  # bytes put and not yet sent
        self._done = False
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True, name="sftp-send")
        self._thread.start()

    def put(self, data: bytes | bytearray | memoryview) -> None:
        """Queue a copy of ``data`` (the caller reuses its buffer at once)."""
        view = memoryview(data).cast("B")
        with self._cond:
            while self._queued >= limits.SEND_AHEAD and self._error is None:
                self._cond.wait()
            if self._error is not None:
                raise self._error
            spare = self._spare.pop() if self._spare else None
        if spare is None or len(spare) < len(view):
            spare = bytearray(len(view))
        spare[: len(view)] = view
        with self._cond:
            self._queue.append(memoryview(spare)[: len(view)])
            self._queued += len(view)
            self._cond.notify_all()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._done:
                        self._cond.wait()
                    if not self._queue:
                        return
                    data = self._queue.popleft()
                self._send(data)
                with self._cond:
                    self._queued -= len(data)
                    if len(self._spare) < 4:
                        self._spare.append(cast(bytearray, data.obj))  # every byte is in packets by now
                    self._cond.notify_all()
        except BaseException as exc:
            with self._cond:
                self._error = exc
                self._queue.clear()
                self._cond.notify_all()

    def close(self, *, discard: bool) -> None:
        with self._cond:
            self._done = True
            if discard:
                self._queue.clear()
            self._cond.notify_all()
        self._thread.join()
        if self._error is not None and not discard:
            raise self._error


class SFTPWriter(Writer):
    """Writes go out as pipelined WRITE requests of the server's size, their replies read as they
    arrive (a full disk fails the file early, and the bytes the server has acknowledged are
    known). A big file being verified is hashed on the server while it uploads (FollowingHash)."""

    _follow: FollowingHash | None = None
    _sender: Sender | None = None
    _ranges: ParallelRangeWriter | None = None
    _mode: int | None = None  # permission bits set with the time at commit (set_mode)
    _parallel_used = False  # this file's bytes went out as parallel byte ranges (or began to)
    _resumed_at = 0  # the offset this handle's first WRITE went to (a resumed partial file's size)
    _discard = False  # the partial file goes even on an abort that would keep it (see _failed)
    _digest: str | None = None  # what finish() returned: the hash of what the server holds, checked by the copy
    evidence = (Evidence.HOST_TOOL,)  # finish() returns the host's own sha256sum/b3sum of the file

    def __init__(
        self,
        backend: WriterOwner,
        final_path: str,
        token: str,
        resume: bool,
        readback: str | None,
        size: int | None = None,
    ) -> None:
        client = self._begin(backend, final_path, token, readback)
        try:
            self._f = self._open_resuming(client, resume, readback is not None)
            self._resumed_at = self.offset
            if resume and size is not None and size >= limits.PARALLEL_MIN and 0 < self.offset <= size:
                # Parallel streams (this run's or an earlier one's) may have left holes near the
                # end of the partial file: resume only below where none can be.
                self.offset = safe_resume_offset(self.offset)
            if resume and self.offset and readback:
                # Shown in the file's record (the copy path adds it to "sha256 match").
                self.verified_note = (
                    f"resumed after {self.offset} bytes already on the server; that prefix was checked "
                    f"by the {readback} of the whole file as the server holds it"
                )
            self._handle: bytes = adapter.handle_of(self._f)
            self._step = backend._host.request_size
            self._pending: deque[tuple[int, int]] = deque()  # (request, end offset) of unacknowledged WRITEs
            self.acknowledged = self.offset  # bytes the server has confirmed writing
            if readback and size is not None and size >= limits.FOLLOW_MIN:
                self._start_follower(readback)
            if size is not None and size >= limits.PARALLEL_MIN and size > self.offset:
                self._start_ranges(client, size - self.offset)
            if self._ranges is None and size is not None and size - self.offset >= limits.SEND_THREAD_MIN:
                self._sender = Sender(self._send)
        except BaseException as exc:
            err = self._failed(exc) if isinstance(exc, Exception) else exc
            if self._discard:
                self._remove_partial()
            self._cm.__exit__(type(exc), exc, None)
            raise err from exc

    def _begin(self, backend: WriterOwner, final_path: str, token: str, readback: str | None) -> Any:
        """What every writer starts with (this one and :class:`SmallFileWriter`): the partial
        name beside the final one, nothing written yet, and an SFTP channel borrowed for the
        file's life (returned)."""
        self.backend = backend
        self.final_path = final_path
        self.temp_path = partial_path(final_path, token)
        # The partial name is created too: noted before the OPEN goes out, so a stat or remove of
        # it (a cancelled or failed file's cleanup) asks the server instead of taking it for absent
        # in a folder this process just made (issue 18: cancelled and unreadable files' partials stayed).
        backend._host.names.touch(self.temp_path)
        self.offset = 0
        self._written = 0
        self.verified_note = ""
        self._readback = readback
        self._closed = False
        self._cm: Any = backend._host.pool.sftp()
        self._client = self._cm.__enter__()
        return self._client

    def _failed(self, exc: BaseException) -> FerryError:
        """A failed OPEN or WRITE as Ferry's error. SFTP's reasonless "Failure" status is asked
        about (``statvfs@openssh.com``): a read-only folder and a full disk are permanent, a full
        one pausing the job. To a server with space that takes writes, a Failure while this file
        went out as parallel byte ranges, or was resumed at an offset, means it refuses writes at
        out-of-order offsets (``rclone serve sftp`` with its defaults, several appliances): the
        host gets one sequential stream and no resuming from now on, and the file is sent again
        (a retriable error). In every such case the
        partial file is removed at the abort: nothing is left behind by the thousand."""
        if not is_failure(exc):
            return map_error(exc, self.final_path)
        self._discard = True
        try:
            self._stop_sender(discard=True)  # the streams are done with the channels first
        except FerryError:
            pass
        shown = self.backend.display(self.final_path)
        err = refused_write(self._client, exc, posixpath.dirname(self.final_path), shown)
        out_of_order = self._parallel_used or self._resumed_at > 0
        if err is not None and not (out_of_order and isinstance(err, RefusedWithoutReason)):
            return err
        if out_of_order:  # (without statvfs: tried as one stream first, which tells)
            self.backend._host.refuses_out_of_order()
            return Transient(
                f"{self.backend._host.target.hostname} refused a write at an out-of-order offset; "
                f"{shown} is sent again as one sequential stream",
                detail=f"SFTP status {getattr(exc, 'code', '?')}: {exc}",
            )
        return over_quota(exc, shown)

    def _remove_partial(self) -> None:
        try:
            self._client.remove(wire(self.temp_path))
        except Exception as exc:  # the file's error is what the person must see
            log.info("could not remove the partial file %s: %s", self.temp_path, exc)

    def _open_resuming(self, client: Any, resume: bool, readable: bool) -> Any:
        """:meth:`_open`; where the server will not reopen the partial file to resume it, it is
        written again from its first byte. Servers that write only sequentially (rclone serve
        sftp without a VFS cache) refuse to open an existing file for writing without
        truncating it (SFTP "Failure")."""
        if resume and self.backend._host.sequential_writes:
            resume = False  # such a server refuses the WRITE at the resumed offset anyway
        try:
            return self._open(client, resume, readable)
        except adapter.StatusError as exc:
            if not (resume and is_failure(exc)):
                raise
        log.info("%s: the partial file cannot be reopened to resume; writing it again", self.temp_path)
        self.offset = 0
        return self._open(client, False, readable)

    def _open(self, client: Any, resume: bool, readable: bool) -> Any:
        """OPEN the partial file (readable too when verifying: a small file is read back on this
        handle). Resuming, a STAT goes out in the same flight: the server creates the file if it
        is missing, then says how much it holds (one round trip, was two)."""
        path = wire(self.temp_path)
        flags = adapter.FLAG_WRITE | adapter.FLAG_CREATE | (adapter.FLAG_READ if readable or resume else 0)
        if not resume:
            t, msg = _open_new(client, path, flags)
            if t != adapter.CMD_HANDLE:
                raise OSError(errno.EIO, "Expected a file handle")
            return adapter.file_on(client, msg.get_binary(), "r+b" if readable else "wb", 1 << 20)
        n_open = adapter.send(client, adapter.CMD_OPEN, path, flags, adapter.no_attributes())
        n_stat = adapter.send(client, adapter.CMD_STAT, path) if resume else None
        failure: BaseException | None = None
        handle = b""
        try:  # both replies are read whatever happens: the channel stays in step
            t, msg = adapter.reply(client, n_open)
            if t != adapter.CMD_HANDLE:
                raise OSError(errno.EIO, "Expected a file handle")
            handle = msg.get_binary()
        except Exception as exc:
            failure = exc
        if n_stat is not None:
            try:
                t, msg = adapter.reply(client, n_stat)
                if t == adapter.CMD_ATTRS and failure is None:
                    self.offset = adapter.attributes(msg).st_size or 0
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return adapter.file_on(client, handle, "r+b" if readable or resume else "wb", 1 << 20)

    def _start_follower(self, algo: str) -> None:
        tool = self.backend._host.hash_tools.get(algo)
        if tool is None or self.backend._host.plain_commands:  # the follower is a sh script
            return
        started = self.backend._host.shell.exec_nowait(follow_command(self.temp_path, tool))
        if started is not None:
            self._follow = FollowingHash(*started)
            self._follow.advance(self.offset)  # a resumed prefix is already on the server

    def _start_ranges(self, client: Any, size: int) -> None:
        """Big files: parallel byte-range streams on channels that are free right now."""
        host = self.backend._host
        if host.sequential_writes:  # the server refuses writes at out-of-order offsets
            return
        extra = host.stream_channels(up=True, size=size, label=self.temp_path)
        if not extra:
            return
        path = wire(self.temp_path)

        def open_handle(c: Any) -> bytes:
            t, msg = adapter.request(c, adapter.CMD_OPEN, path, adapter.FLAG_WRITE, adapter.no_attributes())
            if t != adapter.CMD_HANDLE:
                raise OSError(errno.EIO, "Expected a file handle")
            return cast(bytes, msg.get_binary())

        def acknowledged(n: int) -> None:
            if self._follow is not None:
                self._follow.advance(n)

        self._extra = extra
        self._parallel_used = True
        self._ranges = ParallelRangeWriter(
            [client, *extra],
            [self._handle, *[None] * len(extra)],
            self.offset,
            self._step,
            adapter.send_write,
            adapter.reply,
            open_handle,
            lambda c, h: adapter.request(c, adapter.CMD_CLOSE, h),
            lambda c: c.sock.recv_ready(),
            acknowledged,
        )

    def write(self, data: bytes | bytearray | memoryview) -> None:
        try:
            if self._ranges is not None:
                self._ranges.put(data)
                self._written += len(memoryview(data).cast("B"))
            elif self._sender is not None:
                self._sender.put(data)
            else:
                self._send(data)
        except FerryError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc

    def _send(self, data: bytes | bytearray | memoryview) -> None:
        """(raises the channel's own exceptions: it may run on the Sender's thread)"""
        view = memoryview(data).cast("B")
        client, step, pending = self._client, self._step, self._pending
        pos = self.offset + self._written
        for start in range(0, len(view), step):
            piece = view[start : start + step]
            num = adapter.send_write(client, self._handle, pos, piece)
            pos += len(piece)
            self._written += len(piece)
            pending.append((num, pos))
        # Replies already here are read now, and the oldest once too many are out.
        while pending and (len(pending) > limits.WRITE_DEPTH or client.sock.recv_ready()):
            self._ack()
        if self._follow is not None:
            self._follow.advance(self.acknowledged)

    def _ack(self) -> None:
        """Read the oldest WRITE's reply; after a failure every other reply is read too (the
        channel stays in step for the next borrower) before the failure is raised."""
        num, end = self._pending.popleft()
        try:
            adapter.reply(self._client, num)
        except Exception:
            try:
                self._drain()
            except Exception:
                pass
            raise
        self.acknowledged = end

    def _drain(self) -> None:
        """Read every outstanding WRITE reply; the first failure is raised after all are read."""
        failure: BaseException | None = None
        while self._pending:
            num, end = self._pending.popleft()
            try:
                adapter.reply(self._client, num)
                if failure is None:
                    self.acknowledged = end
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def _read_back(self, algo: str) -> str:
        """Hash what the server now holds by reading it back on the open handle: the READs go
        out right behind the last WRITEs (the server answers in order) and need no remote
        process, no exec channel and no batch to wait for, where a remote hash costs a process
        start per batch (small files spent most of their time waiting for it). The CLOSE goes
        out behind the READs: one wait for all of it, and the handle is closed."""
        f, client, host = self._f, self._client, self.backend._host
        handle = adapter.handle_of(f)
        size = self.offset + self._written
        step = host.request_size
        failure: BaseException | None = None
        first = host.reads_write_handles is None
        if first:
            # Not known yet whether this server reads a file on its write handle: the WRITEs are
            # acknowledged before any READ goes out (rclone, asked to read on its write handle,
            # fails the READs and garbles the answers to WRITEs still in flight).
            try:
                self._drain()
            except Exception as exc:
                failure = exc
        nums = [
            adapter.send(client, adapter.CMD_READ, handle, adapter.offset(o), min(step, size - o))
            for o in (range(0, size, step) if failure is None else ())
        ]
        close = adapter.send(client, adapter.CMD_CLOSE, handle)
        adapter.closed_by_request(f)
        self._closed = True
        hasher = new_hasher(algo)
        if not first:
            try:
                self._drain()
            except Exception as exc:
                failure = exc
        digest = read_back_replies(client, nums, close, hasher, size, failure)
        host.reads_write_handles = True
        return cast(str, digest)  # never None: a hasher was given

    def _close_file(self) -> None:
        self._stop_sender(discard=False)
        if not self._closed:
            self._closed = True
            failure: BaseException | None = None
            try:
                self._drain()
            except Exception as exc:
                failure = exc
            try:
                self._f.close()
            except Exception as exc:
                failure = failure or exc
            if failure is not None:
                raise self._failed(failure) from failure

    def _stop_sender(self, *, discard: bool) -> None:
        """Wait for the sender thread to send what it holds (or drop it, ``discard``); its
        failure is raised here unless discarding."""
        sender, self._sender = self._sender, None
        if sender is not None:
            try:
                sender.close(discard=discard)
            except Exception as exc:
                raise self._failed(exc) from exc
        ranges, self._ranges = self._ranges, None
        if ranges is not None:
            ok = False
            try:
                ranges.close(discard=discard)
                self.acknowledged = ranges.acknowledged
                ok = not discard
            except Exception as exc:
                raise self._failed(exc) from exc
            finally:
                for c in self._extra:
                    self.backend._host.pool.give_back(c, ok and not any(ranges.handles_open[1:]))
                self._extra = []

    def finish(self) -> str | None:
        self._digest = self._finish()
        return self._digest

    def _finish(self) -> str | None:
        try:
            self._stop_sender(discard=False)
        except BaseException:
            self._stop_follower()
            raise
        if self._readback is not None and not self._closed and self.offset + self._written <= limits.READBACK_MAX:
            self._stop_follower()  # the source turned out small: reading back is quicker
            if not self.backend._host.reads_write_handles:
                self._close_file()
                return self._read_back_anew(self._readback)
            try:
                digest = self._read_back(self._readback)
            except ReadBackRefused:
                self.backend._host.refuses_reads_on_write_handles()  # written and closed: only the READs
                return self._read_back_anew(self._readback)
            except Exception as exc:
                raise self._failed(exc) from exc
            self._close_file()
            return digest
        try:
            self._close_file()
        except BaseException:
            self._stop_follower()
            raise
        # Give the channel back before hashing: the remote hash needs an exec channel of its own,
        # and under a small MaxSessions every worker holding one while waiting for another deadlocks.
        self._release()
        follow, self._follow = self._follow, None
        if follow is not None:
            followed = follow.result(self.offset + self._written)
            if followed is not None:
                return followed
            log.info("the remote hash that followed %s gave no answer; hashing it again", self.temp_path)
        if self._readback is None:
            return None
        if self._readback not in self.backend.capabilities.hashes:  # (detects the host's tools once)
            # The host hashes other algorithms but has no tool for this one (most clusters have
            # no b3sum): the file is good as far as its size goes, and the record says exactly
            # that. Failing it after the whole upload would throw the transfer away.
            tool = HASH_TOOLS.get(self._readback, self._readback)
            self.verified_note = f"the server has no {tool} to check {self._readback}"
            return None
        return self.backend.hash(self.temp_path, self._readback)

    def _read_back_anew(self, algo: str) -> str:
        """Read back through a read-only handle of its own (the file is written and closed): for
        servers that cannot read a file on its write handle. A failure here is a read's, never a
        full disk's."""
        try:
            return read_back_file(
                self._channel(),
                wire(self.temp_path),
                self.offset + self._written,
                self.backend._host.request_size,
                algo,
            )
        except Exception as exc:
            raise map_error(exc, self.backend.display(self.final_path)) from exc

    def _stop_follower(self) -> None:
        follow, self._follow = self._follow, None
        if follow is not None:
            follow.close()

    def _channel(self) -> Any:
        if self._cm is None:
            self._cm = self.backend._host.pool.sftp()
            self._client = self._cm.__enter__()
        return self._client

    def set_mode(self, mode: int, *, umask: bool = False) -> bool:
        """Set with the time in the commit's SETSTAT (as ``sftp put -p``). With ``umask`` none:
        the file keeps what the server gave it when it was made (its umask on 0666)."""
        if not umask:
            self._mode = stat_mod.S_IMODE(mode)
        return True

    def commit(self, *, overwrite: bool, mtime: datetime | None = None) -> None:
        """SETSTAT+RENAME of the partial file to its name. Where the connection drops with the
        RENAME sent, a fresh connection looks whether the server did it (see
        :meth:`_renamed_before_the_drop`); where nothing can tell, the commit is in doubt
        (:class:`~ferry.core.errors.CommitInDoubt`) and the task's next attempt looks again."""
        try:
            self._commit(overwrite=overwrite, mtime=mtime)
        except CommitInDoubt:
            raise
        except Transient as exc:
            if not self._renamed_before_the_drop(exc):
                raise
            log.info("the connection dropped after %s was renamed into place; it is there", self.final_path)
            self.verified_note = ", ".join(
                n for n in (self.verified_note, "the rename's answer was lost; the file in place was hashed again") if n
            )

    def _renamed_before_the_drop(self, dropped: Transient) -> bool:
        """The connection dropped while committing: did the server do the RENAME before it went?
        If so, a retry would find "its own" file in the way and apply the conflict policy to it.
        Asked on a fresh connection: False when the partial file (its name carries this task's
        token; only this rename takes it away) is still there, so the rename was not done and the
        file is simply sent again; True when the partial is gone and the final name holds a
        regular file whose hash (the host's own tool, else read back over SFTP) equals the hash
        of what was written and verified before the rename was sent. Size alone never says so:
        anything else raises CommitInDoubt."""
        size = self.offset + self._written
        shown = self.backend.display(self.final_path)
        doubt = CommitInDoubt(
            f"Connection lost while renaming {shown} into place; the next attempt checks whether it landed",
            detail=f"{dropped.message}; {dropped.detail}" if dropped.detail else dropped.message,
        )
        algo, digest = self._readback, self._digest
        try:
            with self.backend._host.pool.sftp() as c:
                try:
                    c.lstat(wire(self.temp_path))
                    return False
                except FileNotFoundError:
                    pass
                attr = c.lstat(wire(self.final_path))
                if not stat_mod.S_ISREG(attr.st_mode or 0) or attr.st_size != size or algo is None or digest is None:
                    raise doubt  # not ours, or nothing here to compare its content with
                on_host = algo in self.backend.capabilities.hashes
                landed = (
                    None
                    if on_host
                    else read_back_file(c, wire(self.final_path), size, self.backend._host.request_size, algo)
                )
            if on_host:  # (the channel is given back first: the hash needs an exec channel)
                landed = self.backend.hash(self.final_path, algo)
        except CommitInDoubt:
            raise
        except Exception as exc:
            raise doubt from exc
        if landed != digest:
            raise doubt
        return True

    def _commit(self, *, overwrite: bool, mtime: datetime | None) -> None:
        try:
            self._close_file()
            c = self._channel()
            mode = self._mode
            refused: BaseException | None = None
            if overwrite:
                refused = setstat_then(
                    c, wire(self.temp_path), mtime, "posix-rename@openssh.com", wire(self.final_path), mode=mode
                )
            else:
                # SFTP's RENAME never replaces (OpenSSH: link()+unlink()): no lstat round trip
                # first, which also closes the window for a name appearing in between.
                try:
                    refused = setstat_then(c, wire(self.temp_path), mtime, "rename", wire(self.final_path), mode=mode)
                except OSError as exc:
                    try:
                        c.lstat(wire(self.final_path))
                    except OSError:
                        raise map_error(exc, self.backend.display(self.final_path)) from exc
                    raise AlreadyExists(f"Already exists: {self.backend.display(self.final_path)}") from exc
            if refused is not None:
                self.attributes_refused = f"the server refused to set them ({refused})"
        except FerryError:
            raise
        except Exception as exc:
            raise map_error(exc, self.final_path) from exc
        finally:
            self._release()

    def abort(self, *, keep_partial: bool = False) -> None:
        try:
            self._stop_sender(discard=True)
        except FerryError:
            pass
        self._stop_follower()
        try:
            try:
                self._close_file()
            except FerryError:
                pass
            if not keep_partial or self._discard:
                try:
                    self._channel().remove(wire(self.temp_path))
                except Exception:
                    pass
        finally:
            self._release()

    def _release(self) -> None:
        cm, self._cm = self._cm, None
        if cm is not None:
            cm.__exit__(None, None, None)


# One WRITE and one READ at SFTP's portable request size (32 KiB), whatever the server is;
# bigger files keep the general writer (resume, remote hash for big ones, its own tests).
SMALL_MAX = 32 << 10


def is_small(size: int | None) -> bool:
    # Only files the general writer would verify by read-back too: bigger ones get a remote hash.
    return size is not None and size <= min(SMALL_MAX, limits.READBACK_MAX)


class SmallFileWriter(SFTPWriter):
    """An :class:`SFTPWriter` for a small file: same partial name, same commit, fewer waits.

    WRITE requests go out as the copy hands over bytes and their replies are read at
    :meth:`finish`/close, together with the read-back and CLOSE: one wait for all of them.
    """

    evidence = (Evidence.READBACK,)  # what landed is read back over SFTP and hashed here

    def __init__(self, backend: WriterOwner, final_path: str, token: str, readback: str | None) -> None:
        self._replies: list[int] = []  # WRITEs whose status has not been read yet
        self._begin(backend, final_path, token, readback)
        self._step = backend._host.request_size
        self._read_on_handle = readback is not None and backend._host.reads_write_handles is not False
        flags = adapter.FLAG_WRITE | adapter.FLAG_CREATE | adapter.FLAG_TRUNC
        flags |= adapter.FLAG_READ if self._read_on_handle else 0
        try:
            t, msg = _open_new(self._client, wire(self.temp_path), flags)
            if t != adapter.CMD_HANDLE:
                raise OSError(f"Expected a file handle for {self.temp_path}")
            self._handle: bytes = msg.get_binary()
        except BaseException as exc:
            err = self._failed(exc) if isinstance(exc, Exception) else exc
            if self._discard:
                self._remove_partial()
            self._cm.__exit__(type(exc), exc, None)
            self._cm = None
            raise err from exc

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        try:
            for start in range(0, len(view), self._step):
                piece = bytes(view[start : start + self._step])
                pos = self._written
                self._replies.append(
                    adapter.send(self._client, adapter.CMD_WRITE, self._handle, adapter.offset(pos), piece)
                )
                self._written += len(piece)
        except Exception as exc:
            raise map_error(exc, self.final_path) from exc

    def _flight(self, read_back: bool) -> str | None:
        """Send the read-back READs (if asked) and CLOSE behind the WRITEs, then read every
        reply in order. The first failure is raised after all are read: the channel stays in
        step for the next file. Returns the digest of what the server sent back."""
        client, handle, size, host = self._client, self._handle, self._written, self.backend._host
        writes, self._replies = self._replies, []
        failure: BaseException | None = None
        if read_back and host.reads_write_handles is None:
            # Not known yet whether this server reads a file on its write handle: the WRITEs are
            # acknowledged before any READ goes out (see SFTPWriter._read_back).
            for num in writes:
                try:
                    adapter.reply(client, num)
                except Exception as exc:
                    failure = failure or exc
            writes, read_back = [], failure is None
        reads = []
        if read_back:
            reads = [
                adapter.send(client, adapter.CMD_READ, handle, adapter.offset(o), min(self._step, size - o))
                for o in range(0, size, self._step)
            ]
        close = adapter.send(client, adapter.CMD_CLOSE, handle)
        self._closed = True
        for num in writes:
            try:
                adapter.reply(client, num)
            except Exception as exc:
                failure = failure or exc
        hasher = new_hasher(self._readback) if read_back and self._readback else None
        digest = read_back_replies(client, reads, close, hasher, size, failure)
        if read_back:
            host.reads_write_handles = True
        return digest

    def _finish(self) -> str | None:
        if self._closed:
            return None
        try:
            digest = self._flight(self._read_on_handle)
        except ReadBackRefused:
            self.backend._host.refuses_reads_on_write_handles()  # written and closed: only the READs
            digest = None
        except Exception as exc:
            raise self._failed(exc) from exc
        if self._readback is None or (self._read_on_handle and digest is not None):
            return digest
        return self._read_back_anew(self._readback)

    def _close_file(self) -> None:
        if not self._closed:
            try:
                self._flight(False)
            except Exception as exc:
                raise self._failed(exc) from exc
