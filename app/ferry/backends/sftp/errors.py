"""paramiko's and the socket's exceptions as Ferry's errors (:func:`map_error`), and what a
refused write means (:func:`refused_write`: read-only, full, over quota, told apart with
``statvfs@openssh.com`` where the server offers it)."""

from __future__ import annotations

import errno
import socket
from typing import Any

from ferry.backends.sftp import paramiko_adapter as adapter
from ferry.core.errors import (
    AuthError,
    FerryError,
    NoSpace,
    PermissionDenied,
    Transient,
    Unsupported,
    from_oserror,
)
from ferry.core.units import format_size


class HostKeyError(AuthError):
    kind = "host-key"


class HostKeyChanged(HostKeyError):
    """The host's key is not the one known_hosts holds for it: of the same type and different,
    or known_hosts holds keys of other types only (OpenSSH calls both "changed"). Refused,
    never offered for trust."""


class ReadOnly(PermissionDenied):
    """The server's folder is on a read-only file system (statvfs says so): permanent."""


class RefusedWithoutReason(NoSpace):
    """A write refused with SFTP's "Failure" by a server that does not answer statvfs (or answers
    with 0 blocks): full, over quota or read-only cannot be told apart, so the job pauses (as for
    a full disk) and the person looks."""


class ServerRefused(FerryError):
    """The server answered an operation with SFTP's reasonless "Failure" status: permanent
    (retrying the same request gets the same answer), never "Connection lost". Its kind is
    FerryError's own (no action to offer)."""


def map_error(exc: BaseException, path: str) -> FerryError:
    import paramiko

    if isinstance(exc, FerryError):
        return exc
    if isinstance(exc, adapter.StatusError):
        return _status(exc, path)
    if isinstance(exc, paramiko.AuthenticationException):
        return AuthError(f"Login failed: {exc}")
    if isinstance(exc, (paramiko.SSHException, EOFError, socket.error)) and not (
        isinstance(exc, OSError) and exc.errno in (errno.ENOENT, errno.EACCES, errno.EEXIST)
    ):
        lost = (errno.ECONNRESET, errno.EPIPE, errno.ECONNREFUSED, errno.ETIMEDOUT)
        if isinstance(exc, OSError) and not isinstance(exc, socket.timeout) and exc.errno not in (None, *lost):
            return from_oserror(exc, path)
        return Transient(f"Connection lost while working on {path}", detail=f"{type(exc).__name__}: {exc}")
    if isinstance(exc, OSError):
        return from_oserror(exc, path)
    return FerryError(f"{type(exc).__name__} on {path}", detail=str(exc))


def _status(exc: adapter.StatusError, path: str) -> FerryError:
    """An SFTP status by its code (never by its text)."""
    detail = f"SFTP status {exc.code}: {exc}"
    if exc.code in (adapter.FX_NO_CONNECTION, adapter.FX_CONNECTION_LOST):
        return Transient(f"Connection lost while working on {path}", detail=detail)
    if exc.code == adapter.FX_OP_UNSUPPORTED:
        return Unsupported(f"The server does not support this operation on {path}", detail=detail)
    # FX_FAILURE (rename onto an existing name, ENOSPC, EROFS, ...) and FX_BAD_MESSAGE.
    return ServerRefused(f"The server refused the operation on {path} (it gave no reason)", detail=detail)


def is_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is SFTP's reasonless "Failure" status (what a write to a full disk, a
    read-only file system or over a quota gets from OpenSSH)."""
    return isinstance(exc, adapter.StatusError) and exc.code == adapter.FX_FAILURE


# Below this much free space a refused write is a full disk (a WRITE of up to 256 KiB failed).
FULL_BELOW = 1 << 20


def refused_write(client: Any, exc: BaseException, folder: str, shown: str) -> FerryError | None:
    """What a "Failure" answer to creating or writing ``shown`` (in ``folder``) means, asked of
    the server with ``statvfs@openssh.com``: :class:`ReadOnly`, or :class:`NoSpace` (full, or
    space left but the write refused: a quota), both permanent, the second pausing the job as a
    full local disk does. None when the server has space and is writable (the caller knows what
    else it may be); without the extension, NoSpace saying that the reason is not known."""
    st = adapter.statvfs(client, folder.encode("utf-8", "surrogateescape"))
    detail = f"SFTP status {getattr(exc, 'code', '?')}: {exc}"
    if st is None:
        return RefusedWithoutReason(
            f"The server refused to write {shown} and gives no reason (no usable statvfs answer): its "
            "disk may be full, a quota reached or the folder read-only",
            detail=detail,
        )
    if st.read_only:
        return ReadOnly(f"The server's folder is read-only: {shown} cannot be written", detail=detail)
    if st.free < FULL_BELOW:
        return NoSpace(f"The server's disk is full ({format_size(st.free)} free) writing {shown}", detail=detail)
    return None


def over_quota(exc: BaseException, shown: str) -> NoSpace:
    """A refused write with space on the disk: a quota (the user's share of the disk) is reached."""
    return NoSpace(
        f"The server refused to write {shown} though its disk has space: your disk quota is probably full",
        detail=f"SFTP status {getattr(exc, 'code', '?')}: {exc}",
    )
