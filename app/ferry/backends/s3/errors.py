"""botocore's exceptions and S3's error answers as Ferry's errors: :func:`map_error`.

Which error it is, is decided from the service's error code and HTTP status, never from the words
of a message (a bucket or key may well be named ``bucket``, ``not found`` or ``permission``). The
lean client's error answers (:class:`~ferry.backends.s3.lean.LeanError`) and a DeleteObjects
per-key error (:class:`ServiceAnswer`) carry the same ``response`` shape as botocore's
``ClientError``, so one function words them all, without importing botocore for them.
"""

from __future__ import annotations

from typing import Any

from ferry.core.errors import (
    AlreadyExists,
    AuthError,
    ChecksumMismatch,
    FerryError,
    NoSpace,
    NotFound,
    PermissionDenied,
    Transient,
    UsageError,
)

# What S3 and the S3-compatible stores answer for a body that does not match its checksum
# (AWS, Ceph RGW, rclone: BadDigest; MinIO: XAmzContentChecksumMismatch).
DIGEST_REFUSALS = (
    "BadDigest",
    "InvalidDigest",
    "XAmzContentChecksumMismatch",
    "InvalidChecksum",
    "XAmzContentSHA256Mismatch",
)


class Archived(FerryError):
    """An archived object (GLACIER, DEEP_ARCHIVE) that has not been restored yet."""

    kind = "archived"


class NoSuchBucket(UsageError):
    """The bucket itself does not exist (S3's ``NoSuchBucket``), as opposed to a key in it: callers
    decide by this type, never by the words of a message (a key or bucket may well be named
    "bucket"). Bad input, not a missing file: a destination in a bucket that does not exist is
    refused before anything is queued (exit 2), where "not found" would read as "create it"."""


class UploadGone(NotFound):
    """The multipart upload no longer exists (S3's ``NoSuchUpload``): aborted, expired, or already
    assembled by a CompleteMultipartUpload whose answer was lost. A writer that sent that complete
    decides by this type (never by the words) whether to look for its own object under the key."""


class ServiceAnswer(Exception):
    """An error answer in the ``response`` shape botocore's ClientError has (a DeleteObjects
    per-key error): what :func:`map_error` reads."""

    def __init__(self, code: str, status: int) -> None:
        super().__init__(code)
        self.response: dict[str, Any] = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


def error_code(exc: BaseException) -> str:
    """The service's error code of an error answer (botocore's or the lean client's), or ""."""
    return str((getattr(exc, "response", None) or {}).get("Error", {}).get("Code") or "")


def http_status(exc: BaseException) -> int:
    """The HTTP status of an error answer, or 0."""
    return int((getattr(exc, "response", None) or {}).get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _code(exc: Any) -> tuple[str, int, dict[str, str]]:
    resp = getattr(exc, "response", None) or {}
    err = resp.get("Error", {}) or {}
    meta = resp.get("ResponseMetadata", {}) or {}
    return str(err.get("Code", "")), int(meta.get("HTTPStatusCode") or 0), dict(meta.get("HTTPHeaders") or {})


def map_error(exc: BaseException, what: str, *, bucket: str = "", read_timeout: float = 60.0) -> FerryError:
    """One place where botocore's exceptions become Ferry's, each with a sentence for a person.

    ``what`` names the thing in the user's words (``s3://bucket/key``); no secret ever goes in.
    ``read_timeout`` is the wait the settings gave botocore (the sentence names it).
    """
    if isinstance(exc, FerryError):
        return exc
    detail = f"{type(exc).__name__}: {exc}"
    # An error answer (botocore's ClientError, the lean client's LeanError) before botocore is
    # imported: a download's "no such key" must not load botocore just to be worded (~0.03 s).
    if isinstance(getattr(exc, "response", None), dict):
        code, status, headers = _code(exc)
        return _client_error(code, status, headers, what, bucket, detail)
    import botocore.exceptions as bx

    if isinstance(exc, bx.ClientError):
        code, status, headers = _code(exc)
        return _client_error(code, status, headers, what, bucket, detail)
    if isinstance(exc, (bx.UnauthorizedSSOTokenError, bx.SSOTokenLoadError, bx.TokenRetrievalError)):
        return AuthError(
            "The AWS SSO session has expired or was never started: run 'aws sso login' (with --profile "
            "if you use one) and try again",
            detail,
        )
    if isinstance(exc, bx.NoCredentialsError):
        return AuthError(
            "No S3 credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, choose a profile with "
            "AWS_PROFILE, or save a site with an access key (ferry sites add NAME s3://BUCKET --option "
            "access_key_id=... --password)",
            detail,
        )
    if isinstance(exc, bx.PartialCredentialsError):
        return AuthError(f"Incomplete S3 credentials: {exc}", detail)
    if isinstance(exc, bx.NoRegionError):
        return UsageError("No AWS region configured: set AWS_DEFAULT_REGION or a site's region option", detail)
    if isinstance(exc, bx.ProfileNotFound):
        return UsageError(str(exc), detail)
    if isinstance(exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError)):
        return Transient(f"Cannot reach the S3 service ({what}): is the endpoint right and up?", detail)
    if isinstance(exc, bx.ReadTimeoutError):
        return Transient(
            f"The S3 server did not answer within {read_timeout:g} s ({what}), on any attempt; "
            "it may be overloaded or stuck (FERRY_S3_READ_TIMEOUT sets the wait)",
            detail,
        )
    if isinstance(exc, (bx.ConnectionClosedError, bx.ResponseStreamingError, bx.HTTPClientError)):
        return Transient(f"The S3 connection dropped while {what}", detail)
    if isinstance(exc, bx.ParamValidationError):
        return UsageError(f"Invalid S3 request while {what}: {exc}", detail)
    if isinstance(exc, bx.BotoCoreError):
        return Transient(f"S3 failure while {what}: {exc}", detail)
    if isinstance(exc, OSError):
        return Transient(f"Network failure while {what}: {exc.strerror or exc}", detail)
    return FerryError(f"S3 failure while {what}: {type(exc).__name__}", detail)


