"""SFTP requests as Ferry sends them: pipelined where paramiko's own calls wait for each reply,
and paths kept as the exact bytes the server uses."""

from __future__ import annotations

import errno
import logging
import stat as stat_mod
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, cast

from ferry.backends.base import Entry, Kind
from ferry.backends.sftp import paramiko_adapter as adapter
from ferry.core.hashing import new_hasher

log = logging.getLogger("ferry.sftp")


def wire(path: str) -> bytes:
    """Remote paths go out as bytes: names that are not UTF-8 arrive as surrogate escapes and
    must reach the server exactly as it sent them (paramiko would encode str strictly)."""
    return path.encode("utf-8", "surrogateescape")


def from_wire(raw: str | bytes | None) -> str:
    if raw is None:
        return ""
    return raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw


def listdir(client: Any, path: str, depth: int = 16) -> Iterator[Any]:
    """A folder's entries page by page (READDIR batches, ``depth`` requests in flight).

    paramiko's own ``listdir_iter`` decodes names strictly (a non-UTF-8 name breaks the whole
    listing) and leaves the handle open when abandoned; this keeps names exact as surrogate
    escapes and always closes the handle.
    """
    from paramiko.message import Message

    t, msg = adapter.request(client, adapter.CMD_OPENDIR, wire(path))
    if t != adapter.CMD_HANDLE:
        raise OSError(errno.EIO, "Expected a folder handle")
    handle = msg.get_binary()
    pending: list[int] = []
    done = False
    try:
        while not done:
            while len(pending) < depth:
                pending.append(adapter.send(client, adapter.CMD_READDIR, handle))
            num = pending.pop(0)
            while True:
                t, data = adapter.next_message(client)
                reply = Message(data)
                if reply.get_int() == num:
                    break  # replies come in order; anything else is a stale reply to skip
            if t == adapter.CMD_STATUS:
                try:
                    adapter.raise_status(client, reply)
                except EOFError:
                    done = True
                    continue
            if t != adapter.CMD_NAME:
                raise OSError(errno.EIO, f"Unexpected SFTP reply {t} to READDIR")
            for _ in range(reply.get_int()):
                name = reply.get_string().decode("utf-8", "surrogateescape")
                longname = reply.get_string().decode("utf-8", "replace")
                yield adapter.attributes(reply, name, longname)
    finally:
        # Drain what is still in flight so the channel stays usable for the next borrower.
        for num in pending:
            try:
                while Message(adapter.next_message(client)[1]).get_int() != num:
                    pass
            except Exception:
                break
        try:
            adapter.request(client, adapter.CMD_CLOSE, handle)
        except Exception:
            pass


def entry_of(path: str, name: str, attr: Any) -> Entry:
    mode = attr.st_mode or 0
    if stat_mod.S_ISDIR(mode):
        kind, size = Kind.DIR, None
    elif stat_mod.S_ISLNK(mode):
        kind, size = Kind.LINK, attr.st_size
    elif stat_mod.S_ISREG(mode):
        kind, size = Kind.FILE, attr.st_size
    else:
        kind, size = Kind.SPECIAL, None
    mtime = datetime.fromtimestamp(attr.st_mtime, UTC) if attr.st_mtime is not None else None
    meta = {"special": "special file"} if kind is Kind.SPECIAL else {}
    return Entry(path, name, kind, size, mtime, None, stat_mod.S_IMODE(mode), {}, meta)


class ReadBackRefused(Exception):
    """The server took every WRITE and the CLOSE but answered the READs that read the file back
    on its write handle with "Failure" (``rclone serve sftp`` without a VFS cache: a file opened
    for writing cannot be read, "Illegal seek"). Nothing about the disk: the file is read back
    through a handle of its own (:func:`read_back_file`)."""


