"""paramiko's and the socket's exceptions as Ferry's errors (:func:`map_error`)."""

from __future__ import annotations

import errno
import socket

from ferry.core.errors import AuthError, FerryError, Transient, from_oserror


class HostKeyError(AuthError):
    kind = "host-key"


def map_error(exc: BaseException, path: str) -> FerryError:
    import paramiko

    if isinstance(exc, FerryError):
        return exc
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
        if exc.errno is None:
            # SFTP's generic "Failure": the server gives no reason (e.g. rename onto an existing name).
            return FerryError(f"The server refused the operation on {path}", detail=str(exc))
        return from_oserror(exc, path)
    return FerryError(f"{type(exc).__name__} on {path}", detail=str(exc))
