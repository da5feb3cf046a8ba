"""The Transfer service's answers as Ferry's errors, in one place (the service's words kept)."""

from __future__ import annotations

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
    if "GCDisconnected" in code or "EndpointNotConnected" in code or "NotConnected" in code:
        return Transient(
            f"The collection is offline (its Globus Connect Personal is not connected) while {what}: {said}",
            detail=detail,
        )
    if exc.http_status == 401 or code in ("AuthenticationFailed", "Unauthorized"):
        return AuthError(f"Globus login needed: {said} (run 'ferry globus login')", detail=detail)
    if code.endswith("NotFound") or "NotFound" in code or exc.http_status == 404:
        return NotFound(f"Not found on Globus while {what}: {said}", detail=detail)
    if code.endswith(".Exists") or code.endswith("Exists"):
        return AlreadyExists(f"Already exists on Globus while {what}: {said}", detail=detail)
    if "NotDirectory" in code:
        return NotADirectory(f"Not a folder on Globus while {what}: {said}", detail=detail)
    if "IsDirectory" in code:
        return IsADirectory(f"Is a folder on Globus while {what}: {said}", detail=detail)
    if exc.http_status == 403 or "PermissionDenied" in code or "Forbidden" in code:
        return PermissionDenied(f"Permission denied by Globus while {what}: {said}", detail=detail)
    if exc.http_status in (429, 500, 502, 503, 504) or code in ("ServiceUnavailable", "EndpointBusy"):
        return Transient(f"Globus is busy or unreachable while {what}: {said}", detail=detail)
    if exc.http_status == 400 and "Bad" in code:
        return UsageError(f"Globus refused the request while {what}: {said}", detail=detail)
    return FerryError(f"Globus refused while {what}: {said}", detail=detail)
