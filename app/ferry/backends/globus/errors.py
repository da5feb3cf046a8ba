"""The Transfer service's answers as Ferry's errors, in one place (the service's words kept)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ferry.core.errors import (
    Action,
    AlreadyExists,
    AuthError,
    FerryError,
    IsADirectory,
    NotADirectory,
    NotFound,
    PermissionDenied,
    Transient,
    UsageError,
)

if TYPE_CHECKING:
    import globus_sdk


def is_consent(exc: globus_sdk.GlobusAPIError) -> bool:
    """The service asks for consent to a scope (answered by logging in again with it)."""
    return exc.code == "ConsentRequired" or bool(exc.info.consent_required)


def map_error(exc: BaseException, what: str) -> FerryError:
    """One place that turns the Transfer service's answers into Ferry's errors (service text kept)."""
    import globus_sdk

    if isinstance(exc, FerryError):
        return exc
    if isinstance(exc, globus_sdk.NetworkError):
        return Transient(f"Cannot reach Globus while {what}: {type(exc).__name__}", detail=str(exc)[:300])
    if not isinstance(exc, globus_sdk.GlobusAPIError):
        return FerryError(f"Globus error while {what}: {type(exc).__name__}: {exc}")
    code = exc.code or ""
    said = (exc.message or code or f"HTTP {exc.http_status}").strip()
    detail = f"HTTP {exc.http_status} {code} request_id={exc.request_id or '-'}"
    if is_consent(exc):
        return AuthError(
            f"Globus needs your consent before {what}: run 'ferry globus login' and accept ({said})",
            detail=detail,
            action=Action.CONSENT,
        )
    cls, words = _classify(code, exc.http_status)
    return cls(words.format(what=what, said=said), detail=detail)


# The service's error codes and HTTP statuses, first match wins (the codes are values the service
# documents; its English message is only shown).
_RULES: tuple[tuple[Callable[[str, int], bool], type[FerryError], str], ...] = (
    (
        lambda c, s: any(w in c for w in ("GCDisconnected", "EndpointNotConnected", "NotConnected")),
        Transient,
        "The collection is offline (its Globus Connect Personal is not connected) while {what}: {said}",
    ),
    (
        lambda c, s: s == 401 or c in ("AuthenticationFailed", "Unauthorized"),
        AuthError,
        "Globus login needed: {said} (run 'ferry globus login')",
    ),
    (lambda c, s: "NotFound" in c or s == 404, NotFound, "Not found on Globus while {what}: {said}"),
    (lambda c, s: c.endswith("Exists"), AlreadyExists, "Already exists on Globus while {what}: {said}"),
    (lambda c, s: "NotDirectory" in c, NotADirectory, "Not a folder on Globus while {what}: {said}"),
    (lambda c, s: "IsDirectory" in c, IsADirectory, "Is a folder on Globus while {what}: {said}"),
    (
        lambda c, s: s == 403 or "PermissionDenied" in c or "Forbidden" in c,
        PermissionDenied,
        "Permission denied by Globus while {what}: {said}",
    ),
    (
        lambda c, s: s in (429, 500, 502, 503, 504) or c in ("ServiceUnavailable", "EndpointBusy"),
        Transient,
        "Globus is busy or unreachable while {what}: {said}",
    ),
    (lambda c, s: s == 400 and "Bad" in c, UsageError, "Globus refused the request while {what}: {said}"),
)


def _classify(code: str, status: int) -> tuple[type[FerryError], str]:
    for test, cls, words in _RULES:
        if test(code, status):
            return cls, words
    return FerryError, "Globus refused while {what}: {said}"
