"""SFTP requests as Ferry sends them: pipelined where paramiko's own calls wait for each reply,
and paths kept as the exact bytes the server uses."""

from __future__ import annotations

import errno
import logging
import stat as stat_mod
import struct
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from ferry.backends.base import Entry, Kind
from ferry.backends.sftp import fastpath

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
    from paramiko.sftp import CMD_CLOSE, CMD_HANDLE, CMD_NAME, CMD_OPENDIR, CMD_READDIR, CMD_STATUS
    from paramiko.sftp_attr import SFTPAttributes

    t, msg = client._request(CMD_OPENDIR, wire(path))
    if t != CMD_HANDLE:
        raise OSError(errno.EIO, "Expected a folder handle")
    handle = msg.get_binary()
    pending: list[int] = []
    done = False
    try:
        while not done:
            while len(pending) < depth:
                pending.append(client._async_request(type(None), CMD_READDIR, handle))
            num = pending.pop(0)
            while True:
                t, data = client._read_packet()
                reply = Message(data)
                if reply.get_int() == num:
                    break  # replies come in order; anything else is a stale reply to skip
            if t == CMD_STATUS:
                try:
                    client._convert_status(reply)
                except EOFError:
                    done = True
                    continue
            if t != CMD_NAME:
                raise OSError(errno.EIO, f"Unexpected SFTP reply {t} to READDIR")
            for _ in range(reply.get_int()):
                name = reply.get_string().decode("utf-8", "surrogateescape")
                longname = reply.get_string().decode("utf-8", "replace")
                yield SFTPAttributes._from_msg(reply, name, longname)  # type: ignore[attr-defined]
    finally:
        # Drain what is still in flight so the channel stays usable for the next borrower.
        for num in pending:
            try:
                while Message(client._read_packet()[1]).get_int() != num:
                    pass
            except Exception:
                break
        try:
            client._request(CMD_CLOSE, handle)
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


def read_back_replies(
    client: Any, reads: list[int], close: int, hasher: Any | None, size: int, failure: BaseException | None
) -> str | None:
    """Collect the replies of a read-back (READs sent behind the last WRITEs, then CLOSE): every
    reply is read even after a failure, so the channel stays in step for the next file; the
    first failure is raised after that. Returns the digest of the bytes the server sent back,
    ``short:N`` when it held fewer than ``size`` (equal to no digest: the copy reports a
    mismatch), or None without a hasher."""
    from paramiko.sftp import CMD_DATA

    got = 0
    for num in reads:
        try:
            t, msg = client._read_response(num)
            if t == CMD_DATA:
                chunk: bytes = msg.get_binary()
                if hasher is not None and failure is None:
                    hasher.update(chunk)
                    got += len(chunk)
        except EOFError:
            pass  # the file is shorter than what was written: the size check says so
        except Exception as exc:
            failure = failure or exc
    try:
        client._read_response(close)
    except Exception as exc:
        failure = failure or exc
    if failure is not None:
        raise failure
    if hasher is None:
        return None
    if got != size:
        return f"short:{got}"
    return str(hasher.hexdigest())


def stat_and_first_read(client: Any, f: Any, offset: int, size: int) -> tuple[Any, bytes]:
    """FSTAT and the first READ in flight together: a small file's size and bytes in one round
    trip. Both replies are read whatever happens (the channel stays in step); a READ error
    (a folder, say) is left for the caller to judge from the attributes."""
    from paramiko.sftp import CMD_ATTRS, CMD_DATA, CMD_FSTAT, CMD_READ, int64
    from paramiko.sftp_attr import SFTPAttributes

    n_stat = client._async_request(type(None), CMD_FSTAT, f.handle)
    n_read = client._async_request(type(None), CMD_READ, f.handle, int64(offset), int(size))
    st: Any = None
    head = b""
    failure: BaseException | None = None
    try:
        t, msg = client._read_response(n_stat)
        if t != CMD_ATTRS:
            raise OSError(errno.EIO, "Expected attributes")
        st = SFTPAttributes._from_msg(msg)  # type: ignore[attr-defined]
    except Exception as exc:
        failure = exc
    try:
        t, msg = client._read_response(n_read)
        if t == CMD_DATA:
            head = msg.get_binary()
    except Exception:  # EOF (empty file) or EISDIR: the attributes say which
        pass
    if failure is not None:
        raise failure
    return st, head


def setstat_then(client: Any, path: bytes, mtime: datetime | None, how: str, new: bytes) -> None:
    """Set ``path``'s times (if asked) and rename it, both requests in flight at once: one round
    trip per committed file instead of two. The server answers in order; both answers are read
    even when the first is an error, so the channel stays in step."""
    from paramiko.sftp import CMD_EXTENDED, CMD_RENAME, CMD_SETSTAT
    from paramiko.sftp_attr import SFTPAttributes

    nums = []
    if mtime is not None:
        attr = SFTPAttributes()
        attr.st_atime = attr.st_mtime = int(mtime.timestamp())  # SFTP v3 carries whole seconds
        nums.append(client._async_request(type(None), CMD_SETSTAT, path, attr))
    if how == "rename":
        nums.append(client._async_request(type(None), CMD_RENAME, path, new))
    else:
        nums.append(client._async_request(type(None), CMD_EXTENDED, how, path, new))
    errors: list[BaseException | None] = []
    for num in nums:
        try:
            client._read_response(num)
            errors.append(None)
        except Exception as exc:
            errors.append(exc)
    if errors[-1] is not None:
        raise errors[-1]
    if errors[0] is not None:  # renamed, only the time could not be set: not worth failing the file
        log.warning("could not set the modification time of %s: %s", from_wire(new), errors[0])


def send_write(client: Any, handle: bytes, pos: int, data: memoryview) -> int:
    """Send one SFTP WRITE request; returns its request number (its reply is read later with
    ``client._read_response``). paramiko's own ``_async_request`` copies the data four times
    before the channel sees it and then re-slices the rest of the message after every 32 KiB
    SSH packet it sends (a 255 KiB WRITE copied ~1 MB that way); profiled, building and sending
    messages was two thirds of the upload's Python time. Here the data is copied once, into the
    plaintext of the SSH packets (``fastpath.send_data``)."""
    from paramiko.sftp import CMD_WRITE

    with client._lock:  # numbering as _async_request does, so _read_response knows the reply
        num: int = client.request_number
        client._expecting[num] = type(None)
        client.request_number = num + 1
    head = struct.pack(">IBII", 21 + len(handle) + len(data), CMD_WRITE, num, len(handle))  # length after itself
    # The data goes from the caller's buffer straight into the SSH packets' plaintext.
    fastpath.send_data(client.sock, (head + handle + struct.pack(">QI", pos, len(data)), data))
    return num