def read_back_replies(
    client: Any, reads: list[int], close: int, hasher: Any | None, size: int, failure: BaseException | None
) -> str | None:
    """Collect the replies of a read-back (READs sent behind the last WRITEs, then CLOSE): every
    reply is read even after a failure, so the channel stays in step for the next file; the
    first failure is raised after that (:class:`ReadBackRefused` when only READs were refused).
    Returns the digest of the bytes the server sent back, ``short:N`` when it held fewer than
    ``size`` (equal to no digest: the copy reports a mismatch), or None without a hasher."""
    got = 0
    refused: BaseException | None = None  # a READ answered "Failure"
    for num in reads:
        try:
            t, msg = adapter.reply(client, num)
            if t == adapter.CMD_DATA:
                chunk: bytes = msg.get_binary()
                if hasher is not None and failure is None:
                    hasher.update(chunk)
                    got += len(chunk)
        except EOFError:
            pass  # the file is shorter than what was written: the size check says so
        except adapter.StatusError as exc:
            if exc.code != adapter.FX_FAILURE:
                failure = failure or exc
            refused = refused or exc
        except Exception as exc:
            failure = failure or exc
    try:
        adapter.reply(client, close)
    except Exception as exc:
        failure = failure or exc
    if failure is not None:
        raise failure
    if refused is not None:
        raise ReadBackRefused(str(refused)) from refused
    if hasher is None:
        return None
    if got != size:
        return f"short:{got}"
    return str(hasher.hexdigest())


def read_back_file(client: Any, path: bytes, size: int, step: int, algo: str) -> str:
    """Hash ``path`` as the server holds it, read through a read-only handle of its own: OPEN,
    then its READs and CLOSE in one flight (for servers that cannot read a file on the handle it
    was written through). Returns the digest, or ``short:N`` as :func:`read_back_replies`."""
    t, msg = adapter.request(client, adapter.CMD_OPEN, path, adapter.FLAG_READ, adapter.no_attributes())
    if t != adapter.CMD_HANDLE:
        raise OSError(errno.EIO, "Expected a file handle")
    handle = msg.get_binary()
    reads = [
        adapter.send(client, adapter.CMD_READ, handle, adapter.offset(o), min(step, size - o))
        for o in range(0, size, step)
    ]
    close = adapter.send(client, adapter.CMD_CLOSE, handle)
    digest = read_back_replies(client, reads, close, new_hasher(algo), size, None)
    return cast(str, digest)  # never None: a hasher was given


def stat_and_first_read(client: Any, f: Any, offset: int, size: int) -> tuple[Any, bytes]:
    """FSTAT and the first READ in flight together: a small file's size and bytes in one round
    trip. Both replies are read whatever happens (the channel stays in step); a READ error
    (a folder, say) is left for the caller to judge from the attributes."""
    handle = adapter.handle_of(f)
    n_stat = adapter.send(client, adapter.CMD_FSTAT, handle)
    n_read = adapter.send(client, adapter.CMD_READ, handle, adapter.offset(offset), int(size))
    st: Any = None
    head = b""
    failure: BaseException | None = None
    try:
        t, msg = adapter.reply(client, n_stat)
        if t != adapter.CMD_ATTRS:
            raise OSError(errno.EIO, "Expected attributes")
        st = adapter.attributes(msg)
    except Exception as exc:
        failure = exc
    try:
        t, msg = adapter.reply(client, n_read)
        if t == adapter.CMD_DATA:
            head = msg.get_binary()
    except Exception:  # EOF (empty file) or EISDIR: the attributes say which
        pass
    if failure is not None:
        raise failure
    return st, head


def setstat_then(
    client: Any, path: bytes, mtime: datetime | None, how: str, new: bytes, *, mode: int | None = None
) -> BaseException | None:
    """Set ``path``'s times and permission bits (if asked) and rename it, both requests in flight
    at once: one round trip per committed file instead of two. The server answers in order; both
    answers are read even when the first is an error, so the channel stays in step. Returns why
    the server refused the times and permissions (the file is renamed all the same), or None."""
    nums = []
    if mtime is not None or mode is not None:
        attr = adapter.no_attributes()
        if mtime is not None:
            attr.st_atime = attr.st_mtime = int(mtime.timestamp())  # SFTP v3 carries whole seconds
        if mode is not None:
            attr.st_mode = mode
        nums.append(adapter.send(client, adapter.CMD_SETSTAT, path, attr))
    if how == "rename":
        nums.append(adapter.send(client, adapter.CMD_RENAME, path, new))
    else:
        nums.append(adapter.send(client, adapter.CMD_EXTENDED, how, path, new))
    errors: list[BaseException | None] = []
    for num in nums:
        try:
            adapter.reply(client, num)
            errors.append(None)
        except Exception as exc:
            errors.append(exc)
    if errors[-1] is not None:
        raise errors[-1]
    if len(errors) > 1 and errors[0] is not None:  # renamed, only the time and mode not set: said per file
        log.info("could not set the modification time or permissions of %s: %s", from_wire(new), errors[0])
        return errors[0]
    return None
