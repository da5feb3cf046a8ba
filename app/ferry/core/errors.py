"""One error hierarchy for the whole engine.

Every error carries a short sentence for the user (``message``), optional technical ``detail``
(shown behind a disclosure in the GUI, with ``-v`` in the CLI), whether retrying may help
(``retriable``) and a suggested ``action``. Classes also derive from the matching builtin so
code that catches ``FileNotFoundError`` or ``PermissionError`` keeps working.

Secrets never go into messages or details: callers pass names and paths, never credentials.
"""

from __future__ import annotations

import errno
from enum import StrEnum


class Action(StrEnum):
    """What the user can do about an error; the GUI turns it into a button."""

    NONE = "none"
    RETRY = "retry"
    LOGIN = "login"
    TRUST_HOST_KEY = "trust-host-key"
    FREE_SPACE = "free-space"
    CHOOSE_POLICY = "choose-policy"
    CHECK_PERMISSIONS = "check-permissions"
    CONSENT = "consent"


class FerryError(Exception):
    """Base of every error Ferry reports to a person."""

    retriable: bool = False
    action: Action = Action.NONE
    kind: str = "error"

    def __init__(self, message: str, detail: str = "", *, action: Action | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        if action is not None:
            self.action = action

    def __str__(self) -> str:
        return self.message


class UsageError(FerryError, ValueError):
    """Bad input from the user: malformed address, unknown site, impossible request."""

    kind = "usage"


class NotFound(FerryError, FileNotFoundError):
    kind = "not-found"


class PermissionDenied(FerryError, PermissionError):
    kind = "permission-denied"
    action = Action.CHECK_PERMISSIONS


class AlreadyExists(FerryError, FileExistsError):
    kind = "already-exists"
    action = Action.CHOOSE_POLICY


class ConflictUnanswered(AlreadyExists):
    """A file that differs from the one already at the destination, with no one to ask (``ask``
    without a terminal or window, or on a route that runs elsewhere: a host's direct copy).
    Counted by this kind, so a front end says it once for all."""

    kind = "conflict"
    action = Action.CHOOSE_POLICY


class NotADirectory(FerryError, NotADirectoryError):
    kind = "not-a-directory"


class IsADirectory(FerryError, IsADirectoryError):
    kind = "is-a-directory"


class NoSpace(FerryError, OSError):
    """The destination is full. The scheduler pauses the job instead of failing every file."""

    kind = "no-space"
    action = Action.FREE_SPACE


class AuthError(FerryError, PermissionError):
    kind = "auth"
    action = Action.LOGIN


class Transient(FerryError, OSError):
    """A failure that may go away by itself: dropped connection, timeout, server busy."""

    kind = "transient"
    retriable = True
    action = Action.RETRY


class CommitInDoubt(Transient):
    """The rename of a written file into place was sent, its answer was lost, and no second look
    could tell whether the server did it. Stored as the task's error kind: the task's next attempt
    first looks at the destination and counts the file copied only on content evidence (never
    size alone), else applies the conflict policy as always."""

    kind = "commit-in-doubt"


class ChecksumMismatch(FerryError):
    kind = "checksum-mismatch"
    retriable = True
    action = Action.RETRY


class Cancelled(FerryError):
    kind = "cancelled"


class Unsupported(FerryError, NotImplementedError):
    """The backend cannot do this (its capabilities say so)."""

    kind = "unsupported"


class UnsafeName(FerryError, ValueError):
    """A remote name that would escape the destination or cannot be a local file name."""

    kind = "unsafe-name"


class LinkInTheWay(FerryError):
    """A symbolic link inside a job's destination stands where a folder must go (or is the folder
    itself). Ferry never writes, creates, renames or deletes through such a link: ``link`` is the
    link's own path, so the copy can apply the conflict policy to it (keep it, or replace the link
    itself, never what it points to)."""

    kind = "link-in-the-way"
    action = Action.CHOOSE_POLICY

    def __init__(self, message: str, link: str, detail: str = "") -> None:
        super().__init__(message, detail)
        self.link = link


_ERRNO_MAP: dict[int, type[FerryError]] = {
    errno.ENOENT: NotFound,
    errno.EACCES: PermissionDenied,
    errno.EPERM: PermissionDenied,
    errno.EROFS: PermissionDenied,
    errno.EEXIST: AlreadyExists,
    errno.ENOTEMPTY: AlreadyExists,
    errno.ENOTDIR: NotADirectory,
    errno.EISDIR: IsADirectory,
    errno.ENOSPC: NoSpace,
    errno.EDQUOT: NoSpace,
    errno.EFBIG: NoSpace,
    errno.EIO: Transient,
    errno.EAGAIN: Transient,
    errno.EINTR: Transient,
    errno.ETIMEDOUT: Transient,
    errno.ECONNRESET: Transient,
    errno.ECONNABORTED: Transient,
    errno.EPIPE: Transient,
    errno.ESTALE: Transient,
}

_ERRNO_WORDS: dict[type[FerryError], str] = {
    NotFound: "No such file or folder",
    PermissionDenied: "Permission denied",
    AlreadyExists: "Already exists",
    NotADirectory: "Not a folder",
    IsADirectory: "Is a folder",
    NoSpace: "No space left on the destination",
    Transient: "Temporary input/output failure",
}


def from_oserror(exc: OSError, where: str) -> FerryError:
    """Map an ``OSError`` to the hierarchy; ``where`` names the path in the user's words."""
    if isinstance(exc, FerryError):
        return exc
    cls = _ERRNO_MAP.get(exc.errno or 0, FerryError)
    words = _ERRNO_WORDS.get(cls) or (exc.strerror or type(exc).__name__)
    err = cls(f"{words}: {where}", detail=f"{type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


def describe(exc: BaseException) -> str:
    """One line for a person, whatever the exception."""
    if isinstance(exc, FerryError):
        return exc.message
    if isinstance(exc, OSError):
        return from_oserror(exc, exc.filename or "?").message
    return f"{type(exc).__name__}: {exc}"


def error_kind(exc: BaseException) -> str:
    if isinstance(exc, FerryError):
        return exc.kind
    if isinstance(exc, OSError):
        return from_oserror(exc, "").kind
    return "error"


def _kinds() -> dict[str, Action]:
    out: dict[str, Action] = {}
    stack: list[type[FerryError]] = [FerryError]
    while stack:
        cls = stack.pop()
        out.setdefault(cls.kind, cls.action)
        stack.extend(cls.__subclasses__())
    return out


def action_for_kind(kind: str | None) -> Action:
    """The suggested action for an error kind stored as a value (a task's or a job's)."""
    if not kind:
        return Action.NONE
    found = _kinds().get(kind)
    return found if found is not None else Action.RETRY