# Codes whose sentence needs nothing but the code: credentials and the clock.
_AUTH_CODES = {
    "InvalidAccessKeyId": (
        "The S3 access key is not known to this service: check AWS_ACCESS_KEY_ID, the profile or the "
        "site's access_key_id"
    ),
    "SignatureDoesNotMatch": (
        "The S3 secret key does not match the access key (the request signature was refused): check "
        "AWS_SECRET_ACCESS_KEY, the profile or the secret stored for the site"
    ),
    **dict.fromkeys(
        ("RequestTimeTooSkewed", "RequestExpired"),
        "This computer's clock is too far from the S3 server's (requests are refused as expired or "
        "from the future): set the clock right (NTP) and try again",
    ),
    **dict.fromkeys(
        ("ExpiredToken", "TokenRefreshRequired", "InvalidToken", "ExpiredTokenException"),
        "The temporary AWS credentials (SSO or assumed role) have expired: log in again (aws sso login) and retry",
    ),
}
_REGION_CODES = ("PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException")
_DENIED_CODES = ("AccessDenied", "AllAccessDisabled", "Forbidden", "403")
_BUSY_CODES = ("SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling")


def _client_error(code: str, status: int, headers: dict[str, str], what: str, bucket: str, detail: str) -> FerryError:
    """An S3 error answer as Ferry's error: by its code, then by its HTTP status."""
    b = f"s3://{bucket}" if bucket else "the bucket"
    found = _missing(code, status, what, b, detail)
    if found is None and code in _AUTH_CODES:
        found = AuthError(_AUTH_CODES[code], detail)
    if found is None:
        found = _refused(code, status, headers, what, b, detail)
    return found if found is not None else FerryError(f"S3 error {code or status} while {what}", detail)


def _missing(code: str, status: int, what: str, b: str, detail: str) -> FerryError | None:
    """No such bucket, key or upload; an object archived and not restored."""
    if code == "NoSuchBucket":
        return NoSuchBucket(f"No such bucket: {b} (check the name, or create it with 'ferry s3 mb {b}')", detail)
    if code in ("NoSuchKey", "NotFound", "404") or (status == 404 and code != "NoSuchUpload"):
        return NotFound(f"No such object: {what}", detail)
    if code == "NoSuchUpload":
        return UploadGone(f"The multipart upload for {what} no longer exists (aborted or cleaned up)", detail)
    if code == "InvalidObjectState":
        return Archived(
            f"{what} is archived (Glacier/Deep Archive) and not restored: request a restore with "
            f"'ferry s3 restore {what}', then the queue waits for it",
            detail,
        )
    return None


def _refused(code: str, status: int, headers: dict[str, str], what: str, b: str, detail: str) -> FerryError | None:
    """Another region, no permission, a refused condition or body, a full store, a busy one."""
    region = headers.get("x-amz-bucket-region")
    if code in _REGION_CODES or status == 301:
        where = f"region {region}" if region else "another region"
        return UsageError(
            f"{b} is in {where}, not the one configured: set AWS_DEFAULT_REGION"
            f"{'=' + region if region else ''} or the site's region option",
            detail,
        )
    if code in _DENIED_CODES or status == 403:
        return PermissionDenied(f"Permission denied by S3 while {what}", detail)
    if code in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
        return AlreadyExists(f"Bucket {b} already exists", detail)
    if code in ("PreconditionFailed", "ConditionalRequestConflict") or status == 412:
        return AlreadyExists(f"Already exists: {what}", detail)
    if code in DIGEST_REFUSALS:
        return ChecksumMismatch(f"S3 refused {what}: the bytes it received do not match their checksum", detail)
    if code == "EntityTooLarge":
        return UsageError(f"Too large for S3: {what}", detail)
    if code in ("QuotaExceeded", "XMinioStorageFull", "StorageFull"):
        return NoSpace(f"The S3 store is full or over quota while {what}", detail)
    if code in _BUSY_CODES or status >= 500:
        return Transient(f"S3 is busy or failing ({code or status}) while {what}; will retry", detail)
    return None
